//! Running a task under the lock — `run` and its variants, which always release — and keeping
//! the hold alive while the task runs (`keep_alive`), with the loss signal the task is handed.

use super::*;

/// How `try_run` can fail: the task's own error, or the lock's.
#[derive(Debug, PartialEq)]
pub enum RunError<U, E> {
    /// The task ran and failed; the lock was released (or the release also failed, in which
    /// case the task's error wins: it is the one the caller needs to see).
    Task(U),
    /// Acquiring or releasing failed.
    Lock(E),
}

impl<U: fmt::Display, E: fmt::Display> fmt::Display for RunError<U, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Task(e) => write!(f, "task failed: {e}"),
            RunError::Lock(e) => write!(f, "lock failed: {e}"),
        }
    }
}

/// The outcome of a run whose task cannot fail, as the lock's own.
pub(crate) fn infallible<T, E>(
    outcome: Result<Option<T>, RunError<core::convert::Infallible, E>>,
) -> Result<Option<T>, E> {
    outcome.map_err(|error| match error {
        RunError::Lock(e) => e,
        RunError::Task(never) => match never {},
    })
}

impl<S: LockStore, R: Runtime> Lock<S, R> {
    /// Acquire, run `task` with the hold's [`RunContext`], and always release. `Ok(None)` means
    /// someone else held the lock and `task` never ran.
    ///
    /// ```
    /// use keel_lock::{AcquireOptions, Key, Lock, MemoryLockStore, Runtime, Ttl};
    /// use keel_lock::virtual_time::VirtualRuntime;
    ///
    /// let rt = VirtualRuntime::new();
    /// let store = MemoryLockStore::new(rt.clone());
    /// let charge = |worker: &'static str| {
    ///     let lock = Lock::new(Key::new("invoice:42").unwrap(), Ttl::default(), &store, rt.clone());
    ///     let rt = rt.clone();
    ///     async move {
    ///         // Wait up to 10 s for whoever holds the key; the task gets this hold's fence.
    ///         let waiting = AcquireOptions { timeout_ms: 10_000, retry_delay_ms: 50 };
    ///         lock.run(waiting, |held| async move {
    ///             rt.sleep(100).await; // the payment call
    ///             (worker, held.fence)
    ///         })
    ///         .await
    ///     }
    /// };
    /// let done = rt.join_all(vec![charge("east"), charge("west")]);
    /// // Both ran, one after the other: the second waited for the first to release.
    /// let mut fences: Vec<_> = done.into_iter().map(|r| r.unwrap().unwrap().1).collect();
    /// fences.sort();
    /// assert!(fences[0] < fences[1]);
    /// ```
    pub async fn run<T, Fut, F>(&self, options: AcquireOptions, task: F) -> LockResult<Option<T>, S>
    where
        F: FnOnce(RunContext) -> Fut,
        Fut: Future<Output = T>,
    {
        infallible(
            self.try_run(options, |context| async {
                Ok::<T, core::convert::Infallible>(task(context).await)
            })
            .await,
        )
    }

    /// [`Lock::run`] for a fallible task. The lock is released whether the task succeeds or
    /// fails; when both the task and the release fail, the task's error is the one returned.
    pub async fn try_run<T, U, Fut, F>(
        &self,
        options: AcquireOptions,
        task: F,
    ) -> Result<Option<T>, RunError<U, Error<S::Error>>>
    where
        F: FnOnce(RunContext) -> Fut,
        Fut: Future<Output = Result<T, U>>,
    {
        self.try_run_until(options, core::future::pending(), task)
            .await
    }

    /// [`Lock::try_run`] whose wait for the lock ends when `cancel` completes (see
    /// [`Lock::acquire_until`]); once the task runs, `cancel` no longer matters.
    pub async fn try_run_until<T, U, Fut, F>(
        &self,
        options: AcquireOptions,
        cancel: impl Future<Output = ()>,
        task: F,
    ) -> Result<Option<T>, RunError<U, Error<S::Error>>>
    where
        F: FnOnce(RunContext) -> Fut,
        Fut: Future<Output = Result<T, U>>,
    {
        self.try_run_with(options, cancel, None, task).await
    }

    /// The general form of [`Lock::try_run`]: waiting ends when `cancel` completes, and while
    /// the task runs its hold is watched — with `keep_alive`, extended every
    /// [`KeepAlive::every_ms`] — and the task's [`RunContext`] signals a loss: an extend the
    /// store refused, the local deadline passing without a successful extend, or the
    /// [`KeepAlive::max_hold_ms`] cap. An extend that fails with a store error is retried until
    /// the deadline. Nothing re-acquires a lost hold, and the release waits for an extend in
    /// flight, so nothing extends after it. A task that finishes before its first await sets no
    /// timer at all.
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
        // With a listener, the run is told: its acquisition, how its hold ends, and a loss its
        // watcher finds.
        #[cfg(feature = "std")]
        let (acquired, granted_at) = match &self.events {
            Some(listener) => {
                let call = crate::events::Call::Run;
                Box::pin(self.acquire_told(listener, call, options, cancel)).await
            }
            None => (self.acquire_until(options, cancel).await, None),
        };
        #[cfg(not(feature = "std"))]
        let acquired = self.acquire_until(options, cancel).await;
        if !acquired.map_err(RunError::Lock)? {
            return Ok(None);
        }
        // The token of *this* run's hold: if the task outlives the TTL and the handle is
        // re-acquired meanwhile, the cleanup below must not free that newer hold.
        let (owner, fence) = match &*self.hold.borrow() {
            Hold::Held { owner, fence, .. } => (owner.clone(), *fence),
            _ => return Ok(None),
        };
        // Tracked from the moment it is taken, however late its watcher starts.
        let tracked = self.track(&owner);
        let loss = Rc::new(LossState::default());
        #[cfg(feature = "std")]
        if let Some(listener) = &self.events {
            self.tell_loss(listener, &loss, fence);
        }
        let outcome = self
            .watched(
                task(RunContext::new(fence, loss.clone())),
                &tracked,
                keep_alive,
                &loss,
            )
            .await;
        let released = self.release_hold(&owner).await;
        #[cfg(feature = "std")]
        if let (Some(listener), Some(granted_at)) = (&self.events, granted_at) {
            self.tell_run_end(listener, granted_at, fence, outcome.is_err(), &released);
        }
        match (outcome, released) {
            (Err(task_error), _) => Err(RunError::Task(task_error)),
            (Ok(_), Err(lock_error)) => Err(RunError::Lock(lock_error)),
            (Ok(value), Ok(_)) => Ok(Some(value)),
        }
    }

    /// The [`RunContext`] of the current hold, for watching it outside `run` with
    /// [`Lock::keep_alive`]; `None` when this handle holds nothing.
    pub fn hold_context(&self) -> Option<RunContext> {
        match &*self.hold.borrow() {
            Hold::Held { fence, .. } => Some(RunContext::new(*fence, Rc::default())),
            _ => None,
        }
    }

    /// Watches the current hold (as `run` does while its task runs) until `stop` completes:
    /// with `keep_alive`, extends it; signals `context` when the hold is lost. An extend in
    /// flight when `stop` completes is let finish. Returns at once when nothing is held.
    pub async fn keep_alive(
        &self,
        context: &RunContext,
        keep_alive: Option<KeepAlive>,
        stop: impl Future<Output = ()>,
    ) {
        let Some(owner) = self.owner() else { return };
        self.watched(stop, &self.track(&owner), keep_alive, context.loss_state())
            .await;
    }

    /// Runs `task` while a watcher looks after `hold` (see
    /// [`Lock::try_run_with`]). The watcher is an unstarted future until the task first waits.
    async fn watched<T>(
        &self,
        task: impl Future<Output = T>,
        hold: &TrackedHold,
        keep_alive: Option<KeepAlive>,
        loss: &LossState,
    ) -> T {
        let extending = Cell::new(false);
        let mut task = core::pin::pin!(task);
        let mut watcher = core::pin::pin!(self.watch(hold, keep_alive, loss, &extending));
        let mut watching = true;
        let out = core::future::poll_fn(|cx| {
            if let Poll::Ready(out) = task.as_mut().poll(cx) {
                return Poll::Ready(out);
            }
            if watching && watcher.as_mut().poll(cx).is_ready() {
                watching = false;
            }
            Poll::Pending
        })
        .await;
        // An extend in flight finishes before the release that follows.
        if watching && extending.get() {
            core::future::poll_fn(|cx| {
                if !extending.get() || watcher.as_mut().poll(cx).is_ready() {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            })
            .await;
        }
        out
    }

    /// The hold's watcher: fires `loss` at the local deadline, or, with `keep_alive`, extends
    /// until an extend is refused, the deadline passes without one succeeding, or the cap.
    async fn watch(
        &self,
        hold: &TrackedHold,
        keep_alive: Option<KeepAlive>,
        loss: &LossState,
        extending: &Cell<bool>,
    ) {
        let mut watch = Watch::new(self.ttl.as_ms(), keep_alive, self.runtime.monotonic_ms());
        if keep_alive.is_none() {
            // Only the deadline to watch: not worth a timer until someone asks about the loss.
            loss.observed().await;
        }
        loop {
            let now = self.runtime.monotonic_ms();
            match watch.next(self.hold_state(hold), now) {
                WatchStep::Lost(reason) => {
                    loss.fire(reason);
                    return;
                }
                WatchStep::Ended => return,
                WatchStep::Extend => {
                    extending.set(true);
                    let extended = self.extend_untold(None).await;
                    extending.set(false);
                    watch.extended(extended.is_ok(), self.runtime.monotonic_ms());
                }
                WatchStep::Sleep { ms } => self.runtime.sleep(ms).await,
            }
        }
    }
}
