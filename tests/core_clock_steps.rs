//! A wall clock that is set back or forward (NTP, an operator) neither stretches nor cuts a
//! wait, nor ends a memory-store hold early, nor moves a handle's own view of its hold
//! (`is_expired`, the loss signal): all are measured on the monotonic clock. The wall clock only
//! dates a hold's local deadline in `serialize()`, for another process to read by its own.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use common::{key, ttl, wait, PollingStore, Task};

use keel_lock::virtual_time::VirtualRuntime;
use keel_lock::{AcquireOptions, Lock, LockStore, MemoryLockStore, Runtime};

const HOUR: i64 = 3_600_000;

/// A waiter with a 1 s timeout on a key held for a minute, while the wall clock is stepped by
/// `step` 100 ms in: answers when (virtual, monotonic ms after the start) the waiter gave up.
fn gave_up_after<S: LockStore<Error: std::fmt::Debug>>(
    rt: &VirtualRuntime,
    store: &S,
    step: i64,
) -> u64 {
    let holder = Lock::new(key("k"), ttl(60_000), store, rt.clone());
    assert!(rt
        .block_on(holder.acquire(AcquireOptions::immediately()))
        .unwrap());
    let start = rt.monotonic_ms();
    let gave_up = std::cell::Cell::new(0);
    let waiter: Task = Box::pin(async {
        let l = Lock::new(key("k"), ttl(60_000), store, rt.clone());
        assert!(!l.acquire(wait(1_000, 50)).await.unwrap());
        gave_up.set(rt.monotonic_ms() - start);
    });
    let stepper: Task = Box::pin(async {
        rt.sleep(100).await;
        rt.step_wall_clock(step);
    });
    rt.join_all(vec![waiter, stepper]);
    gave_up.get()
}

/// Asserts that `outcome(step)` is `expected` with the wall clock set back an hour, and forward.
fn same_either_way<T: PartialEq + std::fmt::Debug>(expected: T, outcome: impl Fn(i64) -> T) {
    for step in [-HOUR, HOUR] {
        assert_eq!(outcome(step), expected, "wall clock stepped {step} ms");
    }
}

#[test]
fn a_polling_wait_ends_at_its_timeout_when_the_wall_clock_is_set_back_or_forward() {
    same_either_way(1_000, |step| {
        let rt = VirtualRuntime::new();
        let memory = MemoryLockStore::new(rt.clone());
        let store = PollingStore::new(&rt, &memory);
        gave_up_after(&rt, &store, step)
    });
}

#[test]
fn a_queued_wait_ends_at_its_timeout_when_the_wall_clock_is_set_back_or_forward() {
    same_either_way(1_000, |step| {
        let rt = VirtualRuntime::new();
        let store = MemoryLockStore::new(rt.clone());
        gave_up_after(&rt, &store, step)
    });
}

#[test]
fn a_memory_store_hold_survives_the_wall_clock_jumping_past_its_ttl() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let holder = Lock::new(key("k"), ttl(500), &store, rt.clone());
    let other = Lock::new(key("k"), ttl(500), &store, rt.clone());
    assert!(rt
        .block_on(holder.acquire(AcquireOptions::immediately()))
        .unwrap());
    rt.advance(100);
    rt.step_wall_clock(HOUR);
    // Still held: two holders at once would be the failure.
    assert!(!rt
        .block_on(other.acquire(AcquireOptions::immediately()))
        .unwrap());
    assert_eq!(rt.block_on(holder.remaining_time()).unwrap(), Some(400));
    rt.advance(400);
    assert!(rt
        .block_on(other.acquire(AcquireOptions::immediately()))
        .unwrap());
}

#[test]
fn a_wall_clock_set_back_does_not_keep_a_memory_store_hold_past_its_ttl() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let holder = Lock::new(key("k"), ttl(500), &store, rt.clone());
    let other = Lock::new(key("k"), ttl(500), &store, rt.clone());
    assert!(rt
        .block_on(holder.acquire(AcquireOptions::immediately()))
        .unwrap());
    rt.step_wall_clock(-HOUR);
    rt.advance(500);
    assert!(rt
        .block_on(other.acquire(AcquireOptions::immediately()))
        .unwrap());
}

/// The handle's own view of its hold, with the wall clock stepped by `step` mid-hold: whether it
/// thinks the hold expired just before the TTL, and just after.
fn expired_around_the_ttl(step: i64) -> (bool, bool) {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let holder = Lock::new(key("k"), ttl(500), &store, rt.clone());
    assert!(rt
        .block_on(holder.acquire(AcquireOptions::immediately()))
        .unwrap());
    rt.advance(100);
    rt.step_wall_clock(step);
    rt.advance(399);
    let before = holder.is_expired();
    rt.advance(1);
    (before, holder.is_expired())
}

#[test]
fn a_handle_knows_its_hold_expired_at_the_ttl_whatever_the_wall_clock_does() {
    // Set back, a wall-clock deadline would have kept the hold "alive" for another hour after
    // the store freed it; set forward, it would have called a live hold expired.
    same_either_way((false, true), expired_around_the_ttl);
}

#[test]
fn a_loss_signal_fires_at_the_ttl_whatever_the_wall_clock_does() {
    same_either_way(Some(500), |step| {
        let rt = VirtualRuntime::new();
        let store = MemoryLockStore::new(rt.clone());
        let holder = Lock::new(key("k"), ttl(500), &store, rt.clone());
        let start = rt.monotonic_ms();
        let lost_after = std::cell::Cell::new(None);
        let (lost_at, clock) = (&lost_after, &rt);
        let run: Task = Box::pin(async move {
            holder
                .try_run(AcquireOptions::immediately(), |context| async move {
                    context.when_lost().await;
                    lost_at.set(Some(clock.monotonic_ms() - start));
                    Ok::<_, ()>(())
                })
                .await
                .unwrap();
        });
        let stepper: Task = Box::pin(async {
            rt.sleep(100).await;
            rt.step_wall_clock(step);
        });
        rt.join_all(vec![run, stepper]);
        lost_after.get()
    });
}

#[test]
fn a_serialized_deadline_is_the_hold_left_dated_by_the_wall_clock_of_the_moment() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let holder = Lock::new(key("k"), ttl(500), &store, rt.clone());
    assert!(rt
        .block_on(holder.acquire(AcquireOptions::immediately()))
        .unwrap());
    rt.advance(100);
    rt.step_wall_clock(-HOUR);
    let serialized = holder.serialize().unwrap();
    let parsed = keel_lock::SerializedLock::parse(&serialized).unwrap();
    // 400 ms of the hold left, from the (stepped) wall clock's now.
    assert_eq!(parsed.deadline_ms, rt.now_ms() + 400);
    // Restored in a process whose clocks read otherwise, the hold has those 400 ms left.
    let other_rt = VirtualRuntime::new();
    other_rt.step_wall_clock((rt.now_ms() as i64) - (other_rt.now_ms() as i64));
    let restored = Lock::restore(parsed, &store, other_rt.clone());
    other_rt.advance(399);
    assert!(!restored.is_expired());
    other_rt.advance(1);
    assert!(restored.is_expired());
}
