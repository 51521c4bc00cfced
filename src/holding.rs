//! Holding a lock safely: the loss signal a running task is handed, and the keep-alive (auto-
//! extend) options that keep a long task's hold from expiring under it.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::future::Future;
use std::rc::Rc;
use std::task::{Poll, Waker};

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
        std::future::poll_fn(move |cx| {
            if self.observed.get() {
                return Poll::Ready(());
            }
            *self.watcher.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        })
    }

    /// Records the loss (the first reason wins), wakes whoever waits for it, and calls the
    /// listeners with no borrow held (a listener may call back into the lock).
    pub(crate) fn fire(&self, reason: LossReason) {
        if self.reason.get().is_some() {
            return;
        }
        self.reason.set(Some(reason));
        let wakers = std::mem::take(&mut *self.wakers.borrow_mut());
        wakers.into_iter().for_each(Waker::wake);
        let listeners = std::mem::take(&mut *self.listeners.borrow_mut());
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
        std::future::poll_fn(move |cx| match self.loss.reason.get() {
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
