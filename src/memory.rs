//! The in-process store: a map from key to (owner, expiry). Per-isolate: it coordinates the
//! callers that share it and nothing more — right for tests and single-process apps.

use crate::prelude::*;
use alloc::collections::VecDeque;
use core::cell::{Cell, RefCell};
use core::hash::BuildHasher;

use alloc::rc::Rc;
use core::convert::Infallible;
use core::task::Waker;
use hashbrown::hash_map::{Entry, HashMap};

use crate::grant::{Fence, Grant};
use crate::input::{Key, Ttl};
use crate::race::{poll_until, race};
use crate::rows::{self, Change, Decision, RowView};
use crate::runtime::Runtime;
use crate::store::{ForceRelease, LockStore, Wait};
use crate::token::OwnerToken;

/// Expired rows are swept when the map reaches this many rows, and from then on whenever it
/// doubles the size left by the previous sweep: amortised O(1) per acquire, and the map never
/// holds more than about twice the live keys (plus this floor), however many keys expire.
const SWEEP_FLOOR: usize = 64;

/// Hashes the store's keys with SipHash under keys drawn at random, so that callers who choose
/// lock keys (an application may take them from its users) cannot choose colliding ones. Both
/// maps share one draw, made on the store's first operation that hashes, never at construction
/// (Workers forbid randomness at module load), and before the map is borrowed: drawing may call
/// JS (`crypto.getRandomValues`, when the token pool is spent), which must not find the store in
/// the middle of a change. If the platform has no randomness the keys stay zero — and no owner
/// token can be minted either. (The Durable Object's waiter map uses it too, drawn in the
/// object's constructor: a request is running then.)
#[derive(Clone, Default)]
pub(crate) struct KeyHasher(Rc<Cell<Option<(u64, u64)>>>);

impl KeyHasher {
    /// The keys, drawn first if this is their first use.
    #[inline]
    pub(crate) fn keys(&self) -> (u64, u64) {
        match self.0.get() {
            Some(keys) => keys,
            None => self.draw(),
        }
    }

    // Once per store: kept out of line so that every hash's path stays a load and a branch.
    #[cold]
    #[inline(never)]
    fn draw(&self) -> (u64, u64) {
        let keys = crate::token::random_pair().unwrap_or((0, 0));
        self.0.set(Some(keys));
        keys
    }
}

impl BuildHasher for KeyHasher {
    #[allow(deprecated)] // `SipHasher` is SipHash-2-4, deprecated only in favour of std's hasher.
    type Hasher = core::hash::SipHasher;

    #[allow(deprecated)]
    fn build_hasher(&self) -> Self::Hasher {
        let (k0, k1) = self.keys();
        core::hash::SipHasher::new_with_keys(k0, k1)
    }
}

struct Row {
    owner: OwnerToken,
    expires_at: u64,
}

impl Row {
    fn view(&self) -> RowView<'_> {
        RowView {
            owner: self.owner.as_str(),
            expires_at: self.expires_at,
        }
    }
}

/// A caller parked in a key's queue.
struct Ticket {
    owner: OwnerToken,
    ttl: Ttl,
    /// When it joined the queue, by the store's clock.
    since: u64,
    /// When it stops waiting, by the store's clock.
    deadline: u64,
    /// Set by the hand-over; taken by the waiting caller.
    grant: Cell<Option<Grant>>,
    /// Set by the queue's timekeeper once `deadline` has passed.
    timed_out: Cell<bool>,
    /// Set to make the waiter look again (it may have become the timekeeper).
    poked: Cell<bool>,
    /// The waiting caller's waker, woken by the hand-over.
    waker: RefCell<Option<Waker>>,
    /// The caller stopped waiting; the hand-over skips it.
    gone: Cell<bool>,
}

impl Ticket {
    fn wake(&self) {
        let waker = self.waker.borrow_mut().take();
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    fn poke(&self) {
        self.poked.set(true);
        self.wake();
    }
}

/// A key's waiters, in arrival order. One of them, the timekeeper, keeps the queue's only timer:
/// it wakes at the earliest waiter deadline or the holder's expiry and acts for everyone. The
/// role goes to the newest waiter when the timekeeper leaves, so a steadily contended key sets a
/// timer about once per queue length, not once per waiter.
#[derive(Default)]
struct Queue {
    tickets: VecDeque<Rc<Ticket>>,
    keeper: Option<Rc<Ticket>>,
    /// When the timekeeper's timer fires.
    armed_until: Option<u64>,
}

/// An in-memory [`LockStore`]. Every operation completes synchronously (the futures are ready
/// at once), so driving it from the core costs no event-loop round trip.
///
/// Fences come from one counter per store: strictly increasing across all keys, so per key too,
/// and nothing per key outlives its row.
///
/// Waiting ([`LockStore::acquire_or_wait`]) is a FIFO queue per key: a release hands the key to
/// the oldest waiter synchronously, and when a holder's TTL passes the oldest waiter (woken by
/// a timer at that moment) takes it over. A newcomer never overtakes a waiter.
///
/// ```
/// use keel_lock::{Key, MemoryLockStore, OwnerToken, Ttl};
/// use keel_lock::virtual_time::VirtualRuntime;
///
/// let rt = VirtualRuntime::new();
/// let store = MemoryLockStore::new(rt.clone());
/// let key = Key::new("invoice:42")?;
/// let (alice, bob) = (OwnerToken::mint()?, OwnerToken::mint()?);
/// // Atomic set-if-absent; the grant carries the key's next fence.
/// assert!(store.acquire_sync(&key, &alice, Ttl::from_ms(1_000)?).is_some());
/// assert!(store.acquire_sync(&key, &bob, Ttl::from_ms(1_000)?).is_none());
/// assert!(!store.release_sync(&key, &bob)); // only the owner may release
/// // Expiry is judged by the store's runtime clock: an expired row counts as absent.
/// rt.advance(1_000);
/// assert!(store.acquire_sync(&key, &bob, Ttl::from_ms(1_000)?).is_some());
/// assert!(!store.release_sync(&key, &alice)); // alice's late release leaves bob's hold alone
/// assert!(store.release_sync(&key, &bob));
/// assert_eq!(store.stored_rows(), 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct MemoryLockStore<R: Runtime> {
    rows: RefCell<HashMap<Key, Row, KeyHasher>>,
    queues: RefCell<HashMap<Key, Queue, KeyHasher>>,
    /// The maps' hasher, kept to draw its keys before a map is borrowed.
    hasher: KeyHasher,
    next_sweep_at: Cell<usize>,
    last_fence: Cell<Option<Fence>>,
    runtime: R,
}

impl<R: Runtime> MemoryLockStore<R> {
    /// An empty store whose expiry is judged by `runtime`'s clock.
    pub fn new(runtime: R) -> Self {
        let hasher = KeyHasher::default();
        MemoryLockStore {
            rows: RefCell::new(HashMap::with_hasher(hasher.clone())),
            queues: RefCell::new(HashMap::with_hasher(hasher.clone())),
            hasher,
            next_sweep_at: Cell::new(SWEEP_FLOOR),
            last_fence: Cell::new(None),
            runtime,
        }
    }

    /// Rows currently stored, expired ones included (for tests of the cleanup bound).
    pub fn stored_rows(&self) -> usize {
        self.rows.borrow().len()
    }

    /// Callers waiting in queues right now, over all keys (for tests that queues are cleaned).
    pub fn waiting(&self) -> usize {
        self.queues.borrow().values().map(|q| q.tickets.len()).sum()
    }

    /// Deletes every expired row now and answers how many went.
    pub fn purge_expired(&self) -> usize {
        self.purge_expired_at(self.runtime.monotonic_ms())
    }

    /// [`MemoryLockStore::purge_expired`] as of `now`, so that one decision reads the clock once.
    fn purge_expired_at(&self, now: u64) -> usize {
        let mut rows = self.rows.borrow_mut();
        let before = rows.len();
        rows.retain(|_, row| row.expires_at > now);
        let removed = before - rows.len();
        self.next_sweep_at.set((rows.len() * 2).max(SWEEP_FLOOR));
        removed
    }

    /// Reads `key`'s row, asks [`crate::rows`] what to do, applies it, answers `granted`.
    fn decide(
        &self,
        key: &Key,
        owner: &OwnerToken,
        rule: impl FnOnce(Option<RowView<'_>>) -> Decision,
    ) -> bool {
        // One hash of the key per decision: the entry is read and changed in place.
        self.hasher.keys();
        let mut rows = self.rows.borrow_mut();
        match rows.entry(key.clone()) {
            Entry::Occupied(mut entry) => {
                let decision = rule(Some(entry.get().view()));
                match decision.change {
                    Change::Keep => {}
                    Change::Delete => {
                        entry.remove();
                    }
                    Change::Put { expires_at } => {
                        let row = entry.get_mut();
                        row.owner = owner.clone();
                        row.expires_at = expires_at;
                    }
                }
                decision.granted
            }
            Entry::Vacant(entry) => {
                let decision = rule(None);
                if let Change::Put { expires_at } = decision.change {
                    entry.insert(Row {
                        owner: owner.clone(),
                        expires_at,
                    });
                }
                decision.granted
            }
        }
    }

    /// Synchronous [`LockStore::acquire`]: the operations are public in this form so bindings
    /// can skip the future machinery entirely.
    pub fn acquire_sync(&self, key: &Key, owner: &OwnerToken, ttl: Ttl) -> Option<Grant> {
        self.acquire_at(key, owner, ttl, self.runtime.monotonic_ms())
    }

    /// [`MemoryLockStore::acquire_sync`] at `now`, a reading of the runtime's monotonic clock
    /// the caller just took (a binding that read it anyway saves a second read).
    pub(crate) fn acquire_at(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
        now: u64,
    ) -> Option<Grant> {
        if self.rows.borrow().len() >= self.next_sweep_at.get() {
            self.purge_expired_at(now);
        }
        // A key whose holder just expired goes to its oldest waiter first, not to this caller.
        self.hand_over(key, now);
        self.take(key, owner, ttl, now)
    }

    /// Set-if-absent without looking at the queue.
    fn take(&self, key: &Key, owner: &OwnerToken, ttl: Ttl, now: u64) -> Option<Grant> {
        if !self.decide(key, owner, |row| rows::acquire(row, now, ttl)) {
            return None;
        }
        // After 2^53 − 1 grants (centuries at a million a second) the counter is spent and
        // grants carry no fence rather than a repeated one.
        let fence = match self.last_fence.get() {
            None => Some(Fence::FIRST),
            Some(last) => last.next(),
        };
        if fence.is_some() {
            self.last_fence.set(fence);
        }
        Some(Grant::new(fence))
    }

    /// Synchronous [`LockStore::release`]; a waiter, if any, holds the key when it returns.
    pub fn release_sync(&self, key: &Key, owner: &OwnerToken) -> bool {
        self.release_at(key, owner, self.runtime.monotonic_ms())
    }

    /// [`MemoryLockStore::release_sync`] at `now` on the store's monotonic clock, read by the
    /// caller (the JS binding reads it in JS, saving a call out of the wasm).
    pub(crate) fn release_at(&self, key: &Key, owner: &OwnerToken, now: u64) -> bool {
        let released = self.decide(key, owner, |row| rows::release(row, now, owner));
        if released {
            self.hand_over(key, now);
        }
        released
    }

    /// When `key` is free at `now` and has waiters, grants it to the oldest one still waiting
    /// and wakes it. Waiters that left are dropped from the queue, and so are those whose
    /// deadline has passed by `now` even if the timekeeper's timer has not fired yet (a late
    /// timer must not turn a wait that ran out into a grant); an emptied queue is removed.
    fn hand_over(&self, key: &Key, now: u64) {
        let mut ran_out = Vec::new();
        let next = {
            let mut queues = self.queues.borrow_mut();
            let Some(queue) = queues.get_mut(key.as_str()) else {
                return;
            };
            let held = self
                .rows
                .borrow()
                .get(key.as_str())
                .is_some_and(|row| row.expires_at > now);
            if held {
                return;
            }
            let tickets = &mut queue.tickets;
            while let Some(front) = tickets.front() {
                if front.gone.get() || front.timed_out.get() {
                    tickets.pop_front();
                } else if front.deadline <= now {
                    front.timed_out.set(true);
                    ran_out.extend(tickets.pop_front());
                } else {
                    break;
                }
            }
            let next = tickets.pop_front();
            if tickets.is_empty() && queue.keeper.is_none() {
                queues.remove(key.as_str());
            }
            next
        };
        // Told with no store borrow held, as below.
        ran_out.iter().for_each(|t| t.wake());
        let Some(ticket) = next else { return };
        let grant = self
            .take(key, &ticket.owner, ticket.ttl, now)
            .map(|g| g.waited(now.saturating_sub(ticket.since)));
        ticket.grant.set(grant);
        // Woken with no store borrow held: a waker may poll its waiter right away.
        ticket.wake();
        // The new holder may expire before the timekeeper's timer: make it look again.
        self.keep_time_by(key, now.saturating_add(ticket.ttl.as_ms()));
    }

    /// Pokes `key`'s timekeeper if its timer is set for later than `at` (a holder's new
    /// expiry), so it wakes in time to hand the key over.
    fn keep_time_by(&self, key: &Key, at: u64) {
        let keeper = self.queues.borrow().get(key.as_str()).and_then(|q| {
            q.keeper
                .clone()
                .filter(|_| q.armed_until.is_some_and(|armed| armed > at))
        });
        if let Some(keeper) = keeper {
            keeper.poke();
        }
    }

    /// The expiry of `key`'s live hold, if any.
    fn expiry(&self, key: &Key, now: u64) -> Option<u64> {
        self.rows
            .borrow()
            .get(key.as_str())
            .map(|row| row.expires_at)
            .filter(|at| *at > now)
    }

    /// When `ticket` is (or now becomes) its queue's timekeeper: the time to wake, the earliest
    /// of every waiting deadline and the holder's expiry. `None` for the other waiters.
    fn keep_time(&self, key: &Key, ticket: &Rc<Ticket>, now: u64) -> Option<u64> {
        let holder_expiry = self.expiry(key, now);
        let mut queues = self.queues.borrow_mut();
        let queue = queues.get_mut(key.as_str())?;
        match &queue.keeper {
            Some(keeper) if !Rc::ptr_eq(keeper, ticket) => return None,
            Some(_) => {}
            None => queue.keeper = Some(ticket.clone()),
        }
        let earliest_deadline = queue
            .tickets
            .iter()
            .filter(|t| !t.gone.get() && !t.timed_out.get())
            .map(|t| t.deadline)
            .chain([ticket.deadline])
            .min()
            .unwrap_or(ticket.deadline);
        let until = holder_expiry.map_or(earliest_deadline, |e| e.min(earliest_deadline));
        queue.armed_until = Some(until);
        Some(until)
    }

    /// The timekeeper's timer fired: waiters whose deadline passed are told, and a key whose
    /// holder expired goes to the oldest waiter.
    fn tick(&self, key: &Key, now: u64) {
        let expired: Vec<Rc<Ticket>> = self
            .queues
            .borrow()
            .get(key.as_str())
            .map(|q| {
                q.tickets
                    .iter()
                    .filter(|t| !t.gone.get() && t.deadline <= now)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        for ticket in expired {
            ticket.timed_out.set(true);
            ticket.wake();
        }
        self.hand_over(key, now);
    }

    /// [`LockStore::acquire_or_wait`]: set-if-absent, or queue up and wait up to `wait_ms`.
    pub async fn acquire_or_wait_ms(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
        wait_ms: u64,
    ) -> Option<Grant> {
        if let Some(grant) = self.acquire_sync(key, owner, ttl) {
            return Some(grant);
        }
        self.queue_for(key, owner, ttl, wait_ms).await
    }

    /// The waiting half of [`MemoryLockStore::acquire_or_wait_ms`], for a caller whose
    /// `acquire_sync` was refused in this same turn (nothing can have changed since) and that
    /// polls the returned future in that turn too: [`MemoryLockStore::join`] and
    /// [`MemoryLockStore::wait_step`] driven with the runtime's timer.
    pub(crate) async fn queue_for(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
        wait_ms: u64,
    ) -> Option<Grant> {
        let parked = self.join(key, owner, ttl, wait_ms, self.runtime.monotonic_ms())?;
        // Leaves the queue however this future ends: granted, timed out, or dropped by a
        // caller that gave up (then a grant that already arrived is released).
        let _leave = Leave {
            store: self,
            parked: &parked,
        };
        loop {
            let now = self.runtime.monotonic_ms();
            let until = match self.wait_step(&parked, now) {
                WaitStep::Done(grant) => return grant,
                WaitStep::Park { until } => until,
            };
            let woken = poll_until(|cx| {
                parked.woken() || {
                    parked.listen(cx.waker().clone());
                    false
                }
            });
            match until {
                // Only the timekeeper sleeps; it acts for the whole queue when it wakes.
                Some(until) => {
                    let sleep = self.runtime.sleep(until.saturating_sub(now).max(1));
                    race(woken, sleep).await;
                }
                None => woken.await,
            }
        }
    }

    /// Queues a caller refused at `now` behind `key`'s other waiters, for up to `wait_ms`
    /// (`None` for 0: it does not wait). The caller then drives its wait with
    /// [`MemoryLockStore::wait_step`] and must hand it to [`MemoryLockStore::leave`] however
    /// the wait ends.
    pub(crate) fn join(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
        wait_ms: u64,
        now: u64,
    ) -> Option<Parked> {
        if wait_ms == 0 {
            return None;
        }
        let ticket = Rc::new(Ticket {
            owner: owner.clone(),
            ttl,
            since: now,
            deadline: now.saturating_add(wait_ms),
            grant: Cell::new(None),
            timed_out: Cell::new(false),
            poked: Cell::new(false),
            waker: RefCell::new(None),
            gone: Cell::new(false),
        });
        self.hasher.keys();
        let keeper_to_poke = {
            let mut queues = self.queues.borrow_mut();
            let queue = queues.entry(key.clone()).or_default();
            queue.tickets.push_back(ticket.clone());
            // A deadline before the timekeeper's timer: it must wake earlier.
            queue
                .keeper
                .clone()
                .filter(|_| queue.armed_until.is_some_and(|at| at > ticket.deadline))
        };
        if let Some(keeper) = keeper_to_poke {
            keeper.poke();
        }
        Some(Parked {
            key: key.clone(),
            ticket,
        })
    }

    /// Where a wait stands at `now`: over (the grant, or `None` when it ran out), or parked
    /// until its waker is called ([`Parked::listen`]) — and, for the queue's timekeeper, no
    /// later than `until`, when this step acts for every waiter of the key.
    pub(crate) fn wait_step(&self, parked: &Parked, now: u64) -> WaitStep {
        let ticket = &parked.ticket;
        // A wake still registered is stale from here on.
        drop(ticket.waker.borrow_mut().take());
        let due = self
            .queues
            .borrow()
            .get(parked.key.as_str())
            .is_some_and(|q| {
                q.keeper.as_ref().is_some_and(|k| Rc::ptr_eq(k, ticket))
                    && q.armed_until.is_some_and(|at| at <= now)
            });
        if due {
            self.tick(&parked.key, now);
        } else {
            // A key that is free now goes to the oldest waiter, whoever steps: a waiter told
            // to take the timer over after its holder expired has no timer of its own due.
            self.hand_over(&parked.key, now);
        }
        if let Some(grant) = ticket.grant.take() {
            ticket.gone.set(true);
            return WaitStep::Done(Some(grant));
        }
        if ticket.timed_out.get() || now >= ticket.deadline {
            return WaitStep::Done(None);
        }
        ticket.poked.set(false);
        WaitStep::Park {
            until: self.keep_time(&parked.key, ticket, now),
        }
    }

    /// Takes a wait out of its queue, however it ended. A grant the waiter never took (it gave
    /// up first) is released, so the key passes on instead of staying held by nobody until its
    /// TTL; a queue left without a timekeeper hands the timer to its newest waiter.
    pub(crate) fn leave(&self, parked: &Parked) {
        let (key, ticket) = (&parked.key, &parked.ticket);
        ticket.gone.set(true);
        drop(ticket.waker.borrow_mut().take());
        if ticket.grant.take().is_some() {
            self.release_sync(key, &ticket.owner);
        }
        let successor = {
            let mut queues = self.queues.borrow_mut();
            let Some(queue) = queues.get_mut(key.as_str()) else {
                return;
            };
            queue.tickets.retain(|t| !Rc::ptr_eq(t, ticket));
            let was_keeper = queue.keeper.as_ref().is_some_and(|k| Rc::ptr_eq(k, ticket));
            if was_keeper {
                queue.keeper = None;
                queue.armed_until = None;
            }
            if queue.tickets.is_empty() {
                queues.remove(key.as_str());
                None
            } else if queue.keeper.is_none() {
                // The newest waiter still waiting will be waiting longest: it keeps the timer
                // next. Asked whoever leaves while nobody keeps it — the waiter told to take it
                // over may itself have timed out, or been aborted, before it stepped.
                queue
                    .tickets
                    .iter()
                    .rev()
                    .find(|t| !t.gone.get() && !t.timed_out.get())
                    .cloned()
            } else {
                None
            }
        };
        if let Some(next) = successor {
            next.poke();
        }
    }

    /// Synchronous [`LockStore::extend`].
    pub fn extend_sync(&self, key: &Key, owner: &OwnerToken, ttl: Ttl) -> bool {
        let now = self.runtime.monotonic_ms();
        let extended = self.decide(key, owner, |row| rows::extend(row, now, owner, ttl));
        if extended {
            // A shorter TTL than before moves the expiry the waiters' timer was set for.
            self.keep_time_by(key, now.saturating_add(ttl.as_ms()));
        }
        extended
    }

    /// Frees `key` whoever holds it (an operator clearing a stuck lock); the holder learns at its
    /// next extend. Answers whether anyone held it. A waiter, if any, holds the key afterwards.
    pub fn force_release_sync(&self, key: &Key) -> bool {
        let now = self.runtime.monotonic_ms();
        let held = self
            .rows
            .borrow_mut()
            .remove(key.as_str())
            .is_some_and(|row| row.expires_at > now);
        self.hand_over(key, now);
        held
    }

    /// Synchronous [`LockStore::remaining_time`].
    pub fn remaining_time_sync(&self, key: &Key) -> Option<u64> {
        let now = self.runtime.monotonic_ms();
        rows::remaining_time(self.rows.borrow().get(key.as_str()).map(Row::view), now)
    }
}

impl Ticket {
    fn grant_ready(&self) -> bool {
        let grant = self.grant.take();
        self.grant.set(grant);
        grant.is_some()
    }
}

/// A caller waiting in a key's queue, driven by [`MemoryLockStore::wait_step`] and ended by
/// [`MemoryLockStore::leave`].
pub(crate) struct Parked {
    key: Key,
    ticket: Rc<Ticket>,
}

impl Parked {
    /// Registers the waker the next hand-over, time-out or poke of this wait calls (once).
    pub(crate) fn listen(&self, waker: Waker) {
        *self.ticket.waker.borrow_mut() = Some(waker);
    }

    /// Whether something happened since the last [`MemoryLockStore::wait_step`]: a grant, the
    /// wait running out, or a poke to look again.
    fn woken(&self) -> bool {
        let t = &self.ticket;
        t.grant_ready() || t.timed_out.get() || t.poked.get()
    }
}

/// What a waiting caller does next (see [`MemoryLockStore::wait_step`]).
pub(crate) enum WaitStep {
    /// The wait is over: the grant, or `None` when it ran out.
    Done(Option<Grant>),
    /// Nothing until the waker is called — or, given `until` (the store's clock), until then.
    Park {
        /// When to step again even if nobody wakes the waiter.
        until: Option<u64>,
    },
}

/// Leaves the queue when the waiting future ends or is dropped.
struct Leave<'a, R: Runtime> {
    store: &'a MemoryLockStore<R>,
    parked: &'a Parked,
}

impl<R: Runtime> Drop for Leave<'_, R> {
    fn drop(&mut self) {
        self.store.leave(self.parked);
    }
}

impl<R: Runtime> LockStore for MemoryLockStore<R> {
    type Error = Infallible;

    fn name(&self) -> &'static str {
        "memory"
    }
    async fn acquire(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
    ) -> Result<Option<Grant>, Infallible> {
        Ok(self.acquire_sync(key, owner, ttl))
    }
    async fn release(&self, key: &Key, owner: &OwnerToken) -> Result<bool, Infallible> {
        Ok(self.release_sync(key, owner))
    }
    async fn extend(&self, key: &Key, owner: &OwnerToken, ttl: Ttl) -> Result<bool, Infallible> {
        Ok(self.extend_sync(key, owner, ttl))
    }
    async fn is_locked(&self, key: &Key) -> Result<bool, Infallible> {
        Ok(self.remaining_time_sync(key).is_some())
    }
    async fn remaining_time(&self, key: &Key) -> Result<Option<u64>, Infallible> {
        Ok(self.remaining_time_sync(key))
    }
    fn hands_over(&self) -> bool {
        true
    }
    fn always_answers(&self) -> bool {
        true
    }
    async fn acquire_or_wait(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
        wait: Wait,
    ) -> Result<Option<Grant>, Infallible> {
        Ok(self.acquire_or_wait_ms(key, owner, ttl, wait.wait_ms).await)
    }
    async fn force_release(&self, key: &Key) -> Result<ForceRelease, Infallible> {
        Ok(match self.force_release_sync(key) {
            true => ForceRelease::Freed,
            false => ForceRelease::WasFree,
        })
    }
    async fn withdraw(&self, key: &Key, owner: &OwnerToken) -> Result<(), Infallible> {
        // A waiter's queue entry leaves with its dropped wait; what remains is a hold.
        self.release_sync(key, owner);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::virtual_time::VirtualRuntime;

    #[test]
    fn expired_rows_do_not_accumulate() {
        let rt = VirtualRuntime::new();
        let store = MemoryLockStore::new(rt.clone());
        let ttl = Ttl::from_ms(10).unwrap();
        let mut peak = 0;
        for i in 0..100_000 {
            let key = Key::new(format!("job:{i}")).unwrap();
            assert!(store
                .acquire_sync(&key, &OwnerToken::mint().unwrap(), ttl)
                .is_some());
            rt.advance(20); // every key expires before the next one is taken
            peak = peak.max(store.stored_rows());
        }
        assert!(peak <= SWEEP_FLOOR, "peak {peak} rows for 1 live key");
    }

    fn parked_until(step: WaitStep) -> Option<u64> {
        match step {
            WaitStep::Park { until } => until,
            WaitStep::Done(grant) => panic!("parked expected, the wait ended: {grant:?}"),
        }
    }

    /// The timekeeper leaves (aborted) after the holder expired but before its timer stepped
    /// it: the waiter told to keep time next finds the key free and takes it, rather than
    /// parking until its own deadline with the key held by nobody.
    #[test]
    fn the_next_timekeeper_takes_a_key_its_holder_let_expire() {
        let store = MemoryLockStore::new(VirtualRuntime::new());
        let (key, ttl) = (Key::new("k").unwrap(), Ttl::from_ms(50).unwrap());
        let holder = OwnerToken::mint().unwrap();
        assert!(store.acquire_at(&key, &holder, ttl, 0).is_some());
        let first = store
            .join(&key, &OwnerToken::mint().unwrap(), ttl, 10_000, 0)
            .unwrap();
        let second = store
            .join(&key, &OwnerToken::mint().unwrap(), ttl, 10_000, 1)
            .unwrap();
        assert_eq!(parked_until(store.wait_step(&first, 0)), Some(50));
        assert_eq!(parked_until(store.wait_step(&second, 1)), None);
        store.leave(&first);
        assert!(matches!(
            store.wait_step(&second, 60),
            WaitStep::Done(Some(_))
        ));
        store.leave(&second);
        assert_eq!(store.waiting(), 0);
    }

    /// Refused just before the holder's expiry and queued just after it (two clock reads): the
    /// waiter's first step takes the key.
    #[test]
    fn a_waiter_queued_after_the_holders_expiry_takes_the_key_at_its_first_step() {
        let store = MemoryLockStore::new(VirtualRuntime::new());
        let (key, ttl) = (Key::new("k").unwrap(), Ttl::from_ms(50).unwrap());
        let (holder, waiter) = (OwnerToken::mint().unwrap(), OwnerToken::mint().unwrap());
        assert!(store.acquire_at(&key, &holder, ttl, 0).is_some());
        assert!(store.acquire_at(&key, &waiter, ttl, 49).is_none());
        let parked = store.join(&key, &waiter, ttl, 10_000, 50).unwrap();
        assert!(matches!(
            store.wait_step(&parked, 50),
            WaitStep::Done(Some(_))
        ));
        store.leave(&parked);
        assert!(!store.release_at(&key, &holder, 51));
        assert!(store.release_at(&key, &waiter, 51));
    }

    #[test]
    fn live_rows_survive_sweeps() {
        let rt = VirtualRuntime::new();
        let store = MemoryLockStore::new(rt.clone());
        let long = Ttl::from_ms(1_000_000).unwrap();
        let owners: Vec<_> = (0..500).map(|_| OwnerToken::mint().unwrap()).collect();
        for (i, o) in owners.iter().enumerate() {
            assert!(store
                .acquire_sync(&Key::new(format!("k{i}")).unwrap(), o, long)
                .is_some());
        }
        assert_eq!(store.purge_expired(), 0);
        for (i, o) in owners.iter().enumerate() {
            assert!(store.release_sync(&Key::new(format!("k{i}")).unwrap(), o));
        }
    }
}
