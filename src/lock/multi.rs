//! Several keys held as one: a [`MultiLock`] takes every key of its set in one canonical order
//! (the keys sorted), so callers taking overlapping sets never wait on each other in a cycle, and
//! it holds all of them or none. It is made of one [`Lock`] per key over any store's single-key
//! operations; a store that takes a set in one step ([`LockStore::acquire_many`]) answers the
//! first attempt in one request.

use super::*;
#[cfg(feature = "std")]
use crate::events::{Call, LockEvent, LockEventKind, LockEventListener};
#[cfg(feature = "std")]
use crate::holding::{LossReason, LossState};
use crate::input::InputError;
use crate::store::ManyGrant;
#[cfg(feature = "std")]
use crate::token::Metadata;

/// The most keys one [`MultiLock`] takes.
pub const MAX_KEYS: usize = 64;

/// How a serialized multi-key lock starts; then the number of keys, `:`, and each key's
/// serialized hold (`Lock::serialize`), in order, separated by `,` (which none of them holds).
/// The JS face writes and reads the same form.
const SET_PREFIX: &str = "keel-lock-set:1:";

/// A lock over several keys at once: all held or none, on any store.
///
/// Acquiring first asks the store to take every key in one step, where it can
/// ([`LockStore::acquire_many`]; exclusive sets only). Otherwise — or refused, with a timeout
/// to wait — it takes the keys one at a time in sorted order, each within what is left of the
/// timeout; a key refused, timed out or aborted frees every key taken so far before the call
/// answers. Because everyone takes keys in the same order, two callers with overlapping sets
/// never deadlock: the one holding the lower shared key finishes first. Each key keeps its own
/// fence ([`MultiLock::fences`]); there is no fence for the set as a whole, since a resource is
/// protected by the fence of the key that guards it. Losing any key is losing the lock.
///
/// Waiting is fair per key where the store hands over: a multi-key waiter queues for one key at
/// a time (the lowest it does not hold yet), first come first served there, holding the keys
/// below it meanwhile.
///
/// ```
/// use keel_lock::{AcquireOptions, Key, MemoryLockStore, MultiLock, Runtime, Ttl};
/// use keel_lock::virtual_time::VirtualRuntime;
///
/// let rt = VirtualRuntime::new();
/// let store = MemoryLockStore::new(rt.clone());
/// let transfer = |from: &str, to: &str| {
///     let keys = [Key::new(from).unwrap(), Key::new(to).unwrap()];
///     let lock = MultiLock::new(keys, Ttl::default(), &store, rt.clone()).unwrap();
///     let rt = rt.clone();
///     async move {
///         let waiting = AcquireOptions { timeout_ms: 10_000, retry_delay_ms: 50 };
///         lock.run(waiting, |_held| async move { rt.sleep(100).await }).await
///     }
/// };
/// // Opposite orders, at once: both finish, one after the other.
/// let done = rt.join_all(vec![transfer("account:1", "account:2"), transfer("account:2", "account:1")]);
/// assert!(done.iter().all(|r| matches!(r, Ok(Some(())))));
/// ```
pub struct MultiLock<S, R> {
    /// One lock per key, in the order they are taken (sorted by key).
    locks: Vec<Lock<S, R>>,
    ttl: Ttl,
    runtime: R,
    /// Told every event of this lock's calls, with the keys they are about (see
    /// [`MultiLock::with_events`]).
    #[cfg(feature = "std")]
    events: Option<(LockEventListener, Vec<Key>)>,
}

impl<S: LockStore + Clone, R: Runtime + Clone> MultiLock<S, R> {
    /// A lock over `keys`, each held for `ttl` once acquired. No keys, more than [`MAX_KEYS`],
    /// or a key given twice is an [`InputError::InvalidKeySet`].
    pub fn new(
        keys: impl IntoIterator<Item = Key>,
        ttl: Ttl,
        store: S,
        runtime: R,
    ) -> Result<Self, InputError> {
        let mut keys: Vec<Key> = keys.into_iter().collect();
        let reason = if keys.is_empty() {
            Some("no keys")
        } else if keys.len() > MAX_KEYS {
            Some("more than 64 keys")
        } else {
            keys.sort();
            keys.windows(2)
                .any(|pair| pair[0] == pair[1])
                .then_some("a key given twice")
        };
        if let Some(reason) = reason {
            return Err(InputError::InvalidKeySet { reason });
        }
        let locks = keys
            .into_iter()
            .map(|key| Lock::new(key, ttl, store.clone(), runtime.clone()))
            .collect();
        Ok(MultiLock {
            locks,
            ttl,
            runtime,
            #[cfg(feature = "std")]
            events: None,
        })
    }

    /// This lock, taking every key as `holding` says (read locks on several keys, say).
    pub fn holding(self, holding: Holding) -> Self {
        for lock in &self.locks {
            lock.set_holding(holding);
        }
        self
    }

    /// This lock, telling `listener` what its calls come to, as [`Lock::with_events`] does,
    /// once for the set: its events name every key, in the order they are taken, and carry no
    /// fence (each key's is in [`MultiLock::fences`]). `None` tells nothing.
    #[cfg(feature = "std")]
    pub fn with_events(mut self, listener: Option<LockEventListener>) -> Self {
        self.events = listener.map(|listener| (listener, self.keys().cloned().collect()));
        self
    }

    /// This lock, every key's hold carrying `metadata` (see [`Lock::with_metadata`]).
    #[cfg(feature = "std")]
    pub fn with_metadata(self, metadata: Option<Metadata>) -> Self {
        for lock in &self.locks {
            lock.set_metadata(metadata.clone());
        }
        self
    }

    /// The keys, in the order they are taken.
    pub fn keys(&self) -> impl Iterator<Item = &Key> {
        self.locks.iter().map(Lock::key)
    }

    /// The lock of each key, in the order they are taken.
    pub fn locks(&self) -> &[Lock<S, R>] {
        &self.locks
    }

    /// The TTL each key is held for.
    pub fn ttl(&self) -> Ttl {
        self.ttl
    }

    /// Each key with its fence while every key is held and its store keeps fences.
    pub fn fences(&self) -> Option<Vec<(Key, Fence)>> {
        self.locks
            .iter()
            .map(|lock| lock.fence().map(|fence| (lock.key().clone(), fence)))
            .collect()
    }

    /// Whether the hold is presumed lost: some key's local deadline has passed.
    pub fn is_expired(&self) -> bool {
        self.locks.iter().any(Lock::is_expired)
    }

    /// Tries to take every key with fresh owner tokens (see [`Lock::acquire`]): `true` when all
    /// are held, `false` — with none held — when one was refused or the timeout was spent.
    pub async fn acquire(&self, options: AcquireOptions) -> LockResult<bool, S> {
        self.acquire_until(options, core::future::pending()).await
    }

    /// [`MultiLock::acquire`] that gives up when `cancel` completes first: every key taken so
    /// far is freed and it fails with [`Error::Aborted`].
    pub async fn acquire_until(
        &self,
        options: AcquireOptions,
        cancel: impl Future<Output = ()>,
    ) -> LockResult<bool, S> {
        #[cfg(feature = "std")]
        if let Some((listener, keys)) = &self.events {
            let call = Call::Acquire;
            return Box::pin(self.acquire_told(listener, keys, call, options, cancel))
                .await
                .0;
        }
        self.acquire_traced(options, cancel, &mut Trace::new())
            .await
    }

    /// [`MultiLock::acquire_until`], recording in `trace` how the grant came (a key that came
    /// after a wait says how it came).
    async fn acquire_traced(
        &self,
        options: AcquireOptions,
        cancel: impl Future<Output = ()>,
        trace: &mut Trace,
    ) -> LockResult<bool, S> {
        let mut cancel = core::pin::pin!(cancel);
        let cancelled = Cell::new(false);
        let deadline = self
            .runtime
            .monotonic_ms()
            .saturating_add(options.timeout_ms);
        if let Some(all) = self.take_at_once(options.timeout_ms > 0).await? {
            if all && is_done(cancel.as_mut()) {
                self.free(&self.locks).await?;
                return Err(Error::Aborted);
            }
            if all || options.timeout_ms == 0 {
                return Ok(all);
            }
        }
        'attempt: loop {
            let mut first_grant = None;
            for (taken, lock) in self.locks.iter().enumerate() {
                let left = deadline.saturating_sub(self.runtime.monotonic_ms());
                let this_key = AcquireOptions {
                    timeout_ms: left,
                    ..options
                };
                // One cancellation for every key's wait: once it fired, it stays fired.
                let cancel_this = core::future::poll_fn(|cx| {
                    if cancelled.get() || cancel.as_mut().poll(cx).is_ready() {
                        cancelled.set(true);
                        Poll::Ready(())
                    } else {
                        Poll::Pending
                    }
                });
                match lock.acquire_traced(this_key, cancel_this, trace).await {
                    Ok(true) => {
                        first_grant.get_or_insert(self.runtime.monotonic_ms());
                    }
                    outcome => {
                        self.free(&self.locks[..taken]).await?;
                        return outcome;
                    }
                }
            }
            // A key taken early may have run out while a later one was waited for: it is
            // lost, so none is kept, and the keys are taken again while the timeout lasts.
            if self.is_expired() {
                self.free(&self.locks).await?;
                if self.runtime.monotonic_ms() >= deadline {
                    return Ok(false);
                }
                continue 'attempt;
            }
            // Keys held for more than half their TTL before the last came in get it anew, so
            // the set is held for about a whole TTL from here.
            let half = self.ttl.as_ms() / 2;
            if first_grant.is_some_and(|at| self.runtime.monotonic_ms() - at > half) {
                for lock in &self.locks[..self.locks.len() - 1] {
                    if let Err(error) = lock.extend(None).await {
                        self.free(&self.locks).await?;
                        return match error {
                            Error::NotHeld { .. } => Ok(false),
                            error => Err(error),
                        };
                    }
                }
            }
            return Ok(true);
        }
    }

    /// Every key's hold as one string that [`MultiLock::restore`] (or JS `restoreLock`) reads
    /// back. Fails with [`Error::NotHeld`] unless every key is held.
    pub fn serialize(&self) -> LockResult<String, S> {
        let mut text = [
            SET_PREFIX,
            &crate::input::decimal(self.locks.len() as u64),
            ":",
        ]
        .concat();
        for (i, lock) in self.locks.iter().enumerate() {
            if i > 0 {
                text.push(',');
            }
            text.push_str(&lock.serialize()?);
        }
        Ok(text)
    }

    /// Rebuilds a multi-key lock from [`MultiLock::serialize`]'s output, every key's owner
    /// token and all. A string cut short, with another count, or with keys out of order,
    /// repeated or of different TTLs is refused.
    pub fn restore(text: &str, store: S, runtime: R) -> Result<Self, InputError> {
        let malformed = |reason: &str| InputError::MalformedSerializedLock {
            reason: reason.to_owned(),
        };
        let rest = text
            .strip_prefix(SET_PREFIX)
            .ok_or_else(|| malformed("not a multi-key lock"))?;
        let (count, parts) = rest
            .split_once(':')
            .ok_or_else(|| malformed("no key count"))?;
        let count: usize = count.parse().map_err(|_| malformed("a bad key count"))?;
        let parts: Vec<&str> = parts.split(',').collect();
        if count == 0 || count > MAX_KEYS || parts.len() != count {
            return Err(malformed("its key count and its keys disagree"));
        }
        let mut locks = Vec::with_capacity(count);
        for part in parts {
            let held = crate::serialized::SerializedLock::parse(part)?;
            locks.push(Lock::restore(held, store.clone(), runtime.clone()));
        }
        let ttl = locks[0].ttl();
        let in_order = locks
            .windows(2)
            .all(|pair| pair[0].key() < pair[1].key() && pair[1].ttl() == ttl);
        if !in_order {
            return Err(malformed(
                "keys out of order, repeated or of different TTLs",
            ));
        }
        Ok(MultiLock {
            locks,
            ttl,
            runtime,
            #[cfg(feature = "std")]
            events: None,
        })
    }

    /// The first attempt of an exclusive set, in the store's one step
    /// ([`LockStore::acquire_many`]) with a fresh owner token per key: `Some(true)` when every
    /// key is held, `Some(false)` when refused (none held), `None` when the store has no such
    /// step for this set. Unanswered within the TTL: a [`Error::StoreTimeout`], or — `waits`,
    /// with a timeout to spend — `None`, and the keys are taken one at a time.
    async fn take_at_once(&self, waits: bool) -> LockResult<Option<bool>, S> {
        let first = &self.locks[0];
        if self.locks.len() < 2
            || first.current_holding() != Holding::Exclusive
            || !first.store().acquires_many()
        {
            return Ok(None);
        }
        let keys: Vec<Key> = self.keys().cloned().collect();
        if let Some(refused) = first.metadata_refused() {
            return Err(refused);
        }
        let owners = self
            .locks
            .iter()
            .map(|_lock| {
                let owner = OwnerToken::mint();
                #[cfg(feature = "std")]
                let owner = owner.map(|owner| _lock.tagged(&owner));
                owner
            })
            .collect::<Result<Vec<_>, _>>()?;
        let sent = self.runtime.monotonic_ms();
        let call = first.store().acquire_many(&keys, &owners, self.ttl);
        let grants = match first.call(Operation::Acquire, call).await {
            Ok(ManyGrant::All(grants)) => grants,
            Ok(ManyGrant::Refused) => return Ok(Some(false)),
            Ok(_) => return Ok(None),
            Err(Error::StoreTimeout { .. }) if waits => return Ok(None),
            Err(error) => return Err(error),
        };
        if grants.len() != keys.len() {
            // Not an answer the seam allows: whatever it granted is given back.
            for (key, owner) in keys.iter().zip(&owners) {
                let _ = first.store().release(key, owner).await;
            }
            return Ok(None);
        }
        for ((lock, owner), grant) in self.locks.iter().zip(owners).zip(grants) {
            lock.take_hold(Held {
                owner,
                deadline: sent
                    .saturating_add(grant.waited_ms())
                    .saturating_add(self.ttl.as_ms()),
                fence: grant.fence(),
            });
        }
        Ok(Some(true))
    }

    /// Frees `locks` (keys taken by a failed acquisition), the last taken first.
    async fn free(&self, locks: &[Lock<S, R>]) -> LockResult<(), S> {
        let mut first_error = None;
        for lock in locks.iter().rev() {
            if let Err(error) = lock.release().await {
                first_error.get_or_insert(error);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Frees every key this handle holds, the last taken first. Answers whether every key was
    /// still held (a key already lost makes it `false`; the others are freed all the same). A
    /// store error is returned after every key was tried.
    pub async fn release(&self) -> LockResult<bool, S> {
        #[cfg(feature = "std")]
        if let Some((listener, keys)) = &self.events {
            return Box::pin(self.release_told(listener, keys)).await;
        }
        self.release_untold().await
    }

    /// [`MultiLock::release`], told to no listener.
    async fn release_untold(&self) -> LockResult<bool, S> {
        let mut all = true;
        let mut first_error = None;
        for lock in self.locks.iter().rev() {
            match lock.release().await {
                Ok(released) => all &= released,
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        first_error.map_or(Ok(all), Err)
    }

    /// Resets every key's TTL (to `ttl`, if given). A key that is no longer held makes the lock
    /// lost: the other keys are freed and it fails with [`Error::NotHeld`].
    pub async fn extend(&self, ttl: Option<Ttl>) -> LockResult<(), S> {
        #[cfg(feature = "std")]
        if let Some((listener, keys)) = &self.events {
            return Box::pin(self.extend_told(listener, keys, ttl)).await;
        }
        self.extend_untold(ttl).await
    }

    /// [`MultiLock::extend`], told to no listener.
    async fn extend_untold(&self, ttl: Option<Ttl>) -> LockResult<(), S> {
        for lock in &self.locks {
            if let Err(error) = lock.extend(ttl).await {
                if matches!(error, Error::NotHeld { .. }) {
                    self.release_untold().await?;
                }
                return Err(error);
            }
        }
        Ok(())
    }

    /// Acquire every key, run `task`, and always release (see [`Lock::run`]). The task's
    /// [`RunContext`] has no fence (each key's is in [`MultiLock::fences`]) and signals a loss
    /// when any key is lost. `Ok(None)`: some key was held by someone else and `task` never ran.
    pub async fn run<T, Fut, F>(&self, options: AcquireOptions, task: F) -> LockResult<Option<T>, S>
    where
        F: FnOnce(RunContext) -> Fut,
        Fut: Future<Output = T>,
    {
        super::run::infallible(
            self.try_run_with(options, core::future::pending(), None, |context| async {
                Ok::<T, core::convert::Infallible>(task(context).await)
            })
            .await,
        )
    }

    /// [`Lock::try_run_with`] over every key: the wait ends when `cancel` completes; while the
    /// task runs each key is watched (and, with `keep_alive`, extended) and the first key lost
    /// signals the task's [`RunContext`]. The keys are released whether the task succeeds or
    /// fails; when both fail, the task's error wins.
    pub async fn try_run_with<T, U, Fut, F>(
        &self,
        options: AcquireOptions,
        cancel: impl Future<Output = ()>,
        keep_alive: Option<KeepAlive>,
        task: F,
    ) -> Result<Option<T>, RunError<U, Error<S::Error>>>
    where
        F: FnOnce(RunContext) -> Fut,
        Fut: Future<Output = Result<T, U>>,
    {
        #[cfg(feature = "std")]
        let (acquired, granted_at) = match &self.events {
            Some((listener, keys)) => {
                Box::pin(self.acquire_told(listener, keys, Call::Run, options, cancel)).await
            }
            None => (self.acquire_until(options, cancel).await, None),
        };
        #[cfg(not(feature = "std"))]
        let acquired = self.acquire_until(options, cancel).await;
        if !acquired.map_err(RunError::Lock)? {
            return Ok(None);
        }
        let context = RunContext::new(None, Rc::default());
        #[cfg(feature = "std")]
        if let Some((listener, keys)) = &self.events {
            self.tell_loss(listener, keys, context.loss_state());
        }
        let done = Cell::new(false);
        let stop = || {
            core::future::poll_fn(|_| {
                if done.get() {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            })
        };
        let mut watchers: Vec<_> = self
            .locks
            .iter()
            .map(|lock| Box::pin(lock.keep_alive(&context, keep_alive, stop())))
            .collect();
        let mut task = core::pin::pin!(task(context.clone()));
        let outcome = core::future::poll_fn(|cx| {
            if let Poll::Ready(out) = task.as_mut().poll(cx) {
                return Poll::Ready(out);
            }
            watchers.retain_mut(|watcher| watcher.as_mut().poll(cx).is_pending());
            Poll::Pending
        })
        .await;
        // The watchers stop; an extend in flight finishes before the release below.
        done.set(true);
        core::future::poll_fn(|cx| {
            watchers.retain_mut(|watcher| watcher.as_mut().poll(cx).is_pending());
            if watchers.is_empty() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
        let released = self.release_untold().await;
        #[cfg(feature = "std")]
        if let (Some((listener, keys)), Some(granted_at)) = (&self.events, granted_at) {
            let held_ms = self.runtime.monotonic_ms().saturating_sub(granted_at);
            let kind = super::told::run_end(&released, outcome.is_err(), held_ms);
            listener(&self.event(keys, Call::Run, kind));
        }
        match (outcome, released) {
            (Err(task_error), _) => Err(RunError::Task(task_error)),
            (Ok(_), Err(lock_error)) => Err(RunError::Lock(lock_error)),
            (Ok(value), Ok(_)) => Ok(Some(value)),
        }
    }
}

/// Lock events for a [`MultiLock`] with a listener: the set's calls told as one, as
/// [`Lock`]'s are (see `told.rs`).
#[cfg(feature = "std")]
impl<S: LockStore + Clone, R: Runtime + Clone> MultiLock<S, R> {
    /// An event of `call` about the set of `keys`.
    fn event<'a>(&self, keys: &'a [Key], call: Call, kind: LockEventKind) -> LockEvent<'a> {
        let first = &self.locks[0];
        LockEvent {
            keys,
            store: first.store().name(),
            holding: first.current_holding(),
            call,
            fence: None,
            kind,
        }
    }

    /// [`MultiLock::acquire_until`] as `call`, told to `listener`; also answers when the grant
    /// came (monotonic).
    async fn acquire_told(
        &self,
        listener: &LockEventListener,
        keys: &[Key],
        call: Call,
        options: AcquireOptions,
        cancel: impl Future<Output = ()>,
    ) -> (LockResult<bool, S>, Option<u64>) {
        let started = self.runtime.monotonic_ms();
        let timeout_ms = options.timeout_ms;
        listener(&self.event(keys, call, LockEventKind::Attempted { timeout_ms }));
        let mut trace = Trace::new();
        let outcome = self.acquire_traced(options, cancel, &mut trace).await;
        let now = self.runtime.monotonic_ms();
        let waited_ms = now.saturating_sub(started);
        let (_, kind) =
            super::told::acquisition(&outcome, waited_ms, timeout_ms, || (None, trace.via()));
        listener(&self.event(keys, call, kind));
        let granted_at = matches!(outcome, Ok(true)).then_some(now);
        (outcome, granted_at)
    }

    /// [`MultiLock::release`], told to `listener`: released when every key was, release
    /// refused when some key no longer was.
    async fn release_told(
        &self,
        listener: &LockEventListener,
        keys: &[Key],
    ) -> LockResult<bool, S> {
        let outcome = self.release_untold().await;
        let kind = match &outcome {
            Ok(true) => LockEventKind::Released {
                held_ms: None,
                task_failed: false,
            },
            Ok(false) => LockEventKind::ReleaseRefused,
            Err(error) => super::told::failed(error, None),
        };
        listener(&self.event(keys, Call::Release, kind));
        outcome
    }

    /// [`MultiLock::extend`], told to `listener`: a key past its local deadline makes the set
    /// lost as expired; otherwise a key the store no longer records, as refused.
    async fn extend_told(
        &self,
        listener: &LockEventListener,
        keys: &[Key],
        ttl: Option<Ttl>,
    ) -> LockResult<(), S> {
        let now = self.runtime.monotonic_ms();
        let losses: Option<Vec<LossReason>> = self
            .locks
            .iter()
            .map(|lock| lock.loss_if_refused(now))
            .collect();
        let loss = losses.map(|losses| {
            if losses.contains(&LossReason::Expired) {
                LossReason::Expired
            } else {
                LossReason::Refused
            }
        });
        let outcome = self.extend_untold(ttl).await;
        let kind = match (&outcome, loss) {
            (Ok(()), _) => LockEventKind::Extended,
            (Err(Error::NotHeld { .. }), Some(reason)) => LockEventKind::Lost { reason },
            (Err(error), _) => super::told::failed(error, None),
        };
        listener(&self.event(keys, Call::Extend, kind));
        outcome
    }

    /// Tells `listener` when `loss` (a run's) fires: some key of the set was found lost.
    fn tell_loss(&self, listener: &LockEventListener, keys: &[Key], loss: &LossState) {
        let (listener, keys) = (listener.clone(), keys.to_vec());
        let first = &self.locks[0];
        let (store, holding) = (first.store().name(), first.current_holding());
        loss.on_fire(Box::new(move |reason| {
            listener(&LockEvent {
                keys: &keys,
                store,
                holding,
                call: Call::Run,
                fence: None,
                kind: LockEventKind::Lost { reason },
            })
        }));
    }
}
