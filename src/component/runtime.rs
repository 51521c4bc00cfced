//! The [`Runtime`] of a component: `wasi:clocks`. Wall clock for `now_ms` (epoch ms, so a
//! stored expiry means the same to every instance), monotonic clock to measure waits and to sleep
//! between retries.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use super::bindings::wasi::clocks::{monotonic_clock, wall_clock};
use crate::runtime::Runtime;

/// Clock and timer from the host's `wasi:clocks`.
///
/// `sleep` blocks the calling instance on a `monotonic-clock` pollable: a component export is
/// one synchronous call, so there is no event loop to yield to. Other instances (other
/// `wasmtime::Store`s, other host threads) keep running meanwhile.
#[derive(Debug, Clone, Copy, Default)]
pub struct WasiRuntime;

/// Reads `wasi:clocks/wall-clock` as milliseconds since the Unix epoch.
pub fn wall_clock_ms() -> u64 {
    let now = wall_clock::now();
    now.seconds
        .saturating_mul(1000)
        .saturating_add(u64::from(now.nanoseconds / 1_000_000))
}

impl Runtime for WasiRuntime {
    fn now_ms(&self) -> u64 {
        wall_clock_ms()
    }

    fn monotonic_ms(&self) -> u64 {
        monotonic_clock::now() / 1_000_000
    }

    async fn sleep(&self, ms: u64) {
        if ms > 0 {
            monotonic_clock::subscribe_duration(ms.saturating_mul(1_000_000)).block();
        }
    }
}

/// Drives a core future to completion inside one synchronous export call. Every future the core
/// awaits here completes when first polled (the key-value imports are synchronous and
/// [`WasiRuntime::sleep`] blocks), so this loop polls once per future in practice; it never
/// needs a real waker.
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
    }
}
