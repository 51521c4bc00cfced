//! The lock state machine: acquire (with optional waiting), release, extend, run, and the
//! local bookkeeping behind `isExpired()`. All methods take `&self`: a lock is used from inside
//! its own critical section (`extend()` within `run()`), so state is borrowed only between
//! awaits, never across one.

use crate::prelude::*;
use alloc::rc::Rc;
use core::cell::{Cell, RefCell};
use core::fmt;
use core::future::Future;
use core::task::Poll;

use crate::attempt::{Attempt, Held, Next};
use crate::error::{Error, HoldOperation, Operation};
use crate::grant::Fence;
use crate::holding::{KeepAlive, LossState, RunContext, Watch, WatchStep};
use crate::input::{AcquireOptions, Key, Ttl};
use crate::inspect::LockInfo;
use crate::race::{race, Either};
use crate::runtime::Runtime;
use crate::serialized::SerializedLock;
use crate::share::{Holding, SharedGrant};
use crate::store::{ForceRelease, LockStore};
use crate::token::{Metadata, OwnerToken};

mod ending;
mod multi;
mod run;
#[cfg(feature = "std")]
mod told;
mod tracking;
pub use multi::{MultiLock, MAX_KEYS};
pub use run::RunError;
pub(crate) use tracking::TrackedHold;

#[cfg(feature = "std")]
use crate::events::{LockEventListener, Trace};

/// Without `std` there are no lock events: how a grant came is not recorded.
#[cfg(not(feature = "std"))]
pub(crate) struct Trace;

#[cfg(not(feature = "std"))]
impl Trace {
    pub(crate) fn new() -> Self {
        Trace
    }
    pub(crate) fn slept(&mut self) {}
    pub(crate) fn waited(&mut self, _waited_ms: u64) {}
}

/// What this handle believes about its own hold on the key.
#[derive(Clone)]
enum Hold {
    /// Never acquired, or released by us.
    None,
    /// Acquired (or restored) with this token and fence; the store will free the key no
    /// earlier than `deadline` by our monotonic clock (measured from when the acquire/extend
    /// request was *sent*; wall-clock time only in [`Lock::serialize`], so a wall clock stepped
    /// back or forth moves no deadline).
    Held {
        owner: OwnerToken,
        deadline: u64,
        fence: Option<Fence>,
        /// Told how the hold ends, once a watcher asks ([`Lock::track`]): a watcher that looks
        /// after several holds came and went still learns how *its* hold ended.
        ending: Option<Rc<Cell<Ending>>>,
    },
    /// We held it and found out we lost it (a release or extend the store refused).
    Lost,
}

/// How a hold ended, as its watchers learn it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// It has not ended.
    Holding,
    /// This handle released it, or asked the store to: final, whatever the store answers.
    Released,
    /// It was lost: refused by the store, or replaced by a newer hold it did not release.
    Lost,
}

impl Hold {
    /// Becomes `next`, telling the hold's watchers it ended so when it was held (a hold its
    /// handle released stays released).
    fn end(&mut self, next: Hold, ending: Ending) {
        if let Hold::Held {
            ending: Some(told), ..
        } = self
        {
            if told.get() != Ending::Released {
                told.set(ending);
            }
        }
        *self = next;
    }
}

/// `time` on one clock, whose reading now is `from_now`, as the time on another clock whose
/// reading now is `to_now`.
fn shift(time: u64, from_now: u64, to_now: u64) -> u64 {
    match time.checked_sub(from_now) {
        Some(ahead) => to_now.saturating_add(ahead),
        None => to_now.saturating_sub(from_now - time),
    }
}

/// Whether `future` has completed, polled once without registering interest.
fn is_done(future: core::pin::Pin<&mut impl Future<Output = ()>>) -> bool {
    let mut cx = core::task::Context::from_waker(core::task::Waker::noop());
    future.poll(&mut cx).is_ready()
}

/// A lock on one key, bound to a store and a runtime. Cheap to create; nothing happens until
/// [`Lock::acquire`] or [`Lock::run`]. Not reentrant: acquiring a key this handle already
/// holds answers `false`, like any other contender.
///
/// ```
/// use keel_lock::{AcquireOptions, Key, Lock, MemoryLockStore, Ttl};
/// use keel_lock::virtual_time::VirtualRuntime;
///
/// let rt = VirtualRuntime::new();
/// let store = MemoryLockStore::new(rt.clone());
/// let ttl = Ttl::from_ms(30_000)?;
/// let a = Lock::new(Key::new("invoice:42")?, ttl, &store, rt.clone());
/// let b = Lock::new(Key::new("invoice:42")?, ttl, &store, rt.clone());
/// rt.block_on(async {
///     assert!(a.acquire(AcquireOptions::immediately()).await?);
///     // Anyone else — another handle, another process on a shared store — is refused…
///     assert!(!b.acquire(AcquireOptions::immediately()).await?);
///     // …until the holder lets go; the next hold carries a higher fencing token.
///     let first = a.fence();
///     assert!(a.release().await?);
///     assert!(b.acquire(AcquireOptions::immediately()).await?);
///     assert!(b.fence() > first);
///     b.release().await
/// })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Lock<S, R> {
    key: Key,
    ttl: Ttl,
    store: S,
    runtime: R,
    /// Exclusive (a lock, a write lock), or the permits a semaphore or read lock takes.
    holding: Cell<Holding>,
    hold: RefCell<Hold>,
    /// What each hold this lock takes says about its holder (see [`Lock::with_metadata`]).
    #[cfg(feature = "std")]
    metadata: RefCell<Option<Metadata>>,
    /// Told every event of this lock's calls (see [`Lock::with_events`]).
    #[cfg(feature = "std")]
    events: Option<LockEventListener>,
}

type LockResult<T, S> = Result<T, Error<<S as LockStore>::Error>>;

impl<S: LockStore, R: Runtime> Lock<S, R> {
    /// A lock on `key` that is held for `ttl` once acquired.
    pub fn new(key: Key, ttl: Ttl, store: S, runtime: R) -> Self {
        Lock {
            key,
            ttl,
            store,
            runtime,
            holding: Cell::new(Holding::Exclusive),
            hold: RefCell::new(Hold::None),
            #[cfg(feature = "std")]
            metadata: RefCell::new(None),
            #[cfg(feature = "std")]
            events: None,
        }
    }

    /// This lock, its holds carrying `metadata` (which host, which job) for the store to keep
    /// and [`Lock::inspect`] to show. A store that keeps none
    /// ([`LockStore::keeps_metadata`]) makes every acquire fail with [`Error::Unsupported`]
    /// rather than drop it.
    ///
    /// Builds with `std` only: the JS builds (no `std`) leave hold metadata to the JS face,
    /// which passes it to the stores that keep it.
    #[cfg(feature = "std")]
    pub fn with_metadata(self, metadata: Option<Metadata>) -> Self {
        self.set_metadata(metadata);
        self
    }

    /// Sets the metadata the next holds carry (see [`Lock::with_metadata`]).
    #[cfg(feature = "std")]
    pub fn set_metadata(&self, metadata: Option<Metadata>) {
        *self.metadata.borrow_mut() = metadata;
    }

    /// The metadata this lock's holds carry, if any.
    pub fn metadata(&self) -> Option<Metadata> {
        #[cfg(feature = "std")]
        return self.metadata.borrow().clone();
        #[cfg(not(feature = "std"))]
        None
    }

    /// `owner`, carrying this lock's metadata if it has some.
    #[cfg(feature = "std")]
    pub(crate) fn tagged(&self, owner: &OwnerToken) -> OwnerToken {
        owner.clone().with_metadata(self.metadata())
    }

    /// An error when this lock has metadata its store would not keep.
    pub(crate) fn metadata_refused(&self) -> Option<Error<S::Error>> {
        (self.metadata().is_some() && !self.store.keeps_metadata()).then(|| Error::Unsupported {
            store: self.store.name(),
            operation: Operation::Metadata,
        })
    }

    /// This lock, taking its key as `holding` says: [`Holding::Shared`] for a semaphore's
    /// permits or a read lock (weight 1 under [`crate::share::MAX_LIMIT`]), on a store that
    /// keeps shared holds ([`LockStore::acquire_shared`]); others fail with
    /// [`Error::Unsupported`].
    ///
    /// ```
    /// use keel_lock::{AcquireOptions, Holding, Key, Lock, MemoryLockStore, Share, Ttl};
    /// use keel_lock::virtual_time::VirtualRuntime;
    ///
    /// let rt = VirtualRuntime::new();
    /// let store = MemoryLockStore::new(rt.clone());
    /// let (key, ttl) = (Key::new("llm-api")?, Ttl::from_ms(30_000)?);
    /// let permit = || {
    ///     let share = Share::new(1, 2).unwrap();
    ///     Lock::new(key.clone(), ttl, &store, rt.clone()).holding(Holding::Shared(share))
    /// };
    /// let (a, b, c) = (permit(), permit(), permit());
    /// rt.block_on(async {
    ///     assert!(a.acquire(AcquireOptions::immediately()).await?);
    ///     assert!(b.acquire(AcquireOptions::immediately()).await?);
    ///     // At most two at once: the third waits for a permit.
    ///     assert!(!c.acquire(AcquireOptions::immediately()).await?);
    ///     a.release().await?;
    ///     assert!(c.acquire(AcquireOptions::immediately()).await?);
    ///     Ok::<_, keel_lock::Error<core::convert::Infallible>>(())
    /// })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn holding(self, holding: Holding) -> Self {
        self.holding.set(holding);
        self
    }

    /// Changes how the next acquire holds the key (a semaphore handle taking another number of
    /// permits). A hold already taken keeps its terms.
    pub fn set_holding(&self, holding: Holding) {
        self.holding.set(holding);
    }

    /// How this lock takes its key.
    pub fn current_holding(&self) -> Holding {
        self.holding.get()
    }

    /// A shared store answer as an acquire's: granted, busy, or the error it is.
    pub(crate) fn shared_answer(
        &self,
        answer: SharedGrant,
    ) -> LockResult<Option<crate::grant::Grant>, S> {
        match answer {
            SharedGrant::Granted(grant) => Ok(Some(grant)),
            SharedGrant::Busy => Ok(None),
            SharedGrant::LimitMismatch { held } => Err(Error::LimitMismatch {
                key: self.key.as_str().to_owned(),
                held,
                asked: self.holding.get().share().map_or(0, |s| s.limit()),
            }),
            SharedGrant::Unsupported => Err(Error::Unsupported {
                store: self.store.name(),
                operation: Operation::AcquireShared,
            }),
        }
    }

    /// Whether this handle takes shared holds and has one live: it holds one at a time, so an
    /// acquire is refused as a lock's would be (the store would grant a second permit).
    pub(crate) fn holds_shared_already(&self, mono: u64) -> bool {
        self.holding.get() != Holding::Exclusive
            && matches!(&*self.hold.borrow(), Hold::Held { deadline, .. } if *deadline > mono)
    }

    /// Whether the store queues this lock's kind of request and hands the key over.
    pub(crate) fn store_hands_over(&self) -> bool {
        match self.holding.get() {
            Holding::Exclusive => self.store.hands_over(),
            Holding::Shared(_) => self.store.hands_over_shared(),
        }
    }

    /// The store's acquire for this lock's holding, answered as a shared one.
    async fn acquire_call(
        &self,
        owner: &OwnerToken,
        wait: Option<crate::store::Wait>,
    ) -> Result<SharedGrant, S::Error> {
        let (key, ttl) = (&self.key, self.ttl);
        Ok(match (self.holding.get(), wait) {
            (Holding::Exclusive, None) => self.store.acquire(key, owner, ttl).await?.into(),
            (Holding::Exclusive, Some(wait)) => self
                .store
                .acquire_or_wait(key, owner, ttl, wait)
                .await?
                .into(),
            (Holding::Shared(share), None) => {
                self.store.acquire_shared(key, owner, ttl, share).await?
            }
            (Holding::Shared(share), Some(wait)) => {
                self.store
                    .acquire_shared_or_wait(key, owner, ttl, share, wait)
                    .await?
            }
        })
    }

    /// Rebuilds a lock from [`Lock::serialize`]'s output, owner token and all, so this process
    /// can extend or release a lock another process acquired.
    pub fn restore(serialized: SerializedLock, store: S, runtime: R) -> Self {
        let (wall, mono) = (runtime.now_ms(), runtime.monotonic_ms());
        let lock =
            Lock::new(serialized.key, serialized.ttl, store, runtime).holding(serialized.holding);
        *lock.hold.borrow_mut() = Hold::Held {
            owner: serialized.owner,
            deadline: shift(serialized.deadline_ms, wall, mono),
            fence: serialized.fence,
            ending: None,
        };
        lock
    }

    /// The key.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// The TTL used by `acquire` and by `extend` without an argument.
    pub fn ttl(&self) -> Ttl {
        self.ttl
    }

    /// The store this lock talks to.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The owner token of the current hold, if this handle believes it holds the key.
    pub fn owner(&self) -> Option<OwnerToken> {
        match &*self.hold.borrow() {
            Hold::Held { owner, .. } => Some(owner.clone()),
            _ => None,
        }
    }

    /// The fence of the current hold: `None` when this handle holds nothing, or when the store
    /// keeps no fences.
    pub fn fence(&self) -> Option<Fence> {
        match &*self.hold.borrow() {
            Hold::Held { fence, .. } => *fence,
            _ => None,
        }
    }

    fn store_error(&self, operation: Operation) -> impl FnOnce(S::Error) -> Error<S::Error> + '_ {
        move |error| Error::Store {
            store: self.store.name(),
            operation,
            error,
        }
    }

    /// `call`, unless it is still unanswered when `ms()` more milliseconds have passed: then
    /// `None`, and the call is dropped (a store answers a late grant by releasing it; see
    /// [`LockStore`]). The timer starts only if the call does not complete on its first poll,
    /// and never for a store that [`LockStore::always_answers`].
    async fn within<T>(
        &self,
        call: impl Future<Output = T>,
        ms: impl FnOnce() -> u64,
    ) -> Option<T> {
        let mut call = core::pin::pin!(call);
        if self.store.always_answers() {
            return Some(call.await);
        }
        let mut ms = Some(ms);
        // Boxed and type-erased, so that one copy of the timer code serves every call site.
        let mut timer: Option<crate::race::LocalFuture<'_, ()>> = None;
        core::future::poll_fn(move |cx| {
            if let Poll::Ready(out) = call.as_mut().poll(cx) {
                return Poll::Ready(Some(out));
            }
            let timer = timer.get_or_insert_with(|| {
                let ms = ms.take().map_or(0, |f| f());
                Box::pin(self.runtime.sleep(ms))
            });
            match timer.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            }
        })
        .await
    }

    pub(crate) fn store_timeout(&self, operation: Operation, after_ms: u64) -> Error<S::Error> {
        Error::StoreTimeout {
            key: self.key.as_str().to_owned(),
            store: self.store.name(),
            operation,
            after_ms,
        }
    }

    /// One store call outside a wait, bounded by the lock's TTL: an acquire answered any later
    /// could only grant a hold whose local deadline (sent + TTL) has already passed, and a hold
    /// being released or extended has expired by then. Unanswered, it fails with
    /// [`Error::StoreTimeout`].
    async fn call<T>(
        &self,
        operation: Operation,
        call: impl Future<Output = Result<T, S::Error>>,
    ) -> LockResult<T, S> {
        let limit = self.ttl.as_ms();
        match self.within(call, move || limit).await {
            Some(answer) => answer.map_err(self.store_error(operation)),
            None => Err(self.store_timeout(operation, limit)),
        }
    }

    /// Tries to take the lock with a fresh owner token. With `options.timeout_ms > 0`, waits
    /// until it succeeds or the timeout is spent: parked in the store's queue when the store
    /// hands keys over ([`LockStore::hands_over`]), otherwise retrying every `retry_delay_ms`
    /// (one last attempt is made at the deadline). Answers whether this handle now holds it.
    ///
    /// A store that does not answer cannot stretch the wait: an attempt still unanswered when
    /// the timeout is spent is abandoned (one sent less than `retry_delay_ms` before the
    /// deadline gets until `retry_delay_ms` after it was sent, as does a store's own wait) and
    /// the answer is `false`; an attempt unanswered after the TTL is abandoned and retried
    /// while the timeout lasts. Without a timeout, the one attempt is bounded by the TTL and
    /// fails with [`Error::StoreTimeout`].
    pub async fn acquire(&self, options: AcquireOptions) -> LockResult<bool, S> {
        self.acquire_until(options, core::future::pending()).await
    }

    /// [`Lock::acquire`] that gives up when `cancel` completes first: the caller leaves the
    /// store's queue (a grant that raced the cancellation is released), nothing stays held, and
    /// it fails with [`Error::Aborted`]. A store call already in flight is let finish.
    pub async fn acquire_until(
        &self,
        options: AcquireOptions,
        cancel: impl Future<Output = ()>,
    ) -> LockResult<bool, S> {
        // A told call is boxed (a listener allows the allocation), so that its future does not
        // enlarge the plain call's.
        #[cfg(feature = "std")]
        if let Some(listener) = &self.events {
            let call = crate::events::Call::Acquire;
            return Box::pin(self.acquire_told(listener, call, options, cancel))
                .await
                .0;
        }
        self.acquire_traced(options, cancel, &mut Trace::new())
            .await
    }

    /// [`Lock::acquire_until`], recording in `trace` how the grant came.
    pub(crate) async fn acquire_traced(
        &self,
        options: AcquireOptions,
        cancel: impl Future<Output = ()>,
        trace: &mut Trace,
    ) -> LockResult<bool, S> {
        let mut cancel = core::pin::pin!(cancel);
        if let Some(refused) = self.metadata_refused() {
            return Err(refused);
        }
        if self.holds_shared_already(self.runtime.monotonic_ms()) {
            return Ok(false);
        }
        let (attempt, mut next) = Attempt::start(
            options,
            self.ttl,
            self.store_hands_over(),
            self.runtime.monotonic_ms(),
        )?;
        #[cfg(feature = "std")]
        let attempt = attempt.with_metadata(self.metadata());
        let mut attempt = attempt;
        loop {
            next = match next {
                Next::Acquire { bound_ms } => {
                    let call = self.acquire_call(attempt.owner(), None);
                    match self.within(call, || bound_ms).await {
                        Some(answer) => {
                            let answer = answer.map_err(self.store_error(Operation::Acquire))?;
                            let grant = self.shared_answer(answer)?;
                            attempt.answered(grant, self.runtime.monotonic_ms())
                        }
                        None => attempt.unanswered(self.runtime.monotonic_ms())?,
                    }
                }
                Next::AcquireOrWait { wait, bound_ms } => {
                    let call = self.acquire_call(attempt.owner(), Some(wait));
                    // Bounded from when the call first goes unanswered, as the wait is.
                    let started = self.runtime.monotonic_ms();
                    let waiting = self.within(call, || {
                        bound_ms.saturating_sub(self.runtime.monotonic_ms() - started)
                    });
                    match race(waiting, cancel.as_mut()).await {
                        Either::First(Some(answer)) => {
                            let answer = answer.map_err(self.store_error(Operation::Acquire))?;
                            let grant = self.shared_answer(answer)?;
                            trace.waited(grant.as_ref().map_or(0, |g| g.waited_ms()));
                            attempt.answered(grant, self.runtime.monotonic_ms())
                        }
                        Either::First(None) => attempt.unanswered(self.runtime.monotonic_ms())?,
                        Either::Second(()) => {
                            let withdraw = self.store.withdraw(&self.key, attempt.owner());
                            self.call(Operation::Acquire, withdraw).await?;
                            return Err(Error::Aborted);
                        }
                    }
                }
                Next::Sleep { ms } => {
                    let sleep = self.runtime.sleep(ms);
                    if let Either::Second(()) = race(sleep, cancel.as_mut()).await {
                        return Err(Error::Aborted);
                    }
                    trace.slept();
                    attempt.retry(self.runtime.monotonic_ms())
                }
                Next::Held => {
                    if is_done(cancel.as_mut()) {
                        let withdraw = self.store.withdraw(&self.key, attempt.owner());
                        self.call(Operation::Release, withdraw).await?;
                        return Err(Error::Aborted);
                    }
                    if let Some(held) = attempt.into_hold() {
                        self.take_hold(held);
                    }
                    return Ok(true);
                }
                Next::Refused => return Ok(false),
                Next::TimedOut { after_ms } => {
                    return Err(self.store_timeout(Operation::Acquire, after_ms))
                }
            };
        }
    }

    /// Records a hold the store granted as this handle's.
    pub(crate) fn take_hold(&self, held: Held) {
        let mut hold = self.hold.borrow_mut();
        // The same hold again keeps its watchers; another one replaces a hold that was lost
        // (or released: a release in flight has already said so).
        let ending = match &mut *hold {
            Hold::Held { owner, ending, .. } if *owner == held.owner => ending.take(),
            _ => None,
        };
        hold.end(
            Hold::Held {
                owner: held.owner,
                deadline: held.deadline,
                fence: held.fence,
                ending,
            },
            Ending::Lost,
        );
    }

    /// Frees the key whoever holds it — for an operator clearing a stuck lock. Dangerous: the
    /// holder is not stopped; it learns at its next extend (a keep-alive signals its task then).
    /// Answers whether anyone held it; fails with [`Error::Unsupported`] when the store cannot.
    pub async fn force_release(&self) -> LockResult<bool, S> {
        let outcome = self
            .call(Operation::ForceRelease, self.store.force_release(&self.key))
            .await?;
        match outcome {
            ForceRelease::Freed => Ok(true),
            ForceRelease::WasFree => Ok(false),
            ForceRelease::Unsupported => Err(Error::Unsupported {
                store: self.store.name(),
                operation: Operation::ForceRelease,
            }),
        }
    }

    /// Who holds the key and who waits ([`LockStore::inspect`]): every live hold's metadata,
    /// fence and time left, never an owner token. Fails with [`Error::Unsupported`] on a store
    /// that cannot say.
    pub async fn inspect(&self) -> LockResult<LockInfo, S> {
        match self
            .call(Operation::Inspect, self.store.inspect(&self.key))
            .await?
        {
            Some(info) => Ok(info),
            None => Err(Error::Unsupported {
                store: self.store.name(),
                operation: Operation::Inspect,
            }),
        }
    }

    /// Whether anyone (not necessarily this handle) holds the key.
    pub async fn is_locked(&self) -> LockResult<bool, S> {
        self.call(Operation::IsLocked, self.store.is_locked(&self.key))
            .await
    }

    /// Milliseconds until the key's expiry, or `None` when nobody holds it.
    pub async fn remaining_time(&self) -> LockResult<Option<u64>, S> {
        self.call(
            Operation::RemainingTime,
            self.store.remaining_time(&self.key),
        )
        .await
    }

    /// Did this handle hold the lock and lose it? Judged without a store call, against a
    /// conservative local deadline: the time the acquire/extend request was sent plus its TTL,
    /// so the answer may be "expired" slightly early but is never optimistic.
    pub fn is_expired(&self) -> bool {
        let deadline = match &*self.hold.borrow() {
            Hold::None => return false,
            Hold::Lost => return true,
            Hold::Held { deadline, .. } => *deadline,
        };
        // The clock is read with the hold not borrowed: in JS it is `performance.now()`, which
        // user code could replace with something that calls back into this lock.
        self.runtime.monotonic_ms() >= deadline
    }

    /// Freezes key, TTL, owner token, fence and local deadline into a versioned string that
    /// [`SerializedLock::parse`] reads back. Fails with [`Error::NotHeld`] when there is no
    /// hold to hand over, or it has expired (the restored lock could do nothing with it).
    pub fn serialize(&self) -> LockResult<String, S> {
        // Read before the hold is borrowed (see `is_expired`).
        let (wall, mono) = (self.runtime.now_ms(), self.runtime.monotonic_ms());
        match &*self.hold.borrow() {
            Hold::Held {
                owner,
                deadline,
                fence,
                ..
            } if mono < *deadline => Ok(SerializedLock {
                key: self.key.clone(),
                ttl: self.ttl,
                owner: owner.clone(),
                // Another process reads it by its wall clock.
                deadline_ms: shift(*deadline, mono, wall).max(1),
                fence: *fence,
                holding: self.holding.get(),
            }
            .encode()),
            _ => Err(self.not_held(HoldOperation::Serialize)),
        }
    }
}
