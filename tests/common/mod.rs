//! Shared by the native core tests (included with `mod common;`; not every test uses all).
#![allow(dead_code)]

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;

use keel_lock::virtual_time::VirtualRuntime;
use keel_lock::{AcquireOptions, Key, Runtime, Ttl};

/// A key the test knows is valid.
pub fn key(k: &str) -> Key {
    Key::new(k).unwrap()
}

/// A TTL the test knows is valid.
pub fn ttl(ms: u64) -> Ttl {
    Ttl::from_ms(ms).unwrap()
}

/// Wait up to `timeout_ms`, retrying (or, on a store that hands over, looking) every
/// `retry_delay_ms`.
pub fn wait(timeout_ms: u64, retry_delay_ms: u64) -> AcquireOptions {
    AcquireOptions {
        timeout_ms,
        retry_delay_ms,
    }
}

/// A task for `VirtualRuntime::join_all`.
pub type Task<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

/// Calls at one virtual instant before a store call counts as a spinning retry loop.
const SPIN_LIMIT: u32 = 10_000;

/// Fails the test (instead of hanging it) when a store is called very many times without
/// virtual time moving: a retry loop that spins never lets the clock advance.
pub struct SpinGuard {
    rt: VirtualRuntime,
    same_instant: Cell<(u64, u32)>,
}

impl SpinGuard {
    pub fn new(rt: &VirtualRuntime) -> Self {
        SpinGuard {
            rt: rt.clone(),
            same_instant: Cell::new((0, 0)),
        }
    }

    /// Records one call at the current virtual instant.
    pub fn tick(&self) {
        let now = self.rt.now_ms();
        let (at, n) = self.same_instant.get();
        let n = if at == now { n + 1 } else { 1 };
        assert!(
            n <= SPIN_LIMIT,
            "{n} acquires at one instant: the retry loop spins"
        );
        self.same_instant.set((now, n));
    }
}
