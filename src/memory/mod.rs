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
use crate::inspect::LockInfo;
use crate::race::{poll_until, race};
use crate::rows::{self, Change, Decision, RowView};
use crate::runtime::Runtime;
use crate::share::{Holding, Share, SharedGrant};
use crate::store::{ForceRelease, LockStore, ManyGrant, Wait};
use crate::token::OwnerToken;

pub(crate) mod queue;
mod shared;
#[cfg(test)]
mod tests;

use queue::{Leave, Queue, WaitStep};

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

/// A key's row: its lock's holder, or — `shared` set — the header of its shared holds, whose
/// expiry is the last of theirs and whose owner no caller can match (so the lock rules refuse
/// every exclusive request while a shared hold is live, with no second lookup).
struct Row {
    /// The holder's token, and the metadata it brought.
    owner: OwnerToken,
    expires_at: u64,
    /// The lock's fence (a shared header's holds keep their own).
    fence: Option<Fence>,
    shared: Option<Box<shared::SharedRow>>,
}

impl Row {
    fn view(&self) -> RowView<'_> {
        RowView {
            owner: match self.shared {
                None => self.owner.as_str(),
                Some(_) => "",
            },
            expires_at: self.expires_at,
        }
    }
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
        self.queues.borrow().values().map(|q| q.waiters.len()).sum()
    }

    /// Deletes every expired row now and answers how many went.
    pub fn purge_expired(&self) -> usize {
        self.purge_expired_at(self.runtime.monotonic_ms())
    }

    /// [`MemoryLockStore::purge_expired`] as of `now`, so that one decision reads the clock once.
    pub(super) fn purge_expired_at(&self, now: u64) -> usize {
        let mut rows = self.rows.borrow_mut();
        let before = rows.len();
        rows.retain(|_, row| row.expires_at > now);
        let removed = before - rows.len();
        self.next_sweep_at.set((rows.len() * 2).max(SWEEP_FLOOR));
        removed
    }

    /// Reads `key`'s row, asks [`crate::rows`] what to do, applies it; answers the fence drawn
    /// for the row it put (`Some`, holding `None` once the counter is spent), or `None` when the
    /// rule granted nothing.
    pub(super) fn decide(
        &self,
        key: &Key,
        owner: &OwnerToken,
        rule: impl FnOnce(Option<RowView<'_>>) -> Decision,
    ) -> Option<Option<Fence>> {
        // One hash of the key per decision: the entry is read and changed in place.
        self.hasher.keys();
        let mut rows = self.rows.borrow_mut();
        match rows.entry(key.clone()) {
            Entry::Occupied(mut entry) => {
                let decision = rule(Some(entry.get().view()));
                match decision.change {
                    Change::Keep => None,
                    Change::Delete => {
                        entry.remove();
                        None
                    }
                    Change::Put { expires_at } => {
                        let fence = self.next_fence();
                        let row = entry.get_mut();
                        row.owner = owner.clone();
                        row.expires_at = expires_at;
                        row.fence = fence;
                        // An expired header taken over by a lock.
                        row.shared = None;
                        Some(fence)
                    }
                }
            }
            Entry::Vacant(entry) => {
                let Change::Put { expires_at } = rule(None).change else {
                    return None;
                };
                let fence = self.next_fence();
                entry.insert(Row {
                    owner: owner.clone(),
                    expires_at,
                    fence,
                    shared: None,
                });
                Some(fence)
            }
        }
    }

    /// Ends (`ttl` `None`) or extends `owner`'s live hold on `key` at `now`, a lock or a shared
    /// hold, with one lookup of the row. Answers whether `owner` had one.
    fn change_hold(&self, key: &Key, owner: &OwnerToken, ttl: Option<Ttl>, now: u64) -> bool {
        self.hasher.keys();
        let mut rows = self.rows.borrow_mut();
        let Entry::Occupied(mut entry) = rows.entry(key.clone()) else {
            return false;
        };
        let row = entry.get_mut();
        if row.shared.is_some() {
            return row.change_shared(owner, ttl, now);
        }
        let decision = match ttl {
            None => rows::release(Some(row.view()), now, owner),
            Some(ttl) => rows::extend(Some(row.view()), now, owner, ttl),
        };
        match decision.change {
            Change::Keep => {}
            Change::Delete => drop(entry.remove()),
            Change::Put { expires_at } => row.expires_at = expires_at,
        }
        decision.granted
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

    /// Synchronous [`LockStore::inspect`]: `key`'s live holds and its live waiters.
    pub fn inspect_sync(&self, key: &Key) -> LockInfo {
        let now = self.runtime.monotonic_ms();
        let holders = self
            .rows
            .borrow()
            .get(key.as_str())
            .map_or_else(Vec::new, |row| row.holders(now));
        let waiting = self.live_waiters(key, now);
        LockInfo::new(holders, Some(u32::try_from(waiting).unwrap_or(u32::MAX)))
    }

    /// The holds [`Self::inspect_sync`] reads, with nothing built: calls `f` with each live
    /// hold's fence and ms left, in no set order. The JS face's `inspect` builds its answer from
    /// these (it keeps the metadata, and counts the waiters it queued, itself).
    pub fn each_live_hold(&self, key: &Key, mut f: impl FnMut(Option<Fence>, u64)) {
        let now = self.runtime.monotonic_ms();
        if let Some(row) = self.rows.borrow().get(key.as_str()) {
            row.each_live(now, |_, fence, expires_at| f(fence, expires_at - now));
        }
    }

    /// The waiters queued for `key` that still wait at `now`.
    fn live_waiters(&self, key: &Key, now: u64) -> usize {
        self.queues.borrow().get(key.as_str()).map_or(0, |queue| {
            let live = queue.waiters.iter();
            live.filter(|w| !w.gone.get() && !w.timed_out.get() && w.deadline > now)
                .count()
        })
    }

    /// Synchronous [`LockStore::acquire_many`]: every key to its owner, or none. One turn of
    /// the single thread, so nothing happens between the look at every key and the takes.
    pub fn acquire_many_sync(
        &self,
        keys: &[Key],
        owners: &[OwnerToken],
        ttl: Ttl,
    ) -> Option<Vec<Grant>> {
        if keys.len() != owners.len() {
            return None;
        }
        let now = self.runtime.monotonic_ms();
        // As for one key: a holder that just expired hands its key to its oldest waiter first.
        for key in keys {
            self.hand_over(key, now);
        }
        let all_free = {
            let rows = self.rows.borrow();
            keys.iter()
                .all(|key| rows::acquire(rows.get(key).map(Row::view), now, ttl).granted)
        };
        if !all_free {
            return None;
        }
        keys.iter()
            .zip(owners)
            .map(|(key, owner)| self.take(key, owner, ttl, now))
            .collect()
    }

    /// Set-if-absent without looking at the queue.
    pub(super) fn take(&self, key: &Key, owner: &OwnerToken, ttl: Ttl, now: u64) -> Option<Grant> {
        self.decide(key, owner, |row| rows::acquire(row, now, ttl))
            .map(Grant::new)
    }

    /// The next fence from the store's one counter.
    pub(super) fn next_fence(&self) -> Option<Fence> {
        // After 2^53 − 1 grants (centuries at a million a second) the counter is spent and
        // grants carry no fence rather than a repeated one.
        let fence = match self.last_fence.get() {
            None => Some(Fence::FIRST),
            Some(last) => last.next(),
        };
        if fence.is_some() {
            self.last_fence.set(fence);
        }
        fence
    }

    /// Synchronous [`LockStore::release`]; a waiter, if any, holds the key when it returns.
    pub fn release_sync(&self, key: &Key, owner: &OwnerToken) -> bool {
        self.release_at(key, owner, self.runtime.monotonic_ms())
    }

    /// [`MemoryLockStore::release_sync`] at `now` on the store's monotonic clock, read by the
    /// caller (the JS binding reads it in JS, saving a call out of the wasm).
    pub(crate) fn release_at(&self, key: &Key, owner: &OwnerToken, now: u64) -> bool {
        let released = self.change_hold(key, owner, None, now);
        if released {
            self.hand_over(key, now);
        }
        released
    }

    /// The waiting half of [`MemoryLockStore::acquire_or_wait_ms`], for a caller whose acquire
    /// was refused at `now` in this same turn (nothing can have changed since) and that polls
    /// the returned future in that turn too: [`MemoryLockStore::join`] and
    /// [`MemoryLockStore::wait_step`] driven with the runtime's timer.
    pub(crate) async fn queue_for(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
        holding: Holding,
        wait_ms: u64,
        mut now: u64,
    ) -> Option<Grant> {
        let (parked, mut until) = self.join(key, owner, ttl, holding, wait_ms, now)?;
        // Leaves the queue however this future ends: granted, timed out, or dropped by a
        // caller that gave up (then a grant that already arrived is released).
        let _leave = Leave {
            store: self,
            parked: &parked,
        };
        loop {
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
            now = self.runtime.monotonic_ms();
            until = match self.wait_step(&parked, now) {
                WaitStep::Done(grant) => return grant,
                WaitStep::Park { until } => until,
            };
        }
    }

    /// Synchronous [`LockStore::extend`].
    pub fn extend_sync(&self, key: &Key, owner: &OwnerToken, ttl: Ttl) -> bool {
        let now = self.runtime.monotonic_ms();
        let extended = self.change_hold(key, owner, Some(ttl), now);
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
    fn hands_over_shared(&self) -> bool {
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
    async fn acquire_shared(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
        share: Share,
    ) -> Result<SharedGrant, Infallible> {
        Ok(self.acquire_shared_sync(key, owner, ttl, share))
    }
    async fn acquire_shared_or_wait(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
        share: Share,
        wait: Wait,
    ) -> Result<SharedGrant, Infallible> {
        let holding = Holding::Shared(share);
        // One reading of the clock for the take and the queue: nobody can expire between them.
        let now = self.runtime.monotonic_ms();
        match self.acquire_shared_at(key, owner, ttl, share, now) {
            SharedGrant::Busy => Ok(self
                .queue_for(key, owner, ttl, holding, wait.wait_ms, now)
                .await
                .into()),
            answer => Ok(answer),
        }
    }
    fn acquires_many(&self) -> bool {
        true
    }
    fn keeps_metadata(&self) -> bool {
        true
    }
    async fn inspect(&self, key: &Key) -> Result<Option<LockInfo>, Infallible> {
        Ok(Some(self.inspect_sync(key)))
    }
    async fn acquire_many(
        &self,
        keys: &[Key],
        owners: &[OwnerToken],
        ttl: Ttl,
    ) -> Result<ManyGrant, Infallible> {
        Ok(match self.acquire_many_sync(keys, owners, ttl) {
            Some(grants) => ManyGrant::All(grants),
            None => ManyGrant::Refused,
        })
    }
    async fn withdraw(&self, key: &Key, owner: &OwnerToken) -> Result<(), Infallible> {
        // A waiter's queue entry leaves with its dropped wait; what remains is a hold.
        self.release_sync(key, owner);
        Ok(())
    }
}
