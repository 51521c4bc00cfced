//! Holding a lock safely: the loss signal a running task is handed, and the keep-alive (auto-
//! extend) options that keep a long task's hold from expiring under it.

use crate::prelude::*;
use alloc::rc::Rc;
use core::cell::{Cell, RefCell};
use core::fmt;
use core::future::Future;
use core::task::{Poll, Waker};

use crate::grant::Fence;

/// Why a hold is known, or presumed, lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// The conservative local deadline passed without a successful extend: the store may have
    /// freed the key, and someone else may hold it.
    Expired,
    /// The store refused an extend: it no longer records this hold (it expired there, or was
    /// force-released).
    Refused,
    /// Auto-extension reached its `max_hold_ms` cap and stopped; the hold is treated as over.
    HoldCapReached,
}

impl LossReason {
    /// The `Display` text.
    pub fn as_str(self) -> &'static str {
        match self {
            LossReason::Expired => "its TTL passed without a successful extend",
            LossReason::Refused => "the store no longer records this holder",
            LossReason::HoldCapReached => "it was held for its maximum hold time",
        }
    }
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Auto-extension for a running task: extend every `every_ms` while it runs, for at most
/// `max_hold_ms` in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KeepAlive {
    /// Extend this often, in ms. `None` picks a third of the lock's TTL.
    pub every_ms: Option<u64>,
    /// Stop extending (and signal the task) once the hold is this old, in ms. `None`: no cap.
    pub max_hold_ms: Option<u64>,
}

/// Where a watched hold stands, as its lock knows it (what [`Watch::next`] is told).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldState {
    /// Still held, until this local deadline (monotonic ms).
    Held {
        /// The hold's conservative local deadline.
        deadline: u64,
    },
    /// Its holder released it.
    Released,
    /// Known lost: the store refused an extend or a release, or the handle took a newer hold
    /// after this one ended unreleased.
    Lost,
}

/// What a hold's watcher does next ([`Watch::next`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchStep {
    /// The hold is lost, or presumed lost: signal the task, and stop watching.
    Lost(LossReason),
    /// The holder released the hold itself: stop watching without signalling anything.
    Ended,
    /// Extend the hold (by the lock's TTL), then report with [`Watch::extended`].
    Extend,
    /// Look again after `ms` (at least 1).
    Sleep {
        /// The pause.
        ms: u64,
    },
}

/// A hold's watcher as a state machine that does no I/O: given the hold's local deadline and
/// the time, it says whether the hold is lost, when to extend it (with [`KeepAlive`]), and how
/// long to sleep. [`crate::Lock`] drives it with futures; the JS binding drives it from JS
/// timers. Times are on the monotonic clock.
#[derive(Debug, Clone)]
pub struct Watch {
    every: Option<u64>,
    cap_at: Option<u64>,
    next_extend: Option<u64>,
}

impl Watch {
    /// Starts watching at `now` a hold of a lock whose TTL is `ttl_ms`: with `keep_alive`,
    /// extending it every [`KeepAlive::every_ms`] (default a third of the TTL, within 1 ms and
    /// the TTL) up to the [`KeepAlive::max_hold_ms`] cap; without, only watching its deadline.
    pub fn new(ttl_ms: u64, keep_alive: Option<KeepAlive>, now: u64) -> Self {
        // `max(1)`: a TTL of 0 (never one from `Ttl`) must not make `clamp` panic.
        let every = keep_alive.map(|k| k.every_ms.unwrap_or(ttl_ms / 3).clamp(1, ttl_ms.max(1)));
        Watch {
            every,
            cap_at: keep_alive
                .and_then(|k| k.max_hold_ms)
                .map(|cap| now.saturating_add(cap)),
            next_extend: every.map(|e| now.saturating_add(e)),
        }
    }

    /// What to do at `now` about the hold, which stands as `hold` says: a hold its holder
    /// released ends the watch quietly; one known lost is [`LossReason::Refused`].
    pub fn next(&self, hold: HoldState, now: u64) -> WatchStep {
        let deadline = match hold {
            HoldState::Held { deadline } => deadline,
            HoldState::Released => return WatchStep::Ended,
            HoldState::Lost => return WatchStep::Lost(LossReason::Refused),
        };
        if self.cap_at.is_some_and(|cap| now >= cap) {
            return WatchStep::Lost(LossReason::HoldCapReached);
        }
        if now >= deadline {
            return WatchStep::Lost(LossReason::Expired);
        }
        match self.next_extend {
            Some(at) if now >= at => WatchStep::Extend,
            _ => {
                let wake_at = [Some(deadline), self.next_extend, self.cap_at]
                    .into_iter()
                    .flatten()
                    .min()
                    .unwrap_or(deadline);
                WatchStep::Sleep {
                    ms: wake_at.saturating_sub(now).max(1),
                }
            }
        }
    }

    /// The extend [`WatchStep::Extend`] asked for finished at `now`: `ok`, or it failed. A
    /// refusal needs no telling apart: it ended the hold, which [`Watch::next`] sees. A store
    /// error is retried soon (a quarter of the interval, at least 10 ms), while the hold may
    /// still be alive.
    pub fn extended(&mut self, ok: bool, now: u64) {
        self.next_extend = self.every.map(|e| match ok {
            true => now.saturating_add(e),
            false => now.saturating_add((e / 4).max(10)),
        });
    }
}

/// Called once with the reason a hold was lost.
type LossListener = Box<dyn FnOnce(LossReason)>;

/// Shared between a hold's watcher and the task: set once, when the hold is lost.
#[derive(Default)]
pub(crate) struct LossState {
    reason: Cell<Option<LossReason>>,
    wakers: RefCell<Vec<Waker>>,
    listeners: RefCell<Vec<LossListener>>,
    /// Someone asked about the loss; until then a watcher without keep-alive sets no timer.
    observed: Cell<bool>,
    watcher: RefCell<Option<Waker>>,
}

impl LossState {
    /// Marks the loss as asked about, starting a watcher that waits for that.
    pub(crate) fn observe(&self) {
        if !self.observed.replace(true) {
            let watcher = self.watcher.borrow_mut().take();
            if let Some(waker) = watcher {
                waker.wake();
            }
        }
    }

    /// Completes once the loss has been asked about.
    pub(crate) fn observed(&self) -> impl Future<Output = ()> + '_ {
        core::future::poll_fn(move |cx| {
            if self.observed.get() {
                return Poll::Ready(());
            }
            *self.watcher.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        })
    }

    /// Calls `listener` once when the loss is recorded, without asking about it (a watcher
    /// without keep-alive still waits to be asked before it sets a timer).
    #[cfg(feature = "std")]
    pub(crate) fn on_fire(&self, listener: LossListener) {
        match self.reason.get() {
            Some(reason) => listener(reason),
            None => self.listeners.borrow_mut().push(listener),
        }
    }

    /// Records the loss (the first reason wins), wakes whoever waits for it, and calls the
    /// listeners with no borrow held (a listener may call back into the lock).
    pub(crate) fn fire(&self, reason: LossReason) {
        if self.reason.get().is_some() {
            return;
        }
        self.reason.set(Some(reason));
        let wakers = core::mem::take(&mut *self.wakers.borrow_mut());
        wakers.into_iter().for_each(Waker::wake);
        let listeners = core::mem::take(&mut *self.listeners.borrow_mut());
        for listener in listeners {
            listener(reason);
        }
    }
}

/// What a task run under the lock is handed: facts about this hold, and a signal that fires
/// when the hold is known or presumed lost. The signal is advisory: the task decides what to do;
/// `run` still releases afterwards.
///
/// Without keep-alive, the local deadline is watched from the moment the loss is first asked
/// about ([`RunContext::lost`], [`RunContext::when_lost`], [`RunContext::on_lost`]): a task that
/// never asks costs no timer. With keep-alive it is always watched.
#[derive(Clone)]
#[non_exhaustive]
pub struct RunContext {
    /// The hold's fence, when the store keeps fences: pass it to the protected resource so it
    /// can refuse writes from a holder that paused past its TTL.
    pub fence: Option<Fence>,
    loss: Rc<LossState>,
}

impl fmt::Debug for RunContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunContext")
            .field("fence", &self.fence)
            .field("lost", &self.loss.reason.get())
            .finish()
    }
}

impl RunContext {
    pub(crate) fn new(fence: Option<Fence>, loss: Rc<LossState>) -> Self {
        RunContext { fence, loss }
    }

    pub(crate) fn loss_state(&self) -> &LossState {
        &self.loss
    }

    /// Why the hold was lost, once it is known or presumed lost (and from now on, watched).
    pub fn lost(&self) -> Option<LossReason> {
        self.loss.observe();
        self.loss.reason.get()
    }

    /// Completes with the reason when the hold is lost (never, if the task finishes first).
    pub fn when_lost(&self) -> impl Future<Output = LossReason> + '_ {
        self.loss.observe();
        core::future::poll_fn(move |cx| match self.loss.reason.get() {
            Some(reason) => Poll::Ready(reason),
            None => {
                self.loss.wakers.borrow_mut().push(cx.waker().clone());
                Poll::Pending
            }
        })
    }

    /// Calls `listener` once when the hold is lost (at once, if it already is).
    pub fn on_lost(&self, listener: impl FnOnce(LossReason) + 'static) {
        self.loss.observe();
        match self.loss.reason.get() {
            Some(reason) => listener(reason),
            None => self.loss.listeners.borrow_mut().push(Box::new(listener)),
        }
    }
}

#[cfg(test)]
mod watch_tests {
    use super::*;

    fn held(deadline: u64) -> HoldState {
        HoldState::Held { deadline }
    }

    #[test]
    fn a_hold_its_holder_released_ends_the_watch_quietly_whatever_the_time() {
        let watch = Watch::new(300, Some(KeepAlive::default()), 1_000);
        assert_eq!(watch.next(HoldState::Released, 1_001), WatchStep::Ended);
        assert_eq!(watch.next(HoldState::Released, 5_000), WatchStep::Ended);
        assert_eq!(
            watch.next(HoldState::Lost, 1_001),
            WatchStep::Lost(LossReason::Refused)
        );
    }

    #[test]
    fn without_keep_alive_it_sleeps_until_the_deadline_then_reports_expiry() {
        let watch = Watch::new(300, None, 1_000);
        assert_eq!(watch.next(held(1_300), 1_000), WatchStep::Sleep { ms: 300 });
        assert_eq!(watch.next(held(1_300), 1_299), WatchStep::Sleep { ms: 1 });
        assert_eq!(
            watch.next(held(1_300), 1_300),
            WatchStep::Lost(LossReason::Expired)
        );
        assert_eq!(
            watch.next(HoldState::Lost, 1_001),
            WatchStep::Lost(LossReason::Refused)
        );
    }

    #[test]
    fn keep_alive_extends_every_third_of_the_ttl_and_paces_from_the_answer() {
        let mut watch = Watch::new(300, Some(KeepAlive::default()), 0);
        assert_eq!(watch.next(held(300), 0), WatchStep::Sleep { ms: 100 });
        assert_eq!(watch.next(held(300), 100), WatchStep::Extend);
        watch.extended(true, 105);
        // The extend moved the deadline; the next one is an interval after the answer.
        assert_eq!(watch.next(held(400), 110), WatchStep::Sleep { ms: 95 });
        assert_eq!(watch.next(held(400), 205), WatchStep::Extend);
        // A store error: try again after a quarter of the interval, not a whole one.
        watch.extended(false, 206);
        assert_eq!(watch.next(held(400), 206), WatchStep::Sleep { ms: 25 });
        assert_eq!(watch.next(held(400), 231), WatchStep::Extend);
        // A refused extend ended the hold: the deadline is gone.
        watch.extended(false, 232);
        assert_eq!(
            watch.next(HoldState::Lost, 232),
            WatchStep::Lost(LossReason::Refused)
        );
    }

    #[test]
    fn the_cap_ends_the_hold_even_while_extends_succeed() {
        let keep = KeepAlive {
            every_ms: Some(50),
            max_hold_ms: Some(120),
        };
        let mut watch = Watch::new(1_000, Some(keep), 0);
        assert_eq!(watch.next(held(1_000), 0), WatchStep::Sleep { ms: 50 });
        watch.extended(true, 100);
        assert_eq!(watch.next(held(1_100), 101), WatchStep::Sleep { ms: 19 });
        assert_eq!(
            watch.next(held(1_100), 120),
            WatchStep::Lost(LossReason::HoldCapReached)
        );
    }

    #[test]
    fn a_zero_ttl_does_not_panic() {
        let watch = Watch::new(0, Some(KeepAlive::default()), 5);
        assert_eq!(watch.next(held(5), 5), WatchStep::Lost(LossReason::Expired));
    }

    #[test]
    fn every_is_kept_within_one_ms_and_the_ttl() {
        let fast = KeepAlive {
            every_ms: Some(0),
            max_hold_ms: None,
        };
        assert_eq!(
            Watch::new(10, Some(fast), 0).next(held(10), 0),
            WatchStep::Sleep { ms: 1 }
        );
        let slow = KeepAlive {
            every_ms: Some(99),
            max_hold_ms: None,
        };
        // Never later than the TTL: the deadline comes first.
        assert_eq!(
            Watch::new(10, Some(slow), 0).next(held(10), 0),
            WatchStep::Sleep { ms: 10 }
        );
    }
}
