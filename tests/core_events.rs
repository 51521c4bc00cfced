//! Lock events (`keel_lock::events`) on virtual time: what a listener set on a lock is told for
//! each run, acquire, release and extend — the grant and how it came, a refusal, a timeout, an
//! abort, a loss, a store error — and that a lock without a listener tells nothing.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::cell::RefCell;
use std::rc::Rc;

use common::{key, ttl, wait, PollingStore, ScriptedStore, Task};

use keel_lock::events::{Call, ErrorKind, GrantVia, LockEventKind, LockEventListener};
use keel_lock::lock::RunError;
use keel_lock::virtual_time::VirtualRuntime;
use keel_lock::{
    AcquireOptions, Error, Holding, Lock, LockStore, LossReason, MemoryLockStore, MultiLock,
    Operation, Runtime, Share,
};

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// One event as told, owned.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    keys: Vec<String>,
    store: &'static str,
    holding: Holding,
    call: Call,
    fence: Option<u64>,
    kind: LockEventKind,
}

type Log = Rc<RefCell<Vec<Seen>>>;

/// A listener that keeps every event it is told, and the log it keeps them in.
fn recorder() -> (LockEventListener, Log) {
    let log: Log = Rc::default();
    let sink = log.clone();
    let listener: LockEventListener = Rc::new(move |event| {
        sink.borrow_mut().push(Seen {
            keys: event.keys.iter().map(|k| k.as_str().to_owned()).collect(),
            store: event.store,
            holding: event.holding,
            call: event.call,
            fence: event.fence.map(|f| f.get()),
            kind: event.kind,
        })
    });
    (listener, log)
}

/// The calls and kinds told, in order.
fn told(log: &Log) -> Vec<(Call, LockEventKind)> {
    log.borrow().iter().map(|s| (s.call, s.kind)).collect()
}

fn now() -> AcquireOptions {
    AcquireOptions::immediately()
}

// ---------------------------------------------------------------------------------------------
// Runs
// ---------------------------------------------------------------------------------------------

#[test]
fn an_uncontended_run_is_attempted_granted_at_once_and_released_after_its_task() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let (listener, log) = recorder();
    let lock =
        Lock::new(key("invoice:42"), ttl(30_000), &store, rt.clone()).with_events(Some(listener));
    let ran = rt.block_on(lock.run(now(), |held| {
        let rt = rt.clone();
        async move {
            rt.sleep(120).await;
            held.fence
        }
    }));
    let fence = ran.unwrap().unwrap().map(|f| f.get());
    assert_eq!(fence, Some(1));
    let seen = log.borrow().clone();
    assert_eq!(seen.len(), 3, "{seen:?}");
    for event in &seen {
        assert_eq!(event.keys, ["invoice:42"]);
        assert_eq!(event.store, "memory");
        assert_eq!(event.holding, Holding::Exclusive);
        assert_eq!(event.call, Call::Run);
    }
    assert_eq!(
        seen.iter().map(|s| (s.fence, s.kind)).collect::<Vec<_>>(),
        [
            (None, LockEventKind::Attempted { timeout_ms: 0 }),
            (
                fence,
                LockEventKind::Granted {
                    waited_ms: 0,
                    via: GrantVia::Immediate
                }
            ),
            (
                fence,
                LockEventKind::Released {
                    held_ms: Some(120),
                    task_failed: false
                }
            ),
        ]
    );
}

#[test]
fn a_run_whose_task_fails_is_released_with_the_failure_told() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let (listener, log) = recorder();
    let lock = Lock::new(key("k"), ttl(1_000), &store, rt.clone()).with_events(Some(listener));
    let ran = rt.block_on(lock.try_run(now(), |_| async { Err::<(), _>("declined") }));
    assert!(matches!(ran, Err(RunError::Task("declined"))));
    assert_eq!(
        told(&log).last(),
        Some(&(
            Call::Run,
            LockEventKind::Released {
                held_ms: Some(0),
                task_failed: true
            }
        ))
    );
}

#[test]
fn a_contended_run_on_the_memory_store_is_granted_by_hand_over_after_its_wait() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    assert!(store.hands_over());
    let holder = Lock::new(key("k"), ttl(10_000), &store, rt.clone());
    assert!(rt.block_on(holder.acquire(now())).unwrap());
    let (listener, log) = recorder();
    let waiter = Lock::new(key("k"), ttl(10_000), &store, rt.clone()).with_events(Some(listener));
    let tasks: Vec<Task> = vec![
        Box::pin(async {
            let ran = waiter.run(wait(5_000, 50), |_| async {}).await;
            assert_eq!(ran.unwrap(), Some(()));
        }),
        Box::pin(async {
            rt.sleep(300).await;
            assert!(holder.release().await.unwrap());
        }),
    ];
    rt.join_all(tasks);
    assert_eq!(
        told(&log),
        [
            (Call::Run, LockEventKind::Attempted { timeout_ms: 5_000 }),
            (
                Call::Run,
                LockEventKind::Granted {
                    waited_ms: 300,
                    via: GrantVia::HandOver
                }
            ),
            (
                Call::Run,
                LockEventKind::Released {
                    held_ms: Some(0),
                    task_failed: false
                }
            ),
        ]
    );
    assert_eq!(log.borrow()[1].fence, Some(2), "the second hold's fence");
}

#[test]
fn a_contended_acquire_on_a_store_that_does_not_hand_over_is_granted_by_polling() {
    let rt = VirtualRuntime::new();
    let memory = MemoryLockStore::new(rt.clone());
    let store = PollingStore::new(&rt, &memory);
    assert!(!store.hands_over());
    let holder = Lock::new(key("k"), ttl(10_000), &store, rt.clone());
    assert!(rt.block_on(holder.acquire(now())).unwrap());
    let (listener, log) = recorder();
    let waiter = Lock::new(key("k"), ttl(10_000), &store, rt.clone()).with_events(Some(listener));
    let tasks: Vec<Task> = vec![
        Box::pin(async {
            assert!(waiter.acquire(wait(5_000, 50)).await.unwrap());
        }),
        Box::pin(async {
            rt.sleep(120).await;
            assert!(holder.release().await.unwrap());
        }),
    ];
    rt.join_all(tasks);
    // Attempts at 0, 50, 100 are refused; the one at 150 finds the key free.
    assert_eq!(
        told(&log),
        [
            (
                Call::Acquire,
                LockEventKind::Attempted { timeout_ms: 5_000 }
            ),
            (
                Call::Acquire,
                LockEventKind::Granted {
                    waited_ms: 150,
                    via: GrantVia::Poll
                }
            ),
        ]
    );
    assert_eq!(log.borrow()[0].store, "polling");
}

#[test]
fn a_run_refused_at_once_never_runs_its_task_and_says_refused() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let holder = Lock::new(key("k"), ttl(10_000), &store, rt.clone());
    assert!(rt.block_on(holder.acquire(now())).unwrap());
    let (listener, log) = recorder();
    let other = Lock::new(key("k"), ttl(10_000), &store, rt.clone()).with_events(Some(listener));
    assert_eq!(rt.block_on(other.run(now(), |_| async {})).unwrap(), None);
    assert_eq!(
        told(&log),
        [
            (Call::Run, LockEventKind::Attempted { timeout_ms: 0 }),
            (Call::Run, LockEventKind::Refused { waited_ms: 0 }),
        ]
    );
}

#[test]
fn an_acquire_whose_timeout_is_spent_says_timed_out_after_the_timeout() {
    for polling in [false, true] {
        let rt = VirtualRuntime::new();
        let (memory, polled) = (
            MemoryLockStore::new(rt.clone()),
            MemoryLockStore::new(rt.clone()),
        );
        let polls = PollingStore::new(&rt, &polled);
        let (listener, log) = recorder();
        let outcome = if polling {
            let holder = Lock::new(key("k"), ttl(10_000), &polls, rt.clone());
            assert!(rt.block_on(holder.acquire(now())).unwrap());
            let waiter =
                Lock::new(key("k"), ttl(10_000), &polls, rt.clone()).with_events(Some(listener));
            rt.block_on(waiter.acquire(wait(200, 50))).unwrap()
        } else {
            let holder = Lock::new(key("k"), ttl(10_000), &memory, rt.clone());
            assert!(rt.block_on(holder.acquire(now())).unwrap());
            let waiter =
                Lock::new(key("k"), ttl(10_000), &memory, rt.clone()).with_events(Some(listener));
            rt.block_on(waiter.acquire(wait(200, 50))).unwrap()
        };
        assert!(!outcome);
        assert_eq!(
            told(&log),
            [
                (Call::Acquire, LockEventKind::Attempted { timeout_ms: 200 }),
                (Call::Acquire, LockEventKind::TimedOut { waited_ms: 200 }),
            ],
            "polling: {polling}"
        );
    }
}

#[test]
fn an_acquire_cancelled_while_waiting_says_aborted() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let holder = Lock::new(key("k"), ttl(10_000), &store, rt.clone());
    assert!(rt.block_on(holder.acquire(now())).unwrap());
    let (listener, log) = recorder();
    let waiter = Lock::new(key("k"), ttl(10_000), &store, rt.clone()).with_events(Some(listener));
    let aborted = rt.block_on(waiter.acquire_until(wait(5_000, 50), rt.sleep(70)));
    assert!(matches!(aborted, Err(Error::Aborted)));
    assert_eq!(
        told(&log),
        [
            (
                Call::Acquire,
                LockEventKind::Attempted { timeout_ms: 5_000 }
            ),
            (Call::Acquire, LockEventKind::Aborted { waited_ms: 70 }),
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Loss
// ---------------------------------------------------------------------------------------------

#[test]
fn an_extend_after_the_local_deadline_says_lost_as_expired() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let (listener, log) = recorder();
    let lock = Lock::new(key("k"), ttl(1_000), &store, rt.clone()).with_events(Some(listener));
    rt.block_on(async {
        // Before any hold, there is nothing to lose: the extend just fails.
        assert!(matches!(
            lock.extend(None).await,
            Err(Error::NotHeld { .. })
        ));
        assert!(lock.acquire(now()).await.unwrap());
        lock.extend(None).await.unwrap();
        rt.sleep(1_000).await;
        assert!(matches!(
            lock.extend(None).await,
            Err(Error::NotHeld { .. })
        ));
    });
    let seen = log.borrow().clone();
    assert_eq!(
        seen.iter()
            .map(|s| (s.call, s.fence, s.kind))
            .collect::<Vec<_>>(),
        [
            (
                Call::Extend,
                None,
                LockEventKind::Failed {
                    error: ErrorKind::NotHeld,
                    waited_ms: None
                }
            ),
            (
                Call::Acquire,
                None,
                LockEventKind::Attempted { timeout_ms: 0 }
            ),
            (
                Call::Acquire,
                Some(1),
                LockEventKind::Granted {
                    waited_ms: 0,
                    via: GrantVia::Immediate
                }
            ),
            (Call::Extend, Some(1), LockEventKind::Extended),
            (
                Call::Extend,
                Some(1),
                LockEventKind::Lost {
                    reason: LossReason::Expired
                }
            ),
        ]
    );
}

#[test]
fn an_extend_the_store_refuses_says_lost_as_refused() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let (listener, log) = recorder();
    let lock = Lock::new(key("k"), ttl(1_000), &store, rt.clone()).with_events(Some(listener));
    rt.block_on(async {
        assert!(lock.acquire(now()).await.unwrap());
        assert!(store.force_release_sync(&key("k")));
        assert!(lock.extend(None).await.is_err());
    });
    assert_eq!(
        told(&log).last(),
        Some(&(
            Call::Extend,
            LockEventKind::Lost {
                reason: LossReason::Refused
            }
        ))
    );
}

#[test]
fn a_run_whose_watcher_finds_the_hold_expired_says_lost_then_release_refused() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let (listener, log) = recorder();
    let lock = Lock::new(key("k"), ttl(500), &store, rt.clone()).with_events(Some(listener));
    let reason = rt.block_on(lock.run(now(), |held| async move { held.when_lost().await }));
    assert_eq!(reason.unwrap(), Some(LossReason::Expired));
    let seen = log.borrow().clone();
    assert_eq!(
        seen[2..]
            .iter()
            .map(|s| (s.call, s.fence, s.kind))
            .collect::<Vec<_>>(),
        [
            (
                Call::Run,
                Some(1),
                LockEventKind::Lost {
                    reason: LossReason::Expired
                }
            ),
            (Call::Run, Some(1), LockEventKind::ReleaseRefused),
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Release, and store errors
// ---------------------------------------------------------------------------------------------

#[test]
fn a_release_says_released_and_a_second_one_release_refused() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let (listener, log) = recorder();
    let lock = Lock::new(key("k"), ttl(1_000), &store, rt.clone()).with_events(Some(listener));
    rt.block_on(async {
        assert!(lock.acquire(now()).await.unwrap());
        assert!(lock.release().await.unwrap());
        assert!(!lock.release().await.unwrap());
    });
    let seen = log.borrow().clone();
    assert_eq!(
        seen[2..]
            .iter()
            .map(|s| (s.call, s.fence, s.kind))
            .collect::<Vec<_>>(),
        [
            (
                Call::Release,
                Some(1),
                LockEventKind::Released {
                    held_ms: None,
                    task_failed: false
                }
            ),
            (Call::Release, None, LockEventKind::ReleaseRefused),
        ]
    );
}

#[test]
fn store_errors_say_failed_with_the_operation_that_failed() {
    let rt = VirtualRuntime::new();
    let store = ScriptedStore::new(&rt);
    let (listener, log) = recorder();
    let lock = Lock::new(key("k"), ttl(1_000), &store, rt.clone()).with_events(Some(listener));
    rt.block_on(async {
        store.fail_on.set(Some(Operation::Acquire));
        assert!(matches!(
            lock.run(now(), |_| async {}).await,
            Err(Error::Store { .. })
        ));
        store.fail_on.set(Some(Operation::Release));
        assert!(matches!(
            lock.run(now(), |_| async {}).await,
            Err(Error::Store { .. })
        ));
        store.fail_on.set(Some(Operation::Extend));
        assert!(matches!(lock.extend(None).await, Err(Error::Store { .. })));
    });
    let store_failed = |operation| LockEventKind::Failed {
        error: ErrorKind::Store { operation },
        waited_ms: None,
    };
    assert_eq!(
        told(&log),
        [
            (Call::Run, LockEventKind::Attempted { timeout_ms: 0 }),
            (
                Call::Run,
                LockEventKind::Failed {
                    error: ErrorKind::Store {
                        operation: Operation::Acquire
                    },
                    waited_ms: Some(0)
                }
            ),
            (Call::Run, LockEventKind::Attempted { timeout_ms: 0 }),
            (
                Call::Run,
                LockEventKind::Granted {
                    waited_ms: 0,
                    via: GrantVia::Immediate
                }
            ),
            (Call::Run, store_failed(Operation::Release)),
            (Call::Extend, store_failed(Operation::Extend)),
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Without a listener; shared holds; sets of keys
// ---------------------------------------------------------------------------------------------

#[test]
fn locks_without_a_listener_tell_nothing_and_a_listener_taken_away_hears_no_more() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let (listener, log) = recorder();
    let told_lock =
        Lock::new(key("told"), ttl(1_000), &store, rt.clone()).with_events(Some(listener.clone()));
    let quiet = Lock::new(key("quiet"), ttl(1_000), &store, rt.clone());
    let silenced = Lock::new(key("silenced"), ttl(1_000), &store, rt.clone())
        .with_events(Some(listener.clone()))
        .with_events(None);
    assert!(silenced.events().is_none());
    rt.block_on(async {
        for lock in [&quiet, &silenced, &told_lock] {
            lock.run(now(), |_| async {}).await.unwrap();
            assert!(lock.acquire(now()).await.unwrap());
            lock.extend(None).await.unwrap();
            assert!(lock.release().await.unwrap());
        }
    });
    let keys: Vec<_> = log.borrow().iter().map(|s| s.keys.clone()).collect();
    assert_eq!(keys.len(), 7, "run: 3, acquire: 2, extend: 1, release: 1");
    assert!(keys.iter().all(|k| k == &["told"]), "{keys:?}");
    // The listener is shared, not copied: the test's, and the told lock's.
    assert_eq!(Rc::strong_count(&listener), 2);
}

#[test]
fn a_shared_hold_says_how_it_holds() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let (listener, log) = recorder();
    let share = Share::new(1, 3).unwrap();
    let permit = Lock::new(key("api"), ttl(1_000), &store, rt.clone())
        .holding(Holding::Shared(share))
        .with_events(Some(listener));
    rt.block_on(permit.run(now(), |_| async {})).unwrap();
    let seen = log.borrow().clone();
    assert_eq!(seen.len(), 3);
    assert!(seen.iter().all(|s| s.holding == Holding::Shared(share)));
}

#[test]
fn a_set_of_keys_is_told_once_with_every_key_and_its_keys_alone_tell_nothing() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let (listener, log) = recorder();
    let keys = [key("b"), key("a")];
    let set = MultiLock::new(keys, ttl(1_000), &store, rt.clone())
        .unwrap()
        .with_events(Some(listener));
    // Key "b" is held for a while: the set waits for it, the key after "a".
    let holder = Lock::new(key("b"), ttl(1_000), &store, rt.clone());
    assert!(rt.block_on(holder.acquire(now())).unwrap());
    let tasks: Vec<Task> = vec![
        Box::pin(async {
            let ran = set.run(wait(5_000, 50), |_| async {}).await;
            assert_eq!(ran.unwrap(), Some(()));
        }),
        Box::pin(async {
            rt.sleep(40).await;
            assert!(holder.release().await.unwrap());
        }),
    ];
    rt.join_all(tasks);
    rt.block_on(async {
        assert!(set.acquire(now()).await.unwrap());
        set.extend(None).await.unwrap();
        assert!(set.release().await.unwrap());
    });
    let seen = log.borrow().clone();
    assert!(seen
        .iter()
        .all(|s| s.keys == ["a", "b"] && s.fence.is_none()));
    assert_eq!(
        told(&log),
        [
            (Call::Run, LockEventKind::Attempted { timeout_ms: 5_000 }),
            (
                Call::Run,
                LockEventKind::Granted {
                    waited_ms: 40,
                    via: GrantVia::HandOver
                }
            ),
            (
                Call::Run,
                LockEventKind::Released {
                    held_ms: Some(0),
                    task_failed: false
                }
            ),
            (Call::Acquire, LockEventKind::Attempted { timeout_ms: 0 }),
            (
                Call::Acquire,
                LockEventKind::Granted {
                    waited_ms: 0,
                    via: GrantVia::Immediate
                }
            ),
            (Call::Extend, LockEventKind::Extended),
            (
                Call::Release,
                LockEventKind::Released {
                    held_ms: None,
                    task_failed: false
                }
            ),
        ]
    );
}

#[test]
fn a_set_extended_after_a_key_expired_says_lost_as_expired() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let (listener, log) = recorder();
    let set = MultiLock::new([key("a"), key("b")], ttl(500), &store, rt.clone())
        .unwrap()
        .with_events(Some(listener));
    rt.block_on(async {
        assert!(set.acquire(now()).await.unwrap());
        rt.sleep(500).await;
        assert!(matches!(set.extend(None).await, Err(Error::NotHeld { .. })));
    });
    assert_eq!(
        told(&log).last(),
        Some(&(
            Call::Extend,
            LockEventKind::Lost {
                reason: LossReason::Expired
            }
        ))
    );
}
