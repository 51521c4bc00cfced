//! The JS host's clock and timer, injected into the core.

use core::future::Future;

use crate::runtime::Runtime;

/// `Date.now()`, `performance.now()` and `setTimeout`, as the core's [`Runtime`]. Both exist in Node, browsers,
/// Deno, Bun and workerd (where the clock advances on I/O, which is all a lock needs).
#[derive(Clone, Copy, Debug, Default)]
pub struct JsRuntime;

impl Runtime for JsRuntime {
    fn now_ms(&self) -> u64 {
        js_sys::Date::now() as u64
    }

    fn monotonic_ms(&self) -> u64 {
        super::promises::monotonic_now() as u64
    }

    fn sleep(&self, ms: u64) -> impl Future<Output = ()> {
        super::promises::sleep(ms)
    }
}
