//! Virtual time: a [`Runtime`] whose clock moves only when every task is waiting on a timer,
//! plus a tiny single-threaded executor to drive it. Lets `cargo test` run TTL, retry and
//! contention scenarios that span minutes of lock time in microseconds, deterministically.
//!
//! This is a testing tool: its executor panics when the tasks it drives wait on something other
//! than virtual time (that would hang forever). The JS bindings never use it.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use crate::runtime::Runtime;

/// Where virtual clocks start: 2023-11-14T22:13:20Z, an arbitrary realistic epoch time.
pub const VIRTUAL_EPOCH_MS: u64 = 1_700_000_000_000;

#[derive(Default)]
struct Clock {
    now: Cell<u64>,
    /// How far the wall clock (`now_ms`) has been set away from the monotonic one.
    wall_offset: Cell<i64>,
    timers: RefCell<Vec<(u64, Waker)>>,
    /// Every timer ever started (a sleep that was polled), for tests that none was.
    started: Cell<u64>,
}

/// A cloneable handle on one virtual clock. Clones share the clock.
#[derive(Clone)]
pub struct VirtualRuntime {
    clock: Rc<Clock>,
}

impl Default for VirtualRuntime {
    fn default() -> Self {
        Self::new()
    }
}

impl VirtualRuntime {
    /// A clock at [`VIRTUAL_EPOCH_MS`] with no timers.
    pub fn new() -> Self {
        let clock = Clock::default();
        clock.now.set(VIRTUAL_EPOCH_MS);
        VirtualRuntime {
            clock: Rc::new(clock),
        }
    }

    /// How many times a sleep has waited on this clock (a sleep that completed at once, or was
    /// never polled, started no timer).
    pub fn timers_started(&self) -> u64 {
        self.clock.started.get()
    }

    /// Sets the wall clock (`now_ms`) `delta_ms` forward (or, negative, back), as NTP or an
    /// operator might; the monotonic clock, timers and sleeps are not affected.
    pub fn step_wall_clock(&self, delta_ms: i64) {
        self.clock
            .wall_offset
            .set(self.clock.wall_offset.get().saturating_add(delta_ms));
    }

    /// Moves the clock forward by `ms` and wakes the timers that are now due.
    pub fn advance(&self, ms: u64) {
        self.clock.now.set(self.clock.now.get() + ms);
        self.fire_due();
    }

    fn fire_due(&self) {
        let now = self.clock.now.get();
        let due: Vec<Waker> = {
            let mut timers = self.clock.timers.borrow_mut();
            let (due, pending) = timers.drain(..).partition(|(at, _)| *at <= now);
            *timers = pending;
            due.into_iter().map(|(_, w): (u64, Waker)| w).collect()
        };
        due.into_iter().for_each(Waker::wake);
    }

    /// Runs one future to completion on virtual time.
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.join_all(vec![future])
            .pop()
            .expect("one output per future")
    }

    /// Runs futures concurrently, interleaved at their await points, and returns their outputs
    /// in order. When every unfinished future waits on a timer, the clock jumps to the earliest.
    ///
    /// # Panics
    /// If unfinished futures wait on something other than this clock's timers.
    pub fn join_all<'a, F: Future + 'a>(&self, futures: Vec<F>) -> Vec<F::Output> {
        struct Flag(AtomicBool);
        impl Wake for Flag {
            fn wake(self: Arc<Self>) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let mut tasks: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
        let flags: Vec<Arc<Flag>> = tasks
            .iter()
            .map(|_| Arc::new(Flag(AtomicBool::new(true))))
            .collect();
        let mut outputs: Vec<Option<F::Output>> = tasks.iter().map(|_| None).collect();
        loop {
            for (i, task) in tasks.iter_mut().enumerate() {
                // Cleared even for a finished task, which a stale timer may still wake.
                let woken = flags[i].0.swap(false, Ordering::SeqCst);
                if outputs[i].is_some() || !woken {
                    continue;
                }
                let waker = Waker::from(flags[i].clone());
                if let Poll::Ready(out) = task.as_mut().poll(&mut Context::from_waker(&waker)) {
                    outputs[i] = Some(out);
                }
            }
            if outputs.iter().all(Option::is_some) {
                return outputs.into_iter().flatten().collect();
            }
            if flags.iter().any(|f| f.0.load(Ordering::SeqCst)) {
                continue;
            }
            let next = self.clock.timers.borrow().iter().map(|(at, _)| *at).min();
            match next {
                Some(at) => {
                    if at > self.clock.now.get() {
                        self.clock.now.set(at);
                    }
                    self.fire_due();
                }
                None => panic!(
                    "virtual runtime stalled: tasks wait on something other than virtual time"
                ),
            }
        }
    }
}

/// The future behind [`VirtualRuntime::sleep`].
struct Sleep {
    clock: Rc<Clock>,
    until: u64,
}

impl Future for Sleep {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.clock.now.get() >= self.until {
            return Poll::Ready(());
        }
        self.clock
            .timers
            .borrow_mut()
            .push((self.until, cx.waker().clone()));
        self.clock.started.set(self.clock.started.get() + 1);
        Poll::Pending
    }
}

impl Runtime for VirtualRuntime {
    fn now_ms(&self) -> u64 {
        self.clock
            .now
            .get()
            .saturating_add_signed(self.clock.wall_offset.get())
    }

    fn monotonic_ms(&self) -> u64 {
        self.clock.now.get()
    }

    fn sleep(&self, ms: u64) -> impl Future<Output = ()> {
        Sleep {
            clock: self.clock.clone(),
            until: self.clock.now.get() + ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleeps_jump_the_clock_in_order() {
        let rt = VirtualRuntime::new();
        let order = RefCell::new(Vec::new());
        let task = |ms: u64| {
            let (rt, order) = (rt.clone(), &order);
            async move {
                rt.sleep(ms).await;
                order
                    .borrow_mut()
                    .push((ms, rt.now_ms() - VIRTUAL_EPOCH_MS));
            }
        };
        rt.join_all(vec![task(300), task(100), task(200)]);
        assert_eq!(*order.borrow(), vec![(100, 100), (200, 200), (300, 300)]);
    }
}
