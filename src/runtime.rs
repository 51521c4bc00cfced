//! The injected environment. The core never reads a clock or starts a timer on its own:
//! bindings supply a [`Runtime`] (JS: `Date.now()` and `setTimeout`), tests supply
//! `virtual_time::VirtualRuntime` (feature `testing`).

use alloc::rc::Rc;
use core::future::Future;

/// Clock and timer for the lock's own bookkeeping: retry pacing, the wait deadline, and the
/// conservative local deadline behind `isExpired()`. Stores that decide expiry (Redis, a
/// Durable Object, a database) use their own clock, never this one.
pub trait Runtime {
    /// Milliseconds since the Unix epoch. Wall-clock, so a serialized lock's deadline means the
    /// same in another process (up to clock skew).
    fn now_ms(&self) -> u64;

    /// Milliseconds on a clock that only moves forward, from any origin: what waits and
    /// in-process expiry are measured on, so that a wall clock set back or forward (NTP, an
    /// operator) neither stretches nor cuts them. Defaults to [`Runtime::now_ms`] for runtimes
    /// without one.
    fn monotonic_ms(&self) -> u64 {
        self.now_ms()
    }

    /// Completes after about `ms` milliseconds.
    fn sleep(&self, ms: u64) -> impl Future<Output = ()>;
}

impl<R: Runtime + ?Sized> Runtime for &R {
    fn now_ms(&self) -> u64 {
        (**self).now_ms()
    }
    fn monotonic_ms(&self) -> u64 {
        (**self).monotonic_ms()
    }
    fn sleep(&self, ms: u64) -> impl Future<Output = ()> {
        (**self).sleep(ms)
    }
}

impl<R: Runtime + ?Sized> Runtime for Rc<R> {
    fn now_ms(&self) -> u64 {
        (**self).now_ms()
    }
    fn monotonic_ms(&self) -> u64 {
        (**self).monotonic_ms()
    }
    fn sleep(&self, ms: u64) -> impl Future<Output = ()> {
        (**self).sleep(ms)
    }
}
