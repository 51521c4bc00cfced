//! Lock semantics over the in-memory store on virtual time: what `run`, `try_run`, `acquire`,
//! `release`, `extend`, `is_expired`, `serialize` and `restore` promise their callers.
// Native only: virtual time and proptest are native dev-dependencies; the wasm suites live in
// tests/wasm_*.rs.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::cell::Cell;
use std::rc::Rc;

use common::{key, ttl, wait, Outage, ScriptedStore, Task};

use keel_lock::lock::RunError;
use keel_lock::virtual_time::{VirtualRuntime, VIRTUAL_EPOCH_MS};
use keel_lock::{
    AcquireOptions, Error, Key, Lock, LockStore, MemoryLockStore, Operation, OwnerToken, Runtime,
    SerializedLock, Ttl,
};

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn now() -> AcquireOptions {
    AcquireOptions::immediately()
}

// Every test below runs on `ScriptedStore` unless it needs the bare memory store.

fn is_not_held<E>(result: &Result<impl Sized, Error<E>>, k: &str, op: &str) -> bool {
    matches!(result, Err(Error::NotHeld { key, attempted }) if key == k && attempted.to_string() == op)
}

// ---------------------------------------------------------------------------------------------
// Defaults
// ---------------------------------------------------------------------------------------------

#[test]
fn default_ttl_is_30_seconds_and_is_what_the_store_enforces() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let lock = Lock::new(key("default"), Ttl::default(), &store, rt.clone());
    assert_eq!(lock.ttl().as_ms(), 30_000);
    assert_eq!(AcquireOptions::default(), wait(0, 50));

    assert!(rt
        .block_on(lock.acquire(AcquireOptions::default()))
        .unwrap());
    assert_eq!(rt.block_on(lock.remaining_time()).unwrap(), Some(30_000));
    rt.advance(29_999);
    assert!(rt.block_on(lock.is_locked()).unwrap());
    assert!(!lock.is_expired());
    rt.advance(1);
    assert!(!rt.block_on(lock.is_locked()).unwrap());
    assert!(lock.is_expired());
}

#[test]
fn accessors_report_what_the_lock_was_built_with() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let lock = Lock::new(key("acc"), ttl(1234), &store, rt.clone());
    assert_eq!(lock.key().as_str(), "acc");
    assert_eq!(lock.ttl(), ttl(1234));
    assert!(lock.owner().is_none());
    assert_eq!(lock.store().name(), "memory");
    assert!(rt.block_on(lock.acquire(now())).unwrap());
    assert!(lock.owner().is_some());
}

// ---------------------------------------------------------------------------------------------
// run / try_run
// ---------------------------------------------------------------------------------------------

#[test]
fn run_acquires_runs_the_task_and_releases() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let lock = Lock::new(key("job"), ttl(5_000), &store, rt.clone());
    let other = Lock::new(key("job"), ttl(5_000), &store, rt.clone());
    let held_inside = Cell::new(None);

    let out = rt.block_on(lock.run(now(), |_| async {
        // Inside the critical section the key is held, and nobody else can take it.
        held_inside.set(Some((
            other.is_locked().await.unwrap(),
            other.acquire(now()).await.unwrap(),
        )));
        rt.sleep(1_000).await;
        "done"
    }));

    assert_eq!(out.unwrap(), Some("done"));
    assert_eq!(held_inside.get(), Some((true, false)));
    assert!(
        !rt.block_on(lock.is_locked()).unwrap(),
        "run did not release"
    );
    assert!(lock.owner().is_none());
    assert!(!lock.is_expired(), "a released lock is not 'expired'");
    assert!(rt.block_on(other.acquire(now())).unwrap());
}

#[test]
fn run_on_a_held_key_answers_none_and_never_runs_the_task() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let holder = Lock::new(key("busy"), ttl(5_000), &store, rt.clone());
    let latecomer = Lock::new(key("busy"), ttl(5_000), &store, rt.clone());
    assert!(rt.block_on(holder.acquire(now())).unwrap());

    let ran = Cell::new(false);
    let out = rt.block_on(latecomer.run(now(), |_| async { ran.set(true) }));
    assert_eq!(out.unwrap(), None);
    assert!(!ran.get(), "the task ran without the lock");
    // The failed attempt left the holder's lock alone.
    assert_eq!(rt.block_on(holder.remaining_time()).unwrap(), Some(5_000));
    assert!(rt.block_on(holder.release()).unwrap());
}

#[test]
fn run_waits_for_the_holder_when_given_a_timeout() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let holder = Lock::new(key("q"), ttl(5_000), &store, rt.clone());
    let waiter = Lock::new(key("q"), ttl(5_000), &store, rt.clone());
    let ran_at = Cell::new(None);
    let tasks: Vec<Task> = vec![
        Box::pin(async {
            holder
                .run(now(), |_| rt.sleep(700))
                .await
                .unwrap()
                .expect("holder runs");
        }),
        Box::pin(async {
            let out = waiter
                .run(wait(2_000, 100), |_| async {
                    ran_at.set(Some(rt.now_ms()))
                })
                .await;
            assert_eq!(out.unwrap(), Some(()));
        }),
    ];
    rt.join_all(tasks);
    let ran_at = ran_at.get().expect("waiter ran") - VIRTUAL_EPOCH_MS;
    assert!((700..800).contains(&ran_at), "waiter ran at {ran_at}");
}

#[test]
fn try_run_with_a_failing_task_releases_and_returns_the_same_error() {
    #[derive(Debug, PartialEq)]
    struct TaskFailed(&'static str, u32);

    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let lock = Lock::new(key("charge"), ttl(5_000), &store, rt.clone());
    let out = rt.block_on(lock.try_run(now(), |_| async {
        rt.sleep(10).await;
        Err::<(), _>(TaskFailed("card declined", 402))
    }));
    match out {
        Err(RunError::Task(e)) => assert_eq!(e, TaskFailed("card declined", 402)),
        other => panic!("expected the task's error, got {other:?}"),
    }
    assert!(
        !rt.block_on(lock.is_locked()).unwrap(),
        "lock kept after task failure"
    );
    assert!(lock.owner().is_none());

    // The key is free for the next run.
    let again = rt.block_on(lock.try_run(now(), |_| async { Ok::<_, TaskFailed>(7) }));
    assert!(matches!(again, Ok(Some(7))), "{again:?}");
}

#[test]
fn try_run_on_a_held_key_answers_none_without_running() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let holder = Lock::new(key("t"), ttl(5_000), &store, rt.clone());
    let other = Lock::new(key("t"), ttl(5_000), &store, rt.clone());
    assert!(rt.block_on(holder.acquire(now())).unwrap());
    let ran = Cell::new(false);
    let out = rt.block_on(other.try_run(now(), |_| async {
        ran.set(true);
        Err::<(), _>("should not run")
    }));
    assert!(matches!(out, Ok(None)), "{out:?}");
    assert!(!ran.get());
}

#[test]
fn the_task_can_extend_its_own_lock_past_the_original_ttl() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let lock = Lock::new(key("long-job"), ttl(100), &store, rt.clone());
    let rival = Lock::new(key("long-job"), ttl(100), &store, rt.clone());
    let rival_got_in = Cell::new(false);
    let out = rt.block_on(lock.run(now(), |_| async {
        lock.extend(Some(ttl(1_000))).await.unwrap();
        rt.sleep(500).await; // well past the original 100 ms
        rival_got_in.set(rival.acquire(now()).await.unwrap());
        assert!(!lock.is_expired());
        1
    }));
    assert_eq!(out.unwrap(), Some(1));
    assert!(
        !rival_got_in.get(),
        "extend inside run did not keep the lock"
    );
    assert!(!rt.block_on(lock.is_locked()).unwrap());
}

#[test]
fn a_run_that_outlives_its_ttl_does_not_free_the_next_holder() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let slow = Lock::new(key("slow"), ttl(100), &store, rt.clone());
    let next = Lock::new(key("slow"), ttl(10_000), &store, rt.clone());
    let tasks: Vec<Task> = vec![
        Box::pin(async {
            let out = slow.run(now(), |_| rt.sleep(300)).await;
            assert_eq!(out.unwrap(), Some(()));
            assert!(slow.is_expired(), "slow run's lock expired under it");
        }),
        Box::pin(async {
            rt.sleep(150).await;
            assert!(next.acquire(now()).await.unwrap(), "expired key not free");
        }),
    ];
    rt.join_all(tasks);
    // The slow run's release at t=300 must not have touched `next`'s hold.
    assert_eq!(rt.now_ms() - VIRTUAL_EPOCH_MS, 300);
    assert_eq!(
        rt.block_on(next.remaining_time()).unwrap(),
        Some(10_000 - 150)
    );
    assert!(rt.block_on(next.release()).unwrap());
}

// ---------------------------------------------------------------------------------------------
// acquire with a timeout
// ---------------------------------------------------------------------------------------------

#[test]
fn acquire_with_timeout_succeeds_once_the_holder_releases() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let holder = Lock::new(key("w"), ttl(60_000), &store, rt.clone());
    let waiter = Lock::new(key("w"), ttl(60_000), &store, rt.clone());
    assert!(rt.block_on(holder.acquire(now())).unwrap());
    let start = rt.now_ms();
    let got = Cell::new(None);
    let tasks: Vec<Task> = vec![
        Box::pin(async {
            rt.sleep(120).await;
            assert!(holder.release().await.unwrap());
        }),
        Box::pin(async {
            got.set(Some((
                waiter.acquire(wait(1_000, 50)).await.unwrap(),
                rt.now_ms(),
            )));
        }),
    ];
    rt.join_all(tasks);
    let (won, at) = got.get().unwrap();
    assert!(won, "waiter gave up although the holder released at 120 ms");
    let elapsed = at - start;
    assert!((120..170).contains(&elapsed), "acquired after {elapsed} ms");
    assert!(waiter.owner().is_some());
    assert!(!waiter.is_expired());
}

#[test]
fn acquire_with_timeout_succeeds_when_the_holders_ttl_expires() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let holder = Lock::new(key("w"), ttl(300), &store, rt.clone());
    let waiter = Lock::new(key("w"), ttl(60_000), &store, rt.clone());
    assert!(rt.block_on(holder.acquire(now())).unwrap());
    let start = rt.now_ms();
    // The holder never releases; its TTL frees the key at 300 ms.
    assert!(rt.block_on(waiter.acquire(wait(1_000, 50))).unwrap());
    let elapsed = rt.now_ms() - start;
    assert!((300..350).contains(&elapsed), "acquired after {elapsed} ms");
    assert!(holder.is_expired());
    assert!(matches!(rt.block_on(holder.release()), Ok(false)));
    assert!(rt.block_on(waiter.is_locked()).unwrap());
}

#[test]
fn acquire_with_timeout_gives_up_after_the_timeout() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let holder = Lock::new(key("w"), ttl(60_000), &store, rt.clone());
    let waiter = Lock::new(key("w"), ttl(60_000), &store, rt.clone());
    assert!(rt.block_on(holder.acquire(now())).unwrap());
    store.acquires.set(0);

    let (timeout, retry) = (1_000, 50);
    let start = rt.now_ms();
    assert!(!rt.block_on(waiter.acquire(wait(timeout, retry))).unwrap());
    let elapsed = rt.now_ms() - start;
    assert!(elapsed >= timeout, "gave up early, after {elapsed} ms");
    assert!(
        elapsed < timeout + retry + 5,
        "gave up late, after {elapsed} ms"
    );
    // Attempts at 0, 50, …, 1000: timeout / retryDelay + 1.
    assert_eq!(store.acquires.get() as u64, timeout / retry + 1);
    assert!(waiter.owner().is_none());
    assert!(
        !waiter.is_expired(),
        "a handle that never held is not expired"
    );
    assert!(holder.owner().is_some());
    assert!(
        rt.block_on(holder.release()).unwrap(),
        "holder was disturbed"
    );
}

#[test]
fn a_timeout_that_is_not_a_multiple_of_the_retry_delay_still_tries_at_the_deadline() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    // Holder expires at exactly 1030 ms: only the final attempt, at the deadline, can see it.
    let holder = Lock::new(key("edge"), ttl(1_030), &store, rt.clone());
    let waiter = Lock::new(key("edge"), ttl(60_000), &store, rt.clone());
    assert!(rt.block_on(holder.acquire(now())).unwrap());
    store.acquires.set(0);
    let start = rt.now_ms();
    assert!(rt.block_on(waiter.acquire(wait(1_030, 100))).unwrap());
    assert_eq!(rt.now_ms() - start, 1_030);
    // 0, 100, …, 1000, then 1030.
    assert_eq!(store.acquires.get(), 12);
}

#[test]
fn a_retry_delay_longer_than_the_timeout_makes_a_final_attempt_at_the_deadline() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let holder = Lock::new(key("w"), ttl(60_000), &store, rt.clone());
    let waiter = Lock::new(key("w"), ttl(60_000), &store, rt.clone());
    assert!(rt.block_on(holder.acquire(now())).unwrap());
    store.acquires.set(0);
    let start = rt.now_ms();
    assert!(!rt.block_on(waiter.acquire(wait(100, 10_000))).unwrap());
    assert_eq!(rt.now_ms() - start, 100, "slept past the timeout");
    assert_eq!(store.acquires.get(), 2);
}

#[test]
fn timeout_zero_tries_exactly_once_and_does_not_wait() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let holder = Lock::new(key("w"), ttl(60_000), &store, rt.clone());
    let waiter = Lock::new(key("w"), ttl(60_000), &store, rt.clone());
    assert!(rt.block_on(holder.acquire(now())).unwrap());
    store.acquires.set(0);
    let start = rt.now_ms();
    assert!(!rt.block_on(waiter.acquire(wait(0, 50))).unwrap());
    assert_eq!(rt.now_ms(), start);
    assert_eq!(store.acquires.get(), 1);
}

#[test]
fn retry_delay_zero_does_not_spin_forever() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let holder = Lock::new(key("spin"), ttl(60_000), &store, rt.clone());
    let waiter = Lock::new(key("spin"), ttl(60_000), &store, rt.clone());
    assert!(rt.block_on(holder.acquire(now())).unwrap());
    store.acquires.set(0);
    let start = rt.now_ms();
    // ScriptedStore panics when many attempts happen at one instant, so a loop that never lets
    // virtual time pass fails here instead of hanging.
    assert!(!rt.block_on(waiter.acquire(wait(100, 0))).unwrap());
    let elapsed = rt.now_ms() - start;
    assert_eq!(elapsed, 100);
    let attempts = store.acquires.get();
    assert!(
        (2..=101).contains(&attempts),
        "{attempts} attempts in 100 ms with retryDelay 0"
    );
}

#[test]
fn retry_delay_zero_still_acquires_as_soon_as_the_key_frees() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let holder = Lock::new(key("spin"), ttl(37), &store, rt.clone());
    let waiter = Lock::new(key("spin"), ttl(60_000), &store, rt.clone());
    assert!(rt.block_on(holder.acquire(now())).unwrap());
    let start = rt.now_ms();
    assert!(rt.block_on(waiter.acquire(wait(1_000, 0))).unwrap());
    assert_eq!(rt.now_ms() - start, 37);
}

// ---------------------------------------------------------------------------------------------
// Ownership
// ---------------------------------------------------------------------------------------------

#[test]
fn an_expired_holder_cannot_release_or_extend_the_new_holders_lock() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let a = Lock::new(key("own"), ttl(100), &store, rt.clone());
    let b = Lock::new(key("own"), ttl(10_000), &store, rt.clone());
    assert!(rt.block_on(a.acquire(now())).unwrap());
    assert!(!rt.block_on(b.acquire(now())).unwrap());
    rt.advance(150);
    assert!(rt.block_on(b.acquire(now())).unwrap());

    assert!(matches!(rt.block_on(a.release()), Ok(false)));
    assert!(
        rt.block_on(b.is_locked()).unwrap(),
        "A's late release freed B"
    );
    assert_eq!(rt.block_on(b.remaining_time()).unwrap(), Some(10_000));

    let extended = rt.block_on(a.extend(None));
    assert!(is_not_held(&extended, "own", "extend"), "{extended:?}");
    assert!(a.is_expired());

    // B's hold is intact and still B's to give back.
    assert!(rt.block_on(b.extend(None)).is_ok());
    assert!(rt.block_on(b.release()).unwrap());
    assert!(!rt.block_on(b.is_locked()).unwrap());
}

#[test]
fn an_expired_holders_extend_is_refused_without_asking_the_store_and_leaves_the_new_holder() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let a = Lock::new(key("own"), ttl(100), &store, rt.clone());
    let b = Lock::new(key("own"), ttl(10_000), &store, rt.clone());
    assert!(rt.block_on(a.acquire(now())).unwrap());
    rt.advance(150);
    assert!(rt.block_on(b.acquire(now())).unwrap());
    // The hold's deadline has passed: it is presumed lost, and the store is not asked to
    // revive it (the conformance kit checks that a store would refuse).
    let before = store.calls.get();
    let extended = rt.block_on(a.extend(Some(ttl(50_000))));
    assert!(is_not_held(&extended, "own", "extend"), "{extended:?}");
    assert_eq!(store.calls.get(), before, "extend asked the store");
    assert_eq!(rt.block_on(b.remaining_time()).unwrap(), Some(10_000));
    assert!(matches!(rt.block_on(a.release()), Ok(false)));
    assert!(rt.block_on(b.release()).unwrap());
}

#[test]
fn extend_on_a_never_acquired_lock_is_not_held() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let lock = Lock::new(key("never"), ttl(100), &store, rt.clone());
    let result = rt.block_on(lock.extend(None));
    assert!(is_not_held(&result, "never", "extend"), "{result:?}");
    let message = result.unwrap_err().to_string();
    assert!(message.contains("never"), "{message}");
    // Answered locally: with no hold there is nothing to ask the store (which may be down).
    assert_eq!(
        store.calls.get(),
        0,
        "extend without a hold called the store"
    );
    store.fail_on.set(Some(Operation::Extend));
    let result = rt.block_on(lock.extend(None));
    assert!(is_not_held(&result, "never", "extend"), "{result:?}");
    store.fail_on.set(None);
    assert!(
        !rt.block_on(lock.is_locked()).unwrap(),
        "extend took the lock"
    );
}

#[test]
fn extend_after_release_is_not_held() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let lock = Lock::new(key("gone"), ttl(100), &store, rt.clone());
    assert!(rt.block_on(lock.acquire(now())).unwrap());
    assert!(rt.block_on(lock.release()).unwrap());
    assert!(is_not_held(
        &rt.block_on(lock.extend(None)),
        "gone",
        "extend"
    ));
    assert!(!rt.block_on(lock.is_locked()).unwrap());
}

#[test]
fn release_answers_false_when_never_acquired_or_already_released() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let holder = Lock::new(key("r"), ttl(1_000), &store, rt.clone());
    let stranger = Lock::new(key("r"), ttl(1_000), &store, rt.clone());
    assert!(matches!(rt.block_on(stranger.release()), Ok(false)));
    assert!(rt.block_on(holder.acquire(now())).unwrap());
    assert!(matches!(rt.block_on(stranger.release()), Ok(false)));
    assert!(
        rt.block_on(holder.is_locked()).unwrap(),
        "stranger freed the key"
    );
    assert!(rt.block_on(holder.release()).unwrap());
    assert!(matches!(rt.block_on(holder.release()), Ok(false)));
}

#[test]
fn extend_moves_the_expiry() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let lock = Lock::new(key("ext"), ttl(100), &store, rt.clone());
    let rival = Lock::new(key("ext"), ttl(100), &store, rt.clone());
    assert!(rt.block_on(lock.acquire(now())).unwrap());
    rt.advance(80);
    rt.block_on(lock.extend(None)).unwrap();
    assert_eq!(rt.block_on(lock.remaining_time()).unwrap(), Some(100));
    rt.advance(70); // t = 150: past the original expiry at 100
    assert!(rt.block_on(lock.is_locked()).unwrap());
    assert!(!rt.block_on(rival.acquire(now())).unwrap());
    assert!(!lock.is_expired());
    rt.advance(30); // t = 180: the extended expiry
    assert!(lock.is_expired());
    assert!(rt.block_on(rival.acquire(now())).unwrap());
}

#[test]
fn extend_with_an_explicit_ttl_uses_that_ttl_from_now() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let lock = Lock::new(key("ext"), ttl(100), &store, rt.clone());
    assert!(rt.block_on(lock.acquire(now())).unwrap());
    rt.advance(50);
    rt.block_on(lock.extend(Some(ttl(5_000)))).unwrap();
    assert_eq!(rt.block_on(lock.remaining_time()).unwrap(), Some(5_000));
    assert_eq!(lock.ttl(), ttl(100), "extend changed the lock's own TTL");
    rt.advance(4_999);
    assert!(!lock.is_expired());
    rt.advance(1);
    assert!(lock.is_expired());
    assert!(!rt.block_on(lock.is_locked()).unwrap());
}

#[test]
fn locks_on_different_keys_are_independent() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let a = Lock::new(key("invoice:1"), ttl(1_000), &store, rt.clone());
    let b = Lock::new(key("invoice:2"), ttl(1_000), &store, rt.clone());
    assert!(rt.block_on(a.acquire(now())).unwrap());
    assert!(rt.block_on(b.acquire(now())).unwrap());
    assert!(rt.block_on(a.release()).unwrap());
    assert!(rt.block_on(b.is_locked()).unwrap());
}

#[test]
fn a_lock_is_not_reentrant() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let lock = Lock::new(key("re"), ttl(1_000), &store, rt.clone());
    assert!(rt.block_on(lock.acquire(now())).unwrap());
    let owner = lock.owner().unwrap();

    assert!(
        !rt.block_on(lock.acquire(now())).unwrap(),
        "re-acquired a held key"
    );
    assert_eq!(
        lock.owner(),
        Some(owner.clone()),
        "failed acquire clobbered the owner"
    );
    // A waiting re-acquire also fails, within its timeout, and leaves the hold alone.
    assert!(!rt.block_on(lock.acquire(wait(200, 50))).unwrap());
    assert_eq!(lock.owner(), Some(owner));
    assert!(!lock.is_expired());

    assert!(
        rt.block_on(lock.release()).unwrap(),
        "release after failed re-acquire"
    );
    assert!(!rt.block_on(lock.is_locked()).unwrap());
}

#[test]
fn run_inside_run_on_the_same_handle_does_not_run_the_inner_task() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let lock = Lock::new(key("nest"), ttl(1_000), &store, rt.clone());
    let inner_ran = Cell::new(false);
    let out = rt.block_on(lock.run(now(), |_| async {
        let inner = lock.run(now(), |_| async { inner_ran.set(true) }).await;
        assert_eq!(inner.unwrap(), None);
        // The outer hold survives the refused inner attempt.
        assert!(lock.is_locked().await.unwrap());
        "outer"
    }));
    assert_eq!(out.unwrap(), Some("outer"));
    assert!(!inner_ran.get());
    assert!(!rt.block_on(lock.is_locked()).unwrap());
}

// ---------------------------------------------------------------------------------------------
// is_expired
// ---------------------------------------------------------------------------------------------

#[test]
fn is_expired_follows_the_local_deadline() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let lock = Lock::new(key("exp"), ttl(100), &store, rt.clone());
    assert!(!lock.is_expired(), "expired before acquire");
    assert!(rt.block_on(lock.acquire(now())).unwrap());
    assert!(!lock.is_expired(), "expired right after acquire");
    rt.advance(99);
    assert!(!lock.is_expired(), "expired while held");
    rt.advance(1);
    assert!(lock.is_expired(), "not expired at the deadline");
    rt.advance(10_000);
    assert!(lock.is_expired());
}

#[test]
fn is_expired_is_true_after_a_refused_extend_even_before_the_local_deadline() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let lock = Lock::new(key("exp"), ttl(10_000), &store, rt.clone());
    assert!(rt.block_on(lock.acquire(now())).unwrap());
    // Another process, holding the hand-over, releases the key behind this handle's back.
    let twin = Lock::restore(
        SerializedLock::parse(&lock.serialize().unwrap()).unwrap(),
        &store,
        rt.clone(),
    );
    assert!(rt.block_on(twin.release()).unwrap());
    assert!(!lock.is_expired(), "the local deadline is still 10 s away");
    assert!(is_not_held(
        &rt.block_on(lock.extend(None)),
        "exp",
        "extend"
    ));
    assert!(
        lock.is_expired(),
        "a refused extend must mark the lock lost"
    );
    assert!(lock.owner().is_none());
}

#[test]
fn is_expired_is_true_after_a_refused_release() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let lock = Lock::new(key("exp"), ttl(10_000), &store, rt.clone());
    assert!(rt.block_on(lock.acquire(now())).unwrap());
    let twin = Lock::restore(
        SerializedLock::parse(&lock.serialize().unwrap()).unwrap(),
        &store,
        rt.clone(),
    );
    assert!(rt.block_on(twin.release()).unwrap());
    assert!(matches!(rt.block_on(lock.release()), Ok(false)));
    assert!(lock.is_expired());
}

#[test]
fn is_expired_is_false_after_a_voluntary_release() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let lock = Lock::new(key("exp"), ttl(100), &store, rt.clone());
    assert!(rt.block_on(lock.acquire(now())).unwrap());
    rt.advance(50);
    assert!(rt.block_on(lock.release()).unwrap());
    assert!(!lock.is_expired());
    rt.advance(1_000); // long past the old deadline
    assert!(!lock.is_expired(), "a released lock turned 'expired' later");
}

#[test]
fn is_expired_resets_when_the_handle_acquires_again() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let lock = Lock::new(key("exp"), ttl(100), &store, rt.clone());
    assert!(rt.block_on(lock.acquire(now())).unwrap());
    rt.advance(200);
    assert!(lock.is_expired());
    assert!(rt.block_on(lock.acquire(now())).unwrap());
    assert!(!lock.is_expired());
    assert!(rt.block_on(lock.release()).unwrap());
}

// ---------------------------------------------------------------------------------------------
// serialize / restore
// ---------------------------------------------------------------------------------------------

#[test]
fn serialize_fails_with_not_held_when_there_is_no_hold() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let lock = Lock::new(key("ser"), ttl(100), &store, rt.clone());
    assert!(is_not_held(&lock.serialize(), "ser", "serialize"));
    assert!(rt.block_on(lock.acquire(now())).unwrap());
    assert!(lock.serialize().is_ok());
    assert!(rt.block_on(lock.release()).unwrap());
    assert!(is_not_held(&lock.serialize(), "ser", "serialize"));
}

#[test]
fn serialize_fails_after_the_lock_was_lost() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let lock = Lock::new(key("ser"), ttl(100), &store, rt.clone());
    assert!(rt.block_on(lock.acquire(now())).unwrap());
    rt.advance(200);
    assert!(rt.block_on(lock.extend(None)).is_err());
    assert!(is_not_held(&lock.serialize(), "ser", "serialize"));
}

#[test]
fn an_expired_hold_cannot_be_extended_or_serialized_at_its_deadline() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let lock = Lock::new(key("due"), ttl(100), &store, rt.clone());
    assert!(rt.block_on(lock.acquire(now())).unwrap());
    rt.advance(99);
    assert!(lock.serialize().is_ok());
    assert!(rt.block_on(lock.extend(Some(ttl(100)))).is_ok());
    rt.advance(100);
    assert!(lock.is_expired());
    assert!(is_not_held(&lock.serialize(), "due", "serialize"));
    let before = store.calls.get();
    let extended = rt.block_on(lock.extend(None));
    assert!(is_not_held(&extended, "due", "extend"), "{extended:?}");
    assert_eq!(store.calls.get(), before, "extend asked the store");
    // The store still has the row until its own clock says otherwise: release asks it.
    assert!(rt.block_on(lock.release()).is_ok());
    assert_eq!(
        store.calls.get(),
        before + 1,
        "release did not ask the store"
    );
}

#[test]
fn a_restored_lock_can_extend_and_release_the_original_hold() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let k = "import:99 / ü:✓"; // colons and non-ASCII survive the hand-over
    let original = Lock::new(key(k), ttl(2_000), &store, rt.clone());
    assert!(rt.block_on(original.acquire(now())).unwrap());
    let text = original.serialize().unwrap();
    assert!(text.starts_with("keel-lock:3:"), "{text}");

    let parsed = SerializedLock::parse(&text).unwrap();
    assert_eq!(parsed.fence, original.fence());
    assert!(parsed.fence.is_some());
    assert_eq!(parsed.key.as_str(), k);
    assert_eq!(parsed.ttl, ttl(2_000));
    assert_eq!(Some(parsed.owner.clone()), original.owner());
    assert_eq!(parsed.deadline_ms, VIRTUAL_EPOCH_MS + 2_000);

    rt.advance(1_500);
    let restored = Lock::restore(parsed, &store, rt.clone());
    assert_eq!(restored.key().as_str(), k);
    assert_eq!(restored.ttl(), ttl(2_000));
    assert_eq!(restored.owner(), original.owner());
    assert!(!restored.is_expired());

    // Extending from the restored handle moves the real expiry (past the original 2000 ms).
    rt.block_on(restored.extend(None)).unwrap();
    rt.advance(1_000); // t = 2500
    assert!(
        rt.block_on(restored.is_locked()).unwrap(),
        "restored extend did nothing"
    );
    assert!(!restored.is_expired());
    let stranger = Lock::new(key(k), ttl(2_000), &store, rt.clone());
    assert!(!rt.block_on(stranger.acquire(now())).unwrap());

    assert!(rt.block_on(restored.release()).unwrap());
    assert!(!rt.block_on(restored.is_locked()).unwrap());
    assert!(rt.block_on(stranger.acquire(now())).unwrap());
}

#[test]
fn a_restored_lock_keeps_the_serialized_deadline() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let original = Lock::new(key("dl"), ttl(1_000), &store, rt.clone());
    assert!(rt.block_on(original.acquire(now())).unwrap());
    let text = original.serialize().unwrap();
    rt.advance(600);
    let restored = Lock::restore(SerializedLock::parse(&text).unwrap(), &store, rt.clone());
    assert!(!restored.is_expired());
    rt.advance(400);
    assert!(
        restored.is_expired(),
        "restored lock ignored the hand-over deadline"
    );
    assert!(is_not_held(
        &rt.block_on(restored.extend(None)),
        "dl",
        "extend"
    ));
}

#[test]
fn a_restored_lock_from_a_tampered_string_is_refused_by_the_store() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let original = Lock::new(key("tamper"), ttl(1_000), &store, rt.clone());
    assert!(rt.block_on(original.acquire(now())).unwrap());
    let mut parsed = SerializedLock::parse(&original.serialize().unwrap()).unwrap();
    parsed.owner = OwnerToken::parse("not-the-owner").unwrap();
    let forged = Lock::restore(parsed, &store, rt.clone());
    assert!(matches!(rt.block_on(forged.release()), Ok(false)));
    assert!(rt.block_on(forged.extend(None)).is_err());
    assert!(rt.block_on(original.is_locked()).unwrap());
    assert!(rt.block_on(original.release()).unwrap());
}

// ---------------------------------------------------------------------------------------------
// Store failures
// ---------------------------------------------------------------------------------------------

#[test]
fn a_failing_acquire_surfaces_as_a_store_error_carrying_the_stores_value() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::failing(&rt, Operation::Acquire);
    let lock = Lock::new(key("down"), ttl(1_000), &store, rt.clone());
    let result = rt.block_on(lock.acquire(now()));
    match result {
        Err(Error::Store {
            operation,
            store: name,
            error,
        }) => {
            assert_eq!(operation, Operation::Acquire);
            assert_eq!(name, "scripted");
            assert_eq!(
                error,
                Outage {
                    op: Operation::Acquire,
                    call: 1
                }
            );
        }
        other => panic!("expected a store error, got {other:?}"),
    }
    assert!(lock.owner().is_none());
    assert!(!lock.is_expired());
}

#[test]
fn a_failing_acquire_with_a_timeout_fails_at_once_rather_than_retrying() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::failing(&rt, Operation::Acquire);
    let lock = Lock::new(key("down"), ttl(1_000), &store, rt.clone());
    let start = rt.now_ms();
    let result = rt.block_on(lock.acquire(wait(5_000, 50)));
    assert!(matches!(
        result,
        Err(Error::Store {
            operation: Operation::Acquire,
            ..
        })
    ));
    assert_eq!(store.acquires.get(), 1);
    assert_eq!(rt.now_ms(), start);
}

#[test]
fn run_with_a_failing_acquire_never_runs_the_task() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::failing(&rt, Operation::Acquire);
    let lock = Lock::new(key("down"), ttl(1_000), &store, rt.clone());
    let ran = Cell::new(false);
    let result = rt.block_on(lock.run(now(), |_| async { ran.set(true) }));
    assert!(!ran.get(), "the task ran although acquire failed");
    match result {
        Err(Error::Store {
            operation: Operation::Acquire,
            store: "scripted",
            error,
        }) => assert_eq!(error.op, Operation::Acquire),
        other => panic!("expected a store error, got {other:?}"),
    }

    let ran = Cell::new(false);
    let result = rt.block_on(lock.try_run(now(), |_| async {
        ran.set(true);
        Ok::<(), ()>(())
    }));
    assert!(!ran.get());
    assert!(matches!(
        result,
        Err(RunError::Lock(Error::Store {
            operation: Operation::Acquire,
            ..
        }))
    ));
}

#[test]
fn run_with_a_failing_release_reports_the_release_error_after_running() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::failing(&rt, Operation::Release);
    let lock = Lock::new(key("flaky"), ttl(1_000), &store, rt.clone());
    let ran = Cell::new(false);
    let result = rt.block_on(lock.run(now(), |_| async { ran.set(true) }));
    assert!(ran.get());
    match result {
        Err(Error::Store {
            operation: Operation::Release,
            error,
            ..
        }) => assert_eq!(error.op, Operation::Release),
        other => panic!("expected a release error, got {other:?}"),
    }
}

#[test]
fn when_both_task_and_release_fail_the_task_error_wins() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::failing(&rt, Operation::Release);
    let lock = Lock::new(key("flaky"), ttl(1_000), &store, rt.clone());
    let result = rt.block_on(lock.try_run(now(), |_| async { Err::<(), _>("task broke") }));
    assert_eq!(result.unwrap_err().to_string(), "task failed: task broke");
}

#[test]
fn a_failing_extend_is_a_store_error_not_a_lost_lock() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::failing(&rt, Operation::Extend);
    let lock = Lock::new(key("flaky"), ttl(1_000), &store, rt.clone());
    assert!(rt.block_on(lock.acquire(now())).unwrap());
    let result = rt.block_on(lock.extend(None));
    match &result {
        Err(Error::Store {
            operation: Operation::Extend,
            store: "scripted",
            error,
        }) => assert_eq!(
            *error,
            Outage {
                op: Operation::Extend,
                call: 2
            }
        ),
        other => panic!("expected an extend store error, got {other:?}"),
    }
    assert_eq!(
        result.unwrap_err().to_string(),
        "scripted store failed during extend"
    );
    // An outage is not a refusal: the handle still holds and can release once the store is back.
    assert!(!lock.is_expired());
    store.fail_on.set(None);
    assert!(rt.block_on(lock.release()).unwrap());
}

#[test]
fn failing_inspection_calls_name_their_operation() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::failing(&rt, Operation::IsLocked);
    let lock = Lock::new(key("insp"), ttl(1_000), &store, rt.clone());
    assert!(matches!(
        rt.block_on(lock.is_locked()),
        Err(Error::Store {
            operation: Operation::IsLocked,
            error: Outage {
                op: Operation::IsLocked,
                ..
            },
            ..
        })
    ));
    assert!(rt.block_on(lock.remaining_time()).is_ok());
    store.fail_on.set(Some(Operation::RemainingTime));
    assert!(matches!(
        rt.block_on(lock.remaining_time()),
        Err(Error::Store {
            operation: Operation::RemainingTime,
            ..
        })
    ));
    assert!(rt.block_on(lock.is_locked()).is_ok());
}

// ---------------------------------------------------------------------------------------------
// Fences
// ---------------------------------------------------------------------------------------------

#[test]
fn a_hold_carries_its_fence_and_only_while_held() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let lock = Lock::new(key("fenced"), ttl(1_000), &store, rt.clone());
    assert_eq!(lock.fence(), None, "no fence before acquiring");
    assert!(rt.block_on(lock.acquire(now())).unwrap());
    let first = lock.fence().expect("the memory store keeps fences");
    assert!(rt.block_on(lock.release()).unwrap());
    assert_eq!(lock.fence(), None, "no fence after releasing");
    assert!(rt.block_on(lock.acquire(now())).unwrap());
    assert!(lock.fence().unwrap() > first);
}

#[test]
fn fences_increase_across_handles_release_and_expiry() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let mut last = None;
    for round in 0..20 {
        let lock = Lock::new(key("ledger:7"), ttl(100), &store, rt.clone());
        assert!(rt.block_on(lock.acquire(now())).unwrap());
        let fence = lock.fence().unwrap();
        assert!(Some(fence) > last, "round {round}: {fence} after {last:?}");
        last = Some(fence);
        if round % 2 == 0 {
            assert!(rt.block_on(lock.release()).unwrap());
        } else {
            rt.advance(150); // left to expire
        }
    }
}

#[test]
fn run_hands_the_task_the_fence_of_its_hold() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let lock = Lock::new(key("ctx"), ttl(1_000), &store, rt.clone());
    let seen = rt
        .block_on(lock.run(now(), |context| async move { context.fence }))
        .unwrap()
        .expect("ran");
    assert!(seen.is_some());
    let again = rt
        .block_on(lock.run(now(), |context| async move { context.fence }))
        .unwrap()
        .expect("ran");
    assert!(again > seen, "{again:?} after {seen:?}");
}

#[test]
fn a_stale_holder_is_fenced_out_by_the_resource() {
    // The pause-past-TTL story: A holds, stalls beyond its TTL, B acquires and writes; A wakes
    // and writes. A resource that keeps the highest fence it has seen refuses A's write.
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let highest_seen = Cell::new(0u64);
    let write = |fence: keel_lock::Fence| {
        if fence.get() > highest_seen.get() {
            highest_seen.set(fence.get());
            true
        } else {
            false
        }
    };
    let a = Lock::new(key("ledger"), ttl(1_000), &store, rt.clone());
    let b = Lock::new(key("ledger"), ttl(1_000), &store, rt.clone());
    assert!(rt.block_on(a.acquire(now())).unwrap());
    let fence_a = a.fence().unwrap();
    rt.advance(5_000); // A's pause: its TTL passes
    assert!(rt.block_on(b.acquire(now())).unwrap());
    assert!(write(b.fence().unwrap()), "B's write is accepted");
    assert!(!write(fence_a), "A's stale write must be refused");
}

// ---------------------------------------------------------------------------------------------
// Holding: the loss signal and keep-alive
// ---------------------------------------------------------------------------------------------

fn keep_alive(every_ms: u64, max_hold_ms: Option<u64>) -> Option<keel_lock::KeepAlive> {
    Some(keel_lock::KeepAlive {
        every_ms: Some(every_ms),
        max_hold_ms,
    })
}

/// Runs `work_ms` of work under `lock` with `keep`; answers the loss seen by the task (and when).
fn run_for(
    rt: &VirtualRuntime,
    lock: &Lock<&ScriptedStore, VirtualRuntime>,
    keep: Option<keel_lock::KeepAlive>,
    work_ms: u64,
) -> (Option<keel_lock::LossReason>, Option<u64>) {
    let lost_at = Rc::new(Cell::new(None));
    let start = rt.now_ms();
    let seen = rt
        .block_on(
            lock.try_run_with(now(), std::future::pending(), keep, |context| {
                let (rt, lost_at) = (rt.clone(), lost_at.clone());
                async move {
                    let rt2 = rt.clone();
                    context.on_lost(move |_| lost_at.set(Some(rt2.now_ms() - start)));
                    rt.sleep(work_ms).await;
                    Ok::<_, ()>(context.lost())
                }
            }),
        )
        .unwrap()
        .expect("ran");
    (seen, lost_at.get())
}

#[test]
fn without_keep_alive_the_task_is_told_at_the_local_deadline() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let lock = Lock::new(key("long"), ttl(1_000), &store, rt.clone());
    let (lost, at) = run_for(&rt, &lock, None, 5_000);
    assert_eq!(lost, Some(keel_lock::LossReason::Expired));
    assert_eq!(at, Some(1_000));
    // run() still released, which the store refused (the hold had expired there): no error.
    assert!(lock.owner().is_none());
}

#[test]
fn keep_alive_holds_through_five_ttls_and_nobody_else_gets_in() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let lock = Lock::new(key("long"), ttl(1_000), &store, rt.clone());
    let rival = Lock::new(key("long"), ttl(1_000), &store, rt.clone());
    let rival_won = Cell::new(false);
    let lost = Cell::new(None);
    let tasks: Vec<Task> = vec![
        Box::pin(async {
            let out = lock
                .try_run_with(
                    now(),
                    std::future::pending(),
                    keep_alive(300, None),
                    |context| {
                        let rt = rt.clone();
                        async move {
                            rt.sleep(5_000).await;
                            Ok::<_, ()>(context.lost())
                        }
                    },
                )
                .await
                .unwrap();
            lost.set(out.expect("ran"));
        }),
        Box::pin(async {
            rt.sleep(10).await;
            for _ in 0..95 {
                if rival.acquire(now()).await.unwrap() {
                    rival_won.set(true);
                }
                rt.sleep(50).await;
            }
        }),
    ];
    rt.join_all(tasks);
    assert_eq!(lost.get(), None, "the hold was lost despite keep-alive");
    assert!(!rival_won.get(), "someone else got in while the task ran");
    // Released at the end: free again.
    assert!(!rt.block_on(lock.is_locked()).unwrap());
}

#[test]
fn a_store_outage_outlasting_the_ttl_signals_the_task_and_never_reacquires() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let lock = Lock::new(key("outage"), ttl(1_000), &store, rt.clone());
    store.fail_on.set(Some(Operation::Extend));
    let acquires_before = Cell::new(0);
    let (lost, at) = {
        acquires_before.set(store.acquires.get());
        run_for(&rt, &lock, keep_alive(300, None), 3_000)
    };
    assert_eq!(lost, Some(keel_lock::LossReason::Expired));
    assert_eq!(
        at,
        Some(1_000),
        "loss declared at the deadline, after retries"
    );
    assert_eq!(
        store.acquires.get(),
        acquires_before.get() + 1,
        "keep-alive acquired again"
    );
}

#[test]
fn a_refused_extend_signals_the_task_at_once() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let lock = Lock::new(key("forced"), ttl(1_000), &store, rt.clone());
    let lost_at = Rc::new(Cell::new(None));
    let seen = rt
        .block_on(lock.try_run_with(
            now(),
            std::future::pending(),
            keep_alive(300, None),
            |context| {
                let (rt, lost_at, store) = (rt.clone(), lost_at.clone(), &store);
                async move {
                    // An operator frees the key under us.
                    rt.sleep(100).await;
                    assert!(store.inner.force_release_sync(&key("forced")));
                    let rt2 = rt.clone();
                    context.on_lost(move |_| lost_at.set(Some(rt2.now_ms())));
                    rt.sleep(2_000).await;
                    Ok::<_, ()>(context.lost())
                }
            },
        ))
        .unwrap()
        .unwrap();
    assert_eq!(seen, Some(keel_lock::LossReason::Refused));
    // Told at the first extend after the force-release (300 ms in), not at the deadline.
    assert_eq!(
        lost_at
            .get()
            .map(|t| t - keel_lock::virtual_time::VIRTUAL_EPOCH_MS),
        Some(300)
    );
}

#[test]
fn the_hold_cap_stops_extending_and_signals() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let lock = Lock::new(key("capped"), ttl(1_000), &store, rt.clone());
    let (lost, at) = run_for(&rt, &lock, keep_alive(300, Some(2_000)), 10_000);
    assert_eq!(lost, Some(keel_lock::LossReason::HoldCapReached));
    assert_eq!(at, Some(2_000));
    let extends = store.calls.get();
    // No extend after the cap: the key expires by its TTL within a second of the cap.
    rt.advance(1_000);
    assert!(!rt
        .block_on(Lock::new(key("capped"), ttl(1), &store, rt.clone()).is_locked())
        .unwrap());
    assert_eq!(store.calls.get(), extends + 1, "extended after the cap");
}

#[test]
fn a_task_that_finishes_at_once_sets_no_timer() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let lock = Lock::new(key("quick"), ttl(1_000), &store, rt.clone());
    let start = rt.now_ms();
    let out = rt
        .block_on(lock.try_run_with(
            now(),
            std::future::pending(),
            keep_alive(300, None),
            |_| async { Ok::<_, ()>(7) },
        ))
        .unwrap();
    assert_eq!(out, Some(7));
    assert_eq!(rt.timers_started(), 0, "the watcher started a timer");
    assert_eq!(rt.now_ms(), start);
}

#[test]
fn force_release_frees_a_key_whoever_holds_it_and_says_when_a_store_cannot() {
    let rt = VirtualRuntime::new();
    let memory = MemoryLockStore::new(rt.clone());
    let holder = Lock::new(key("stuck"), ttl(60_000), &memory, rt.clone());
    let operator = Lock::new(key("stuck"), ttl(1_000), &memory, rt.clone());
    assert!(rt.block_on(holder.acquire(now())).unwrap());
    assert!(rt.block_on(operator.force_release()).unwrap());
    assert!(!rt.block_on(operator.is_locked()).unwrap());
    assert!(
        !rt.block_on(operator.force_release()).unwrap(),
        "nothing left to free"
    );
    // The holder finds out at its next extend.
    assert!(is_not_held(
        &rt.block_on(holder.extend(None)),
        "stuck",
        "extend"
    ));

    // A store without force_release: a clear error, not a silent no-op.
    let scripted = ScriptedStore::new(&rt);
    let l = Lock::new(key("stuck"), ttl(1_000), &scripted, rt.clone());
    assert!(matches!(
        rt.block_on(l.force_release()),
        Err(Error::Unsupported {
            store: "scripted",
            operation: Operation::ForceRelease
        })
    ));
}

#[test]
fn without_keep_alive_a_task_that_never_asks_about_the_loss_sets_no_deadline_timer() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let lock = Lock::new(key("quiet"), ttl(1_000), &store, rt.clone());
    let before = rt.timers_started();
    let out = rt
        .block_on(lock.run(now(), |_| {
            let rt = rt.clone();
            async move { rt.sleep(10).await } // one timer: the task's own
        }))
        .unwrap();
    assert_eq!(out, Some(()));
    assert_eq!(
        rt.timers_started() - before,
        1,
        "the watcher armed a timer nobody asked for"
    );
}

#[test]
fn a_task_that_releases_its_own_hold_is_not_told_it_lost_it() {
    for keep in [None, keep_alive(100, None)] {
        let rt = VirtualRuntime::new();
        let store = ScriptedStore::new(&rt);
        let lock = Lock::new(key("let-go"), ttl(1_000), &store, rt.clone());
        let told = Rc::new(Cell::new(None));
        let seen = rt
            .block_on(
                lock.try_run_with(now(), std::future::pending(), keep, |context| {
                    let (rt, told, lock) = (rt.clone(), told.clone(), &lock);
                    async move {
                        context.on_lost(move |reason| told.set(Some(reason)));
                        assert!(lock.release().await.unwrap());
                        rt.sleep(5_000).await; // well past the old deadline
                        Ok::<_, ()>(context.lost())
                    }
                }),
            )
            .unwrap()
            .expect("ran");
        assert_eq!(seen, None, "keep-alive {keep:?}");
        assert_eq!(told.get(), None, "keep-alive {keep:?}");
    }
}

/// Runs a task on `lock` that starts listening for the loss of its hold at `observe_at` and
/// holds until 3 s after that, while the `meanwhile` tasks run alongside it; answers what the
/// task was told, if anything.
fn told_while<'a, S>(
    rt: &VirtualRuntime,
    lock: &'a Lock<S, VirtualRuntime>,
    keep: Option<keel_lock::KeepAlive>,
    observe_at: u64,
    meanwhile: Vec<Task<'a>>,
) -> Option<keel_lock::LossReason>
where
    S: LockStore + 'a,
    S::Error: std::fmt::Debug,
{
    let told = Rc::new(Cell::new(None));
    let run: Task = Box::pin({
        let (rt, told) = (rt.clone(), told.clone());
        async move {
            lock.try_run_with(now(), std::future::pending(), keep, |context| async move {
                rt.sleep(observe_at).await;
                context.on_lost(move |reason| told.set(Some(reason)));
                rt.sleep(3_000).await;
                Ok::<_, ()>(())
            })
            .await
            .unwrap()
            .expect("ran");
        }
    });
    rt.join_all(std::iter::once(run).chain(meanwhile).collect());
    told.get()
}

#[test]
fn a_hold_lost_and_replaced_by_a_newer_hold_of_the_same_handle_is_reported_lost() {
    for keep in [None, keep_alive(100, None)] {
        let rt = VirtualRuntime::new();
        let store = MemoryLockStore::new(rt.clone());
        let lock = Lock::new(key("twice"), ttl(1_000), &store, rt.clone());
        let operator = Lock::new(key("twice"), ttl(1_000), &store, rt.clone());
        let meanwhile: Task = Box::pin(async {
            rt.sleep(50).await;
            assert!(operator.force_release().await.unwrap());
            rt.sleep(10).await;
            // The same handle takes the key again: a newer hold, not the run's.
            assert!(lock.acquire(now()).await.unwrap());
        });
        assert_eq!(
            told_while(&rt, &lock, keep, 0, vec![meanwhile]),
            Some(keel_lock::LossReason::Refused),
            "keep-alive {keep:?}"
        );
    }
}

#[test]
fn a_run_that_released_its_hold_is_not_told_of_a_later_holds_loss() {
    for keep in [None, keep_alive(100, None)] {
        let rt = VirtualRuntime::new();
        let store = MemoryLockStore::new(rt.clone());
        let lock = Lock::new(key("after"), ttl(1_000), &store, rt.clone());
        let operator = Lock::new(key("after"), ttl(1_000), &store, rt.clone());
        let meanwhile: Task = Box::pin(async {
            rt.sleep(10).await;
            // The run's hold, released by its holder; then a newer hold, lost.
            assert!(lock.release().await.unwrap());
            assert!(lock.acquire(now()).await.unwrap());
            assert!(operator.force_release().await.unwrap());
            assert!(lock.extend(None).await.is_err());
        });
        assert_eq!(
            told_while(&rt, &lock, keep, 0, vec![meanwhile]),
            None,
            "keep-alive {keep:?}"
        );
    }
}

#[test]
fn a_run_that_released_and_took_the_key_again_before_anything_watched_is_not_told_it_lost() {
    for keep in [None, keep_alive(100, None)] {
        let rt = VirtualRuntime::new();
        let store = MemoryLockStore::new(rt.clone());
        let lock = Lock::new(key("again"), ttl(1_000), &store, rt.clone());
        let told = Rc::new(Cell::new(None));
        rt.block_on(
            lock.try_run_with(now(), std::future::pending(), keep, |context| {
                let (rt, told, lock) = (rt.clone(), told.clone(), &lock);
                async move {
                    // Before the task first waits, so before its watcher first looks.
                    assert!(lock.release().await.unwrap());
                    assert!(lock.acquire(now()).await.unwrap());
                    context.on_lost(move |reason| told.set(Some(reason)));
                    rt.sleep(3_000).await;
                    Ok::<_, ()>(())
                }
            }),
        )
        .unwrap()
        .expect("ran");
        assert_eq!(told.get(), None, "keep-alive {keep:?}");
    }
}

#[test]
fn a_hold_lost_replaced_and_let_go_before_anyone_asked_is_still_reported_lost() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let lock = Lock::new(key("late"), ttl(1_000), &store, rt.clone());
    let operator = Lock::new(key("late"), ttl(1_000), &store, rt.clone());
    let meanwhile: Task = Box::pin(async {
        rt.sleep(50).await;
        assert!(operator.force_release().await.unwrap());
        assert!(lock.acquire(now()).await.unwrap());
        assert!(lock.release().await.unwrap());
    });
    // Asked only at 100, after the newer hold came and went.
    assert_eq!(
        told_while(&rt, &lock, None, 100, vec![meanwhile]),
        Some(keel_lock::LossReason::Refused)
    );
}

/// A memory store whose release answers `delay_ms` after it freed the key, as a network store's
/// answer can arrive after another connection's.
struct LateReleaseStore {
    inner: MemoryLockStore<VirtualRuntime>,
    rt: VirtualRuntime,
    delay_ms: u64,
}

impl LateReleaseStore {
    fn new(rt: &VirtualRuntime, delay_ms: u64) -> Self {
        LateReleaseStore {
            inner: MemoryLockStore::new(rt.clone()),
            rt: rt.clone(),
            delay_ms,
        }
    }
}

impl LockStore for LateReleaseStore {
    type Error = std::convert::Infallible;

    fn name(&self) -> &'static str {
        "late-release"
    }
    async fn acquire(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
    ) -> Result<Option<keel_lock::Grant>, Self::Error> {
        Ok(self.inner.acquire_sync(key, owner, ttl))
    }
    async fn release(&self, key: &Key, owner: &OwnerToken) -> Result<bool, Self::Error> {
        let released = self.inner.release_sync(key, owner);
        self.rt.sleep(self.delay_ms).await;
        Ok(released)
    }
    async fn extend(&self, key: &Key, owner: &OwnerToken, ttl: Ttl) -> Result<bool, Self::Error> {
        Ok(self.inner.extend_sync(key, owner, ttl))
    }
    async fn is_locked(&self, key: &Key) -> Result<bool, Self::Error> {
        Ok(self.inner.remaining_time_sync(key).is_some())
    }
    async fn remaining_time(&self, key: &Key) -> Result<Option<u64>, Self::Error> {
        Ok(self.inner.remaining_time_sync(key))
    }
}

/// A run on a [`LateReleaseStore`] (answers 20 ms late) that starts listening at `observe_at`;
/// meanwhile its handle releases the run's hold at 10 (answered at 30) and takes a newer hold
/// at 12 — when `twice`, through a run of its own that releases it at 14 (answered at 34),
/// followed by a third hold at 16. Answers what the first run was told.
fn told_around_a_late_release(
    keep: Option<keel_lock::KeepAlive>,
    observe_at: u64,
    twice: bool,
) -> Option<keel_lock::LossReason> {
    let rt = VirtualRuntime::new();
    let store = LateReleaseStore::new(&rt, 20);
    let lock = Lock::new(key("in-flight"), ttl(1_000), &store, rt.clone());
    let releasing: Task = Box::pin(async {
        rt.sleep(10).await;
        assert!(lock.release().await.unwrap());
    });
    let replacing: Task = Box::pin(async {
        rt.sleep(12).await;
        if twice {
            let run_rt = rt.clone();
            let run = lock.try_run_with(now(), std::future::pending(), None, |_| async move {
                run_rt.sleep(2).await;
                Ok::<_, ()>(())
            });
            run.await.unwrap().expect("ran");
            rt.sleep(2).await;
            assert!(lock.acquire(now()).await.unwrap());
        } else {
            assert!(lock.acquire(now()).await.unwrap());
        }
    });
    told_while(&rt, &lock, keep, observe_at, vec![releasing, replacing])
}

#[test]
fn a_hold_whose_release_is_in_flight_is_released_for_its_watchers_even_once_replaced() {
    // Asked with no release in flight any more.
    assert_eq!(told_around_a_late_release(None, 0, false), None);
    // Looked at before the answer: the signal read at 20, a keep-alive step at 25.
    assert_eq!(told_around_a_late_release(None, 20, false), None);
    assert_eq!(
        told_around_a_late_release(keep_alive(25, None), 0, false),
        None
    );
    // Two newer holds before the first release is answered.
    assert_eq!(told_around_a_late_release(None, 0, true), None);
}

#[test]
fn a_keep_alive_does_not_extend_a_hold_whose_release_is_in_flight() {
    let rt = VirtualRuntime::new();
    let store = LateReleaseStore::new(&rt, 20);
    let lock = Lock::new(key("letting-go"), ttl(1_000), &store, rt.clone());
    let releasing: Task = Box::pin(async {
        rt.sleep(10).await;
        // Freed at 10, answered at 30: an extend at 15 would be refused and the hold lost.
        assert!(lock.release().await.unwrap());
    });
    let keep = keep_alive(15, None);
    assert_eq!(told_while(&rt, &lock, keep, 0, vec![releasing]), None);
    assert!(
        !lock.is_expired(),
        "released, yet the handle believes it lost a hold"
    );
}
