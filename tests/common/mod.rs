//! Shared by the native core tests (included with `mod common;`; not every test uses all).
#![allow(dead_code)]

use std::cell::Cell;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;

use keel_lock::virtual_time::VirtualRuntime;
use keel_lock::{
    AcquireOptions, Grant, Key, LockStore, MemoryLockStore, Operation, OwnerToken, Runtime, Ttl,
};

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

/// The error a [`ScriptedStore`] fails with: which operation, and the store's call number, so a
/// test can tell that the error reaching it is the very value the store produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Outage {
    pub op: Operation,
    pub call: u32,
}

/// A store whose calls a test can count and fail, for the lock tests and the events tests.
///
/// A [`MemoryLockStore`] wrapper that counts calls, can be told to fail one operation, and
/// panics if `acquire` is called very many times without virtual time moving (so a spinning
/// retry loop fails the test instead of hanging it). It does not hand keys over: waiters poll it.
pub struct ScriptedStore {
    pub inner: MemoryLockStore<VirtualRuntime>,
    /// Every call so far.
    pub calls: Cell<u32>,
    /// The `acquire` calls so far.
    pub acquires: Cell<u32>,
    spin: SpinGuard,
    /// The operation that fails with an [`Outage`], if any.
    pub fail_on: Cell<Option<Operation>>,
}

impl ScriptedStore {
    pub fn new(rt: &VirtualRuntime) -> Self {
        ScriptedStore {
            inner: MemoryLockStore::new(rt.clone()),
            calls: Cell::new(0),
            acquires: Cell::new(0),
            spin: SpinGuard::new(rt),
            fail_on: Cell::new(None),
        }
    }

    pub fn failing(rt: &VirtualRuntime, op: Operation) -> Self {
        let store = Self::new(rt);
        store.fail_on.set(Some(op));
        store
    }

    fn enter(&self, op: Operation) -> Result<(), Outage> {
        let call = self.calls.get() + 1;
        self.calls.set(call);
        if op == Operation::Acquire {
            self.acquires.set(self.acquires.get() + 1);
            self.spin.tick();
        }
        match self.fail_on.get() {
            Some(failing) if failing == op => Err(Outage { op, call }),
            _ => Ok(()),
        }
    }
}

impl LockStore for ScriptedStore {
    type Error = Outage;

    fn name(&self) -> &'static str {
        "scripted"
    }
    async fn acquire(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
    ) -> Result<Option<Grant>, Outage> {
        self.enter(Operation::Acquire)?;
        Ok(self.inner.acquire_sync(key, owner, ttl))
    }
    async fn release(&self, key: &Key, owner: &OwnerToken) -> Result<bool, Outage> {
        self.enter(Operation::Release)?;
        Ok(self.inner.release_sync(key, owner))
    }
    async fn extend(&self, key: &Key, owner: &OwnerToken, ttl: Ttl) -> Result<bool, Outage> {
        self.enter(Operation::Extend)?;
        Ok(self.inner.extend_sync(key, owner, ttl))
    }
    async fn is_locked(&self, key: &Key) -> Result<bool, Outage> {
        self.enter(Operation::IsLocked)?;
        Ok(self.inner.remaining_time_sync(key).is_some())
    }
    async fn remaining_time(&self, key: &Key) -> Result<Option<u64>, Outage> {
        self.enter(Operation::RemainingTime)?;
        Ok(self.inner.remaining_time_sync(key))
    }
}

/// A store with only the five required operations, over a [`MemoryLockStore`] the test keeps:
/// every other method is the trait's default, so the core polls it (no hand-over) and it has no
/// shared holds. For the paths the memory store's own queue and shared holds would skip. Like
/// [`ScriptedStore`], it panics on a spinning retry loop.
pub struct PollingStore<'a> {
    inner: &'a MemoryLockStore<VirtualRuntime>,
    spin: SpinGuard,
}

impl<'a> PollingStore<'a> {
    pub fn new(rt: &VirtualRuntime, inner: &'a MemoryLockStore<VirtualRuntime>) -> Self {
        PollingStore {
            inner,
            spin: SpinGuard::new(rt),
        }
    }
}

impl LockStore for PollingStore<'_> {
    type Error = Infallible;

    fn name(&self) -> &'static str {
        "polling"
    }
    async fn acquire(&self, k: &Key, o: &OwnerToken, t: Ttl) -> Result<Option<Grant>, Infallible> {
        self.spin.tick();
        Ok(self.inner.acquire_sync(k, o, t))
    }
    async fn release(&self, k: &Key, o: &OwnerToken) -> Result<bool, Infallible> {
        Ok(self.inner.release_sync(k, o))
    }
    async fn extend(&self, k: &Key, o: &OwnerToken, t: Ttl) -> Result<bool, Infallible> {
        Ok(self.inner.extend_sync(k, o, t))
    }
    async fn is_locked(&self, k: &Key) -> Result<bool, Infallible> {
        Ok(self.inner.remaining_time_sync(k).is_some())
    }
    async fn remaining_time(&self, k: &Key) -> Result<Option<u64>, Infallible> {
        Ok(self.inner.remaining_time_sync(k))
    }
}
