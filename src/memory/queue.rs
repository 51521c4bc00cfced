//! The memory store's waiting: a FIFO queue of parked callers per key, the hand-over of a freed
//! key to the oldest live waiter, and the one timer per queue (its timekeeper) that acts at the
//! holder's expiry and the waiters' deadlines.

use super::*;
use crate::share::{fit, Fit, LiveHolds};

/// A caller parked in a key's queue.
pub(super) struct Waiter {
    pub(super) owner: OwnerToken,
    pub(super) ttl: Ttl,
    /// Exclusive, or the permits it waits for.
    pub(super) holding: Holding,
    /// When it joined the queue, by the store's clock.
    pub(super) since: u64,
    /// When it stops waiting, by the store's clock.
    pub(super) deadline: u64,
    /// Set by the hand-over; taken by the waiting caller.
    pub(super) grant: Cell<Option<Grant>>,
    /// Set by the queue's timekeeper once `deadline` has passed.
    pub(super) timed_out: Cell<bool>,
    /// Set to make the waiter look again (it may have become the timekeeper).
    pub(super) poked: Cell<bool>,
    /// When its timer is due, once it keeps the queue's (the queue's `armed_until`, which only
    /// its timekeeper sets); `None` before.
    pub(super) armed: Cell<Option<u64>>,
    /// The waiting caller's waker, woken by the hand-over.
    pub(super) waker: RefCell<Option<Waker>>,
    /// The caller stopped waiting; the hand-over skips it.
    pub(super) gone: Cell<bool>,
}

impl Waiter {
    pub(super) fn wake(&self) {
        let waker = self.waker.borrow_mut().take();
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    pub(super) fn poke(&self) {
        self.poked.set(true);
        self.wake();
    }
}

/// A key's waiters, in arrival order. One of them, the timekeeper, keeps the queue's only timer:
/// it wakes at the earliest waiter deadline or the holder's expiry and acts for everyone. The
/// role goes to the newest waiter when the timekeeper leaves, so a steadily contended key sets a
/// timer about once per queue length, not once per waiter.
#[derive(Default)]
pub(super) struct Queue {
    pub(super) waiters: VecDeque<Rc<Waiter>>,
    pub(super) keeper: Option<Rc<Waiter>>,
    /// When the timekeeper's timer fires.
    pub(super) armed_until: Option<u64>,
}

impl Waiter {
    pub(super) fn grant_ready(&self) -> bool {
        let grant = self.grant.take();
        self.grant.set(grant);
        grant.is_some()
    }
}

/// A caller waiting in a key's queue, driven by [`MemoryLockStore::wait_step`] and ended by
/// [`MemoryLockStore::leave`].
pub(crate) struct Parked {
    pub(super) key: Key,
    pub(super) waiter: Rc<Waiter>,
}

impl Parked {
    /// Registers the waker the next hand-over, time-out or poke of this wait calls (once).
    pub(crate) fn listen(&self, waker: Waker) {
        *self.waiter.waker.borrow_mut() = Some(waker);
    }

    /// Whether something happened since the last [`MemoryLockStore::wait_step`]: a grant, the
    /// wait running out, or a poke to look again.
    pub(super) fn woken(&self) -> bool {
        let t = &self.waiter;
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
pub(super) struct Leave<'a, R: Runtime> {
    pub(super) store: &'a MemoryLockStore<R>,
    pub(super) parked: &'a Parked,
}

impl<R: Runtime> Drop for Leave<'_, R> {
    fn drop(&mut self) {
        self.store.leave(self.parked);
    }
}

impl<R: Runtime> MemoryLockStore<R> {
    /// Grants `key` to its waiters in arrival order while each fits beside what is live at
    /// `now` (one writer; or readers and permits until the next does not fit — nobody passes
    /// the waiter at the front), and wakes them. Waiters that left are dropped from the queue,
    /// and so are those whose deadline has passed by `now` even if the timekeeper's timer has
    /// not fired yet (a late timer must not turn a wait that ran out into a grant); an emptied
    /// queue is removed. Answers, when the queue has waiters left, what is live after the
    /// grants (while a lock is live, waiters that left or ran out and are not dropped yet count:
    /// nobody else fits either).
    pub(super) fn hand_over(&self, key: &Key, now: u64) -> Option<LiveHolds> {
        let mut ran_out = Vec::new();
        // The first grant needs no allocation: only readers and permits come several at once.
        let mut first: Option<Rc<Waiter>> = None;
        let mut more = Vec::new();
        // The timekeeper, if a new holder may expire before its timer: it must look again.
        let mut keeper_to_poke = None;
        let waiting = {
            let mut queues = self.queues.borrow_mut();
            let queue = queues.get_mut(key.as_str())?;
            // What is live, read once and kept up to date with each grant below.
            let mut live = self.live_holds(key, now);
            // A live lock: nobody fits, whatever waits (the common case on a contended lock).
            if live.exclusive {
                return (!queue.waiters.is_empty()).then_some(live);
            }
            let waiters = &mut queue.waiters;
            loop {
                while let Some(front) = waiters.front() {
                    if front.gone.get() || front.timed_out.get() {
                        waiters.pop_front();
                    } else if front.deadline <= now {
                        front.timed_out.set(true);
                        ran_out.extend(waiters.pop_front());
                    } else {
                        break;
                    }
                }
                let Some(front) = waiters.front() else { break };
                if fit(live, front.holding) != Fit::Fits {
                    break;
                }
                let Some(waiter) = waiters.pop_front() else {
                    break;
                };
                let (owner, ttl) = (&waiter.owner, waiter.ttl);
                let grant = match waiter.holding {
                    Holding::Exclusive => {
                        live.exclusive = true;
                        self.take(key, owner, ttl, now)
                    }
                    Holding::Shared(share) => {
                        live.limit = Some(share.limit());
                        live.weight += u64::from(share.weight());
                        Some(self.put_shared(key, owner, ttl, share, now))
                    }
                };
                let grant = grant.map(|g| g.waited(now.saturating_sub(waiter.since)));
                waiter.grant.set(grant);
                let expires_at = now.saturating_add(ttl.as_ms());
                if queue.armed_until.is_some_and(|armed| armed > expires_at) {
                    keeper_to_poke.clone_from(&queue.keeper);
                }
                match first {
                    None => first = Some(waiter),
                    Some(_) => more.push(waiter),
                }
            }
            let waiting = (!waiters.is_empty()).then_some(live);
            if waiting.is_none() && queue.keeper.is_none() {
                queues.remove(key.as_str());
            }
            waiting
        };
        // Told with no store borrow held: a waker may poll its waiter right away.
        ran_out.iter().for_each(|t| t.wake());
        first.into_iter().chain(more).for_each(|t| t.wake());
        if let Some(keeper) = keeper_to_poke {
            keeper.poke();
        }
        waiting
    }

    /// Pokes `key`'s timekeeper if its timer is set for later than `at` (a holder's new
    /// expiry), so it wakes in time to hand the key over.
    pub(super) fn keep_time_by(&self, key: &Key, at: u64) {
        let keeper = self.queues.borrow().get(key.as_str()).and_then(|q| {
            q.keeper
                .clone()
                .filter(|_| q.armed_until.is_some_and(|armed| armed > at))
        });
        if let Some(keeper) = keeper {
            keeper.poke();
        }
    }

    /// When `key`'s next live hold expires, if any: the time a waiter may next fit.
    pub(super) fn expiry(&self, key: &Key, now: u64) -> Option<u64> {
        let rows = self.rows.borrow();
        let row = rows.get(key.as_str()).filter(|row| row.expires_at > now)?;
        match &row.shared {
            None => Some(row.expires_at),
            Some(shared) => shared.first_expiry(now),
        }
    }

    /// When `waiter` is (or now becomes) its queue's timekeeper: the time to wake, the earliest
    /// of every waiting deadline and the holder's expiry. `None` for the other waiters.
    pub(super) fn keep_time(&self, key: &Key, waiter: &Rc<Waiter>, now: u64) -> Option<u64> {
        let mut queues = self.queues.borrow_mut();
        self.keep_time_in(key, queues.get_mut(key.as_str())?, waiter, now)
    }

    /// [`MemoryLockStore::keep_time`] in `key`'s queue, already looked up.
    fn keep_time_in(
        &self,
        key: &Key,
        queue: &mut Queue,
        waiter: &Rc<Waiter>,
        now: u64,
    ) -> Option<u64> {
        match &queue.keeper {
            Some(keeper) if !Rc::ptr_eq(keeper, waiter) => return None,
            Some(_) => {}
            None => queue.keeper = Some(waiter.clone()),
        }
        let earliest_deadline = queue
            .waiters
            .iter()
            .filter(|t| !t.gone.get() && !t.timed_out.get())
            .map(|t| t.deadline)
            .chain([waiter.deadline])
            .min()
            .unwrap_or(waiter.deadline);
        let until = self
            .expiry(key, now)
            .map_or(earliest_deadline, |e| e.min(earliest_deadline));
        queue.armed_until = Some(until);
        waiter.armed.set(Some(until));
        Some(until)
    }

    /// The timekeeper's timer fired: waiters whose deadline passed are told, and a key whose
    /// holder expired goes to the oldest waiter.
    pub(super) fn tick(&self, key: &Key, now: u64) {
        let expired: Vec<Rc<Waiter>> = self
            .queues
            .borrow()
            .get(key.as_str())
            .map(|q| {
                q.waiters
                    .iter()
                    .filter(|t| !t.gone.get() && t.deadline <= now)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        for waiter in expired {
            waiter.timed_out.set(true);
            waiter.wake();
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
        // One reading of the clock for the take and the queue: nobody can expire between them.
        let now = self.runtime.monotonic_ms();
        if let Some(grant) = self.acquire_at(key, owner, ttl, now) {
            return Some(grant);
        }
        self.queue_for(key, owner, ttl, Holding::Exclusive, wait_ms, now)
            .await
    }

    /// Queues a caller refused at `now` — in this same turn: nothing can have changed since, so
    /// there is nothing to hand over — behind `key`'s other waiters, for up to `wait_ms` (`None`
    /// for 0: it does not wait), and parks it as [`MemoryLockStore::wait_step`] would: with the
    /// time its timer is due if it keeps the queue's. The caller then waits for its waker (or
    /// that time) and drives its wait with [`MemoryLockStore::wait_step`], and must hand it to
    /// [`MemoryLockStore::leave`] however the wait ends.
    pub(crate) fn join(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
        holding: Holding,
        wait_ms: u64,
        now: u64,
    ) -> Option<(Parked, Option<u64>)> {
        if wait_ms == 0 {
            return None;
        }
        let waiter = Rc::new(Waiter {
            owner: owner.clone(),
            ttl,
            holding,
            since: now,
            deadline: now.saturating_add(wait_ms),
            grant: Cell::new(None),
            timed_out: Cell::new(false),
            poked: Cell::new(false),
            armed: Cell::new(None),
            waker: RefCell::new(None),
            gone: Cell::new(false),
        });
        self.hasher.keys();
        let (keeper_to_poke, until) = {
            let mut queues = self.queues.borrow_mut();
            let queue = queues.entry(key.clone()).or_default();
            queue.waiters.push_back(waiter.clone());
            // A deadline before the timekeeper's timer: it must wake earlier.
            let keeper_to_poke = queue
                .keeper
                .clone()
                .filter(|_| queue.armed_until.is_some_and(|at| at > waiter.deadline));
            (keeper_to_poke, self.keep_time_in(key, queue, &waiter, now))
        };
        if let Some(keeper) = keeper_to_poke {
            keeper.poke();
        }
        let parked = Parked {
            key: key.clone(),
            waiter,
        };
        Some((parked, until))
    }

    /// Where a wait stands at `now`: over (the grant, or `None` when it ran out), or parked
    /// until its waker is called ([`Parked::listen`]) — and, for the queue's timekeeper, no
    /// later than `until`, when this step acts for every waiter of the key.
    pub(crate) fn wait_step(&self, parked: &Parked, now: u64) -> WaitStep {
        let waiter = &parked.waiter;
        // A wake still registered is stale from here on.
        drop(waiter.waker.borrow_mut().take());
        // The timekeeper's timer is due: it acts for the queue (the role is its own until it
        // leaves, so its own record of the timer is the queue's).
        let due = waiter.armed.get().is_some_and(|at| at <= now);
        if due {
            self.tick(&parked.key, now);
        } else if !waiter.grant_ready() {
            // A key that is free now goes to the oldest waiter, whoever steps: a waiter told
            // to take the timer over after its holder expired has no timer of its own due. (A
            // waiter already granted has nothing to hand over: the hand-over that granted it
            // granted everyone behind it who fitted.)
            self.hand_over(&parked.key, now);
        }
        if let Some(grant) = waiter.grant.take() {
            waiter.gone.set(true);
            return WaitStep::Done(Some(grant));
        }
        if waiter.timed_out.get() || now >= waiter.deadline {
            return WaitStep::Done(None);
        }
        waiter.poked.set(false);
        WaitStep::Park {
            until: self.keep_time(&parked.key, waiter, now),
        }
    }

    /// Takes a wait out of its queue, however it ended. A grant the waiter never took (it gave
    /// up first) is released, so the key passes on instead of staying held by nobody until its
    /// TTL; a queue left without a timekeeper hands the timer to its newest waiter.
    pub(crate) fn leave(&self, parked: &Parked) {
        let (key, waiter) = (&parked.key, &parked.waiter);
        waiter.gone.set(true);
        drop(waiter.waker.borrow_mut().take());
        if waiter.grant.take().is_some() {
            self.release_sync(key, &waiter.owner);
        }
        let successor = {
            let mut queues = self.queues.borrow_mut();
            let Some(queue) = queues.get_mut(key.as_str()) else {
                return;
            };
            queue.waiters.retain(|t| !Rc::ptr_eq(t, waiter));
            let was_keeper = queue.keeper.as_ref().is_some_and(|k| Rc::ptr_eq(k, waiter));
            if was_keeper {
                queue.keeper = None;
                queue.armed_until = None;
            }
            if queue.waiters.is_empty() {
                queues.remove(key.as_str());
                None
            } else if queue.keeper.is_none() {
                // The newest waiter still waiting will be waiting longest: it keeps the timer
                // next. Asked whoever leaves while nobody keeps it — the waiter told to take it
                // over may itself have timed out, or been aborted, before it stepped.
                queue
                    .waiters
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
}
