//! Lock events ([`crate::events`]) for a [`Lock`] with a listener. Each public call checks for
//! a listener on its way in; with one, it is made here, around the plain call, and what the
//! call came to is read from its answer (and, for an acquisition, from its [`Trace`]). Without
//! one, none of this runs.

use super::*;
use crate::events::{Call, ErrorKind, LockEvent, LockEventKind, LockEventListener, Trace};
use crate::holding::{LossReason, LossState};

impl<S: LockStore, R: Runtime> Lock<S, R> {
    /// This lock, telling `listener` what its calls come to ([`crate::events`]): each run and
    /// acquire (attempted, then granted, refused, timed out, aborted or failed), how a run's
    /// hold ends (released, release refused, failed) and a loss its watcher finds, and each
    /// release and extend. `None` tells nothing.
    ///
    /// Builds with `std` only: the JS builds leave lock events to the JS face (`onLockEvent`).
    pub fn with_events(mut self, listener: Option<LockEventListener>) -> Self {
        self.events = listener;
        self
    }

    /// The listener this lock tells its events to, if any.
    pub fn events(&self) -> Option<&LockEventListener> {
        self.events.as_ref()
    }

    /// An event of `call` about this lock.
    fn event(&self, call: Call, fence: Option<Fence>, kind: LockEventKind) -> LockEvent<'_> {
        LockEvent {
            keys: core::slice::from_ref(&self.key),
            store: self.store.name(),
            holding: self.holding.get(),
            call,
            fence,
            kind,
        }
    }

    /// [`Lock::acquire_until`] as `call`, told to `listener`: attempted, then what it came to.
    /// Also answers when the grant came (monotonic), for a run to tell how long it held.
    pub(crate) async fn acquire_told(
        &self,
        listener: &LockEventListener,
        call: Call,
        options: AcquireOptions,
        cancel: impl Future<Output = ()>,
    ) -> (LockResult<bool, S>, Option<u64>) {
        let started = self.runtime.monotonic_ms();
        let timeout_ms = options.timeout_ms;
        listener(&self.event(call, None, LockEventKind::Attempted { timeout_ms }));
        let mut trace = Trace::new();
        let outcome = self.acquire_traced(options, cancel, &mut trace).await;
        let now = self.runtime.monotonic_ms();
        let (fence, kind) = acquisition(&outcome, now.saturating_sub(started), timeout_ms, || {
            (self.fence(), trace.via())
        });
        listener(&self.event(call, fence, kind));
        let granted_at = matches!(outcome, Ok(true)).then_some(now);
        (outcome, granted_at)
    }

    /// [`Lock::release`], told to `listener`.
    pub(crate) async fn release_told(&self, listener: &LockEventListener) -> LockResult<bool, S> {
        let fence = self.fence();
        let outcome = self.release_untold().await;
        let kind = match &outcome {
            Ok(true) => LockEventKind::Released {
                held_ms: None,
                task_failed: false,
            },
            Ok(false) => LockEventKind::ReleaseRefused,
            Err(error) => failed(error, None),
        };
        listener(&self.event(Call::Release, fence, kind));
        outcome
    }

    /// [`Lock::extend`], told to `listener`: extended, or — the hold gone — lost (refused by
    /// the store, or past its local deadline, so the store was not asked), or failed.
    pub(crate) async fn extend_told(
        &self,
        listener: &LockEventListener,
        ttl: Option<Ttl>,
    ) -> LockResult<(), S> {
        let fence = self.fence();
        let loss = self.loss_if_refused(self.runtime.monotonic_ms());
        let outcome = self.extend_untold(ttl).await;
        let kind = match (&outcome, loss) {
            (Ok(()), _) => LockEventKind::Extended,
            (Err(Error::NotHeld { .. }), Some(reason)) => LockEventKind::Lost { reason },
            (Err(error), _) => failed(error, None),
        };
        listener(&self.event(Call::Extend, fence, kind));
        outcome
    }

    /// What an extend made at `now` (monotonic) would have lost, were it answered
    /// [`Error::NotHeld`]: a hold within its local deadline is asked about, and the store's
    /// refusal is [`LossReason::Refused`]; one past it is [`LossReason::Expired`]. `None` when
    /// there is no hold (never taken, released, or its loss already found).
    pub(crate) fn loss_if_refused(&self, now: u64) -> Option<LossReason> {
        match &*self.hold.borrow() {
            Hold::Held { deadline, .. } if now < *deadline => Some(LossReason::Refused),
            Hold::Held { .. } => Some(LossReason::Expired),
            _ => None,
        }
    }

    /// Tells `listener` when `loss` fires: the run's watcher found the hold lost.
    pub(crate) fn tell_loss(
        &self,
        listener: &LockEventListener,
        loss: &LossState,
        fence: Option<Fence>,
    ) {
        let (listener, key) = (listener.clone(), self.key.clone());
        let (store, holding) = (self.store.name(), self.holding.get());
        loss.on_fire(Box::new(move |reason| {
            listener(&LockEvent {
                keys: core::slice::from_ref(&key),
                store,
                holding,
                call: Call::Run,
                fence,
                kind: LockEventKind::Lost { reason },
            })
        }));
    }

    /// Tells `listener` how a run's hold, granted at `granted_at` (monotonic), ended: the
    /// release's answer, and whether the task failed.
    pub(crate) fn tell_run_end(
        &self,
        listener: &LockEventListener,
        granted_at: u64,
        fence: Option<Fence>,
        task_failed: bool,
        released: &LockResult<bool, S>,
    ) {
        let kind = run_end(
            released,
            task_failed,
            self.runtime.monotonic_ms().saturating_sub(granted_at),
        );
        listener(&self.event(Call::Run, fence, kind));
    }
}

/// What an acquisition that answered `outcome` after `waited_ms` came to; `granted` says the
/// fence and the way of a grant.
pub(crate) fn acquisition<E>(
    outcome: &Result<bool, Error<E>>,
    waited_ms: u64,
    timeout_ms: u64,
    granted: impl FnOnce() -> (Option<Fence>, crate::events::GrantVia),
) -> (Option<Fence>, LockEventKind) {
    let kind = match outcome {
        Ok(true) => {
            let (fence, via) = granted();
            return (fence, LockEventKind::Granted { waited_ms, via });
        }
        Ok(false) if timeout_ms > 0 => LockEventKind::TimedOut { waited_ms },
        Ok(false) => LockEventKind::Refused { waited_ms },
        Err(Error::Aborted) => LockEventKind::Aborted { waited_ms },
        Err(error) => failed(error, Some(waited_ms)),
    };
    (None, kind)
}

/// How a run's hold ended, held `held_ms`, its release answered `released`.
pub(crate) fn run_end<E>(
    released: &Result<bool, Error<E>>,
    task_failed: bool,
    held_ms: u64,
) -> LockEventKind {
    match released {
        Ok(true) => LockEventKind::Released {
            held_ms: Some(held_ms),
            task_failed,
        },
        Ok(false) => LockEventKind::ReleaseRefused,
        Err(error) => failed(error, None),
    }
}

/// A failure with `error`, after `waited_ms` for an acquisition.
pub(crate) fn failed<E>(error: &Error<E>, waited_ms: Option<u64>) -> LockEventKind {
    LockEventKind::Failed {
        error: ErrorKind::of(error),
        waited_ms,
    }
}
