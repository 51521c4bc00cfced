//! Stores that never answer (or answer too late) cannot hang a lock: every wait ends by the
//! caller's timeout, every other call by the lock's TTL, and a grant answered after the caller
//! gave up does not leave the key held.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use common::{key, ttl, wait};

use std::cell::Cell;
use std::future::Future;
use std::rc::Rc;

use keel_lock::virtual_time::VirtualRuntime;
use keel_lock::{
    AcquireOptions, Error, Grant, Key, Lock, LockStore, MemoryLockStore, Operation, OwnerToken,
    Runtime, Ttl, Wait,
};

/// A memory store behind a "network": calls to the operations in `hung` take effect (or not)
/// but never answer; with `late_ms`, `acquire` takes effect at once and answers that much later.
/// Like every store whose requests may land after the caller stops listening, it releases a
/// grant whose future was dropped unanswered.
struct UnansweringStore {
    inner: Rc<MemoryLockStore<VirtualRuntime>>,
    rt: VirtualRuntime,
    hung: Vec<Operation>,
    hands_over: bool,
    late_ms: Option<u64>,
    calls: Cell<u32>,
}

impl UnansweringStore {
    fn new(rt: &VirtualRuntime, hung: &[Operation]) -> Self {
        UnansweringStore {
            inner: Rc::new(MemoryLockStore::new(rt.clone())),
            rt: rt.clone(),
            hung: hung.to_vec(),
            hands_over: false,
            late_ms: None,
            calls: Cell::new(0),
        }
    }

    async fn answer<T>(&self, op: Operation, value: T) -> Result<T, String> {
        self.calls.set(self.calls.get() + 1);
        if self.hung.contains(&op) {
            std::future::pending::<()>().await;
        }
        Ok(value)
    }
}

/// Releases `owner`'s grant on `key` unless disarmed: what an abandoned acquire leaves behind.
struct ReleaseUnlessAnswered {
    store: Rc<MemoryLockStore<VirtualRuntime>>,
    key: Key,
    owner: OwnerToken,
    armed: bool,
}

impl Drop for ReleaseUnlessAnswered {
    fn drop(&mut self) {
        if self.armed {
            self.store.release_sync(&self.key, &self.owner);
        }
    }
}

impl LockStore for UnansweringStore {
    type Error = String;

    fn name(&self) -> &'static str {
        "unanswering"
    }

    async fn acquire(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
    ) -> Result<Option<Grant>, String> {
        let grant = self.inner.acquire_sync(key, owner, ttl);
        let mut guard = ReleaseUnlessAnswered {
            store: self.inner.clone(),
            key: key.clone(),
            owner: owner.clone(),
            armed: grant.is_some(),
        };
        if let Some(late) = self.late_ms {
            self.rt.sleep(late).await;
        }
        let answer = self.answer(Operation::Acquire, grant).await;
        guard.armed = false;
        answer
    }
    async fn release(&self, key: &Key, owner: &OwnerToken) -> Result<bool, String> {
        let released = self.inner.release_sync(key, owner);
        self.answer(Operation::Release, released).await
    }
    async fn extend(&self, key: &Key, owner: &OwnerToken, ttl: Ttl) -> Result<bool, String> {
        let extended = self.inner.extend_sync(key, owner, ttl);
        self.answer(Operation::Extend, extended).await
    }
    async fn is_locked(&self, key: &Key) -> Result<bool, String> {
        let locked = self.inner.remaining_time_sync(key).is_some();
        self.answer(Operation::IsLocked, locked).await
    }
    async fn remaining_time(&self, key: &Key) -> Result<Option<u64>, String> {
        let remaining = self.inner.remaining_time_sync(key);
        self.answer(Operation::RemainingTime, remaining).await
    }
    fn hands_over(&self) -> bool {
        self.hands_over
    }
    async fn acquire_or_wait(
        &self,
        _key: &Key,
        _owner: &OwnerToken,
        _ttl: Ttl,
        _wait: Wait,
    ) -> Result<Option<Grant>, String> {
        self.answer(Operation::Acquire, None).await
    }
}

/// Runs `f` and answers how long it took on the virtual clock, with its output.
fn timed<T>(rt: &VirtualRuntime, f: impl Future<Output = T>) -> (u64, T) {
    let start = rt.now_ms();
    let out = rt.block_on(f);
    (rt.now_ms() - start, out)
}

#[test]
fn a_wait_on_a_store_that_never_answers_ends_at_the_timeout() {
    let rt = VirtualRuntime::new();
    let store = UnansweringStore::new(&rt, &[Operation::Acquire]);
    let lock = Lock::new(key("k"), ttl(30_000), &store, rt.clone());
    let (took, answer) = timed(&rt, lock.acquire(wait(1_000, 50)));
    assert!(matches!(answer, Ok(false)), "{answer:?}");
    assert_eq!(took, 1_000);
    assert!(lock.owner().is_none());
}

#[test]
fn run_with_a_timeout_on_a_store_that_never_answers_never_runs_the_task() {
    let rt = VirtualRuntime::new();
    let store = UnansweringStore::new(&rt, &[Operation::Acquire]);
    let lock = Lock::new(key("k"), ttl(30_000), &store, rt.clone());
    let ran = Cell::new(false);
    let (took, answer) = timed(&rt, lock.run(wait(200, 20), |_| async { ran.set(true) }));
    assert!(matches!(answer, Ok(None)), "{answer:?}");
    assert!(!ran.get());
    assert_eq!(took, 200);
}

#[test]
fn a_waiting_store_that_never_answers_cannot_stretch_the_wait_either() {
    let rt = VirtualRuntime::new();
    let mut store = UnansweringStore::new(&rt, &[Operation::Acquire]);
    store.hands_over = true;
    let lock = Lock::new(key("k"), ttl(30_000), &store, rt.clone());
    let (took, answer) = timed(&rt, lock.acquire(wait(500, 50)));
    assert!(matches!(answer, Ok(false)), "{answer:?}");
    // The store was asked to wait 500 ms; it gets one retry delay more to say so.
    assert_eq!(took, 550);
}

#[test]
fn an_attempt_without_a_timeout_is_bounded_by_the_ttl_and_fails_as_a_store_timeout() {
    let rt = VirtualRuntime::new();
    let store = UnansweringStore::new(&rt, &[Operation::Acquire]);
    let lock = Lock::new(key("k"), ttl(2_000), &store, rt.clone());
    let (took, answer) = timed(&rt, lock.acquire(AcquireOptions::immediately()));
    match answer {
        Err(Error::StoreTimeout {
            key,
            store: "unanswering",
            operation: Operation::Acquire,
            after_ms: 2_000,
        }) if key == "k" => {}
        other => panic!("expected a store timeout, got {other:?}"),
    }
    assert_eq!(took, 2_000);
    // The abandoned attempt had taken the key; it was released, not leaked until the TTL.
    assert_eq!(store.inner.remaining_time_sync(&key("k")), None);
}

#[test]
fn an_unanswered_attempt_is_retried_while_the_timeout_lasts() {
    let rt = VirtualRuntime::new();
    let mut store = UnansweringStore::new(&rt, &[]);
    // Every acquire takes effect at once but answers 300 ms later: past the 100 ms TTL.
    store.late_ms = Some(300);
    let lock = Lock::new(key("k"), ttl(100), &store, rt.clone());
    let (took, answer) = timed(&rt, lock.acquire(wait(1_000, 10)));
    assert!(matches!(answer, Ok(false)), "{answer:?}");
    // Attempts at 0, 110, 220, …, 990: each abandoned at its TTL (the last at the deadline),
    // the next one a retry delay later; none ever answered.
    assert_eq!(took, 1_000);
    assert_eq!(store.calls.get(), 0);
    assert_eq!(store.inner.remaining_time_sync(&key("k")), None);
}

#[test]
fn a_grant_answered_after_the_caller_gave_up_does_not_keep_the_key() {
    let rt = VirtualRuntime::new();
    let mut store = UnansweringStore::new(&rt, &[]);
    store.late_ms = Some(5_000);
    let lock = Lock::new(key("k"), ttl(30_000), &store, rt.clone());
    let (took, answer) = timed(&rt, lock.acquire(wait(1_000, 100)));
    assert!(matches!(answer, Ok(false)), "{answer:?}");
    assert_eq!(took, 1_000);
    // Someone else gets the key at once, not after the abandoned grant's 30 s TTL.
    let other = Lock::new(key("k"), ttl(30_000), &store.inner, rt.clone());
    assert!(rt
        .block_on(other.acquire(AcquireOptions::immediately()))
        .unwrap());
}

#[test]
fn release_extend_and_queries_on_a_store_that_never_answers_fail_after_the_ttl() {
    for hung in [
        Operation::Release,
        Operation::Extend,
        Operation::IsLocked,
        Operation::RemainingTime,
    ] {
        let rt = VirtualRuntime::new();
        let store = UnansweringStore::new(&rt, &[hung]);
        let lock = Lock::new(key("k"), ttl(700), &store, rt.clone());
        assert!(rt
            .block_on(lock.acquire(AcquireOptions::immediately()))
            .unwrap());
        let (took, failure) = match hung {
            Operation::Release => timed(&rt, async { lock.release().await.map(drop) }),
            Operation::Extend => timed(&rt, lock.extend(None)),
            Operation::IsLocked => timed(&rt, async { lock.is_locked().await.map(drop) }),
            _ => timed(&rt, async { lock.remaining_time().await.map(drop) }),
        };
        assert!(
            matches!(failure, Err(Error::StoreTimeout { operation, after_ms: 700, .. }) if operation == hung),
            "{hung}: {failure:?}"
        );
        assert_eq!(took, 700, "{hung}");
    }
}

#[test]
fn run_whose_release_never_answers_fails_after_the_task_ran_once() {
    let rt = VirtualRuntime::new();
    let store = UnansweringStore::new(&rt, &[Operation::Release]);
    let lock = Lock::new(key("k"), ttl(400), &store, rt.clone());
    let runs = Cell::new(0);
    let answer = rt.block_on(lock.run(AcquireOptions::immediately(), |_| async {
        runs.set(runs.get() + 1)
    }));
    assert!(matches!(
        answer,
        Err(Error::StoreTimeout {
            operation: Operation::Release,
            ..
        })
    ));
    assert_eq!(runs.get(), 1);
}

#[test]
fn a_store_that_answers_at_once_never_starts_a_timer() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let lock = Lock::new(key("k"), ttl(1_000), &store, rt.clone());
    for _ in 0..10 {
        let ran = rt.block_on(lock.run(wait(1_000, 10), |_| async {}));
        assert!(matches!(ran, Ok(Some(()))));
        assert!(rt.block_on(lock.is_locked()).is_ok());
    }
    assert_eq!(rt.timers_started(), 0);
}

/// The memory store, except that the first acquire takes effect and then never answers; the
/// test plays that call's late answer (and the release it brings) itself.
struct FirstAcquireHangs {
    inner: MemoryLockStore<VirtualRuntime>,
    first_owner: std::cell::RefCell<Option<OwnerToken>>,
}

impl LockStore for FirstAcquireHangs {
    type Error = String;
    fn name(&self) -> &'static str {
        "first-acquire-hangs"
    }
    async fn acquire(&self, k: &Key, o: &OwnerToken, t: Ttl) -> Result<Option<Grant>, String> {
        let grant = self.inner.acquire_sync(k, o, t);
        if self.first_owner.borrow().is_none() {
            *self.first_owner.borrow_mut() = Some(o.clone());
            std::future::pending::<()>().await;
        }
        Ok(grant)
    }
    async fn release(&self, k: &Key, o: &OwnerToken) -> Result<bool, String> {
        Ok(self.inner.release_sync(k, o))
    }
    async fn extend(&self, k: &Key, o: &OwnerToken, t: Ttl) -> Result<bool, String> {
        Ok(self.inner.extend_sync(k, o, t))
    }
    async fn is_locked(&self, k: &Key) -> Result<bool, String> {
        Ok(self.inner.remaining_time_sync(k).is_some())
    }
    async fn remaining_time(&self, k: &Key) -> Result<Option<u64>, String> {
        Ok(self.inner.remaining_time_sync(k))
    }
}

#[test]
fn the_late_release_of_an_abandoned_attempt_never_frees_a_later_attempts_hold() {
    let rt = VirtualRuntime::new();
    let store = FirstAcquireHangs {
        inner: MemoryLockStore::new(rt.clone()),
        first_owner: Default::default(),
    };
    let lock = Lock::new(key("k"), ttl(100), &store, rt.clone());
    let refused = Cell::new(0);
    // The first attempt takes the key and hangs: abandoned at its TTL (100 ms); a retry takes
    // the key once that grant has expired, and the holder keeps extending it.
    let holder: common::Task = Box::pin(async {
        let held = lock
            .run(wait(2_000, 10), |_| async {
                for _ in 0..30 {
                    rt.sleep(50).await;
                    if lock.extend(None).await.is_err() {
                        refused.set(refused.get() + 1);
                    }
                }
            })
            .await;
        assert!(matches!(held, Ok(Some(()))), "{held:?}");
    });
    // At 1 s the first attempt's answer arrives after all, a grant, so its caller releases it.
    let late_answer: common::Task = Box::pin(async {
        rt.sleep(1_000).await;
        let first = store
            .first_owner
            .borrow()
            .clone()
            .expect("the first attempt was made");
        store.inner.release_sync(&key("k"), &first);
    });
    rt.join_all(vec![holder, late_answer]);
    assert_eq!(refused.get(), 0, "the late release freed the retry's hold");
}
