//! Several keys at once (`MultiLock`) on the memory store and on a store that only polls: all
//! or nothing, no deadlock for overlapping sets taken in any order, a fence per key, losing any
//! key is losing the lock, and the bad key sets refused. Virtual time makes every interleaving
//! exact.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use common::{key, ttl, wait, PollingStore, Task};

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::convert::Infallible;

use keel_lock::virtual_time::VirtualRuntime;
use keel_lock::{
    AcquireOptions, Error, Holding, InputError, Key, Lock, LockStore, MemoryLockStore, MultiLock,
    Runtime, Share,
};

fn keys(names: &[&str]) -> Vec<Key> {
    names.iter().map(|n| key(n)).collect()
}

/// Each key's holders at this moment, to see that no two overlap.
#[derive(Default)]
struct Inside(RefCell<HashMap<String, u32>>);

impl Inside {
    fn enter(&self, names: &[&str]) {
        for n in names {
            let mut map = self.0.borrow_mut();
            let count = map.entry(n.to_string()).or_default();
            assert_eq!(*count, 0, "two holders of {n} at once");
            *count += 1;
        }
    }
    fn leave(&self, names: &[&str]) {
        for n in names {
            *self.0.borrow_mut().get_mut(*n).unwrap() -= 1;
        }
    }
}

/// `callers` tasks, each running `rounds` times on an overlapping set of two or three of five
/// keys, in every order; all must finish, never two holders of a key at once.
fn overlapping_sets_all_finish<S: LockStore<Error = Infallible> + Clone>(
    rt: &VirtualRuntime,
    store: S,
) {
    let sets: [&[&str]; 6] = [
        &["a", "b"],
        &["b", "a"],
        &["b", "c", "d"],
        &["d", "c", "a"],
        &["e", "a"],
        &["c", "e", "b"],
    ];
    let inside = Inside::default();
    let runs = Cell::new(0);
    let tasks: Vec<Task> = (0..12)
        .map(|i| {
            let set = sets[i % sets.len()];
            let lock = MultiLock::new(keys(set), ttl(60_000), store.clone(), rt.clone()).unwrap();
            let (rt, inside, runs) = (rt.clone(), &inside, &runs);
            Box::pin(async move {
                for _ in 0..5 {
                    let ran = lock
                        .run(wait(600_000, 7), |_| async {
                            inside.enter(set);
                            rt.sleep(3).await;
                            inside.leave(set);
                        })
                        .await
                        .unwrap();
                    assert!(ran.is_some(), "a caller timed out: {set:?}");
                    runs.set(runs.get() + 1);
                }
            }) as Task
        })
        .collect();
    rt.join_all(tasks);
    assert_eq!(runs.get(), 60);
}

#[test]
fn overlapping_sets_in_any_order_all_finish_on_a_store_that_hands_over() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    overlapping_sets_all_finish(&rt, &store);
}

#[test]
fn overlapping_sets_in_any_order_all_finish_on_a_polling_store() {
    let rt = VirtualRuntime::new();
    let inner = MemoryLockStore::new(rt.clone());
    let store = PollingStore::new(&rt, &inner);
    overlapping_sets_all_finish(&rt, &store);
}

#[test]
fn a_refused_acquisition_leaves_no_key_held() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let other = Lock::new(key("c"), ttl(10_000), &store, rt.clone());
    let multi =
        MultiLock::new(keys(&["d", "a", "c", "b"]), ttl(10_000), &store, rt.clone()).unwrap();
    rt.block_on(async {
        assert!(other.acquire(AcquireOptions::immediately()).await.unwrap());
        // a and b are taken before c is refused; both are freed before the answer.
        assert!(!multi.acquire(AcquireOptions::immediately()).await.unwrap());
        for k in ["a", "b", "d"] {
            assert!(!store.is_locked(&key(k)).await.unwrap(), "{k} left held");
        }
        assert!(multi.fences().is_none());
        // Timed out waiting for c: the same.
        assert!(!multi.acquire(wait(500, 10)).await.unwrap());
        for k in ["a", "b", "d"] {
            assert!(
                !store.is_locked(&key(k)).await.unwrap(),
                "{k} left held after a timeout"
            );
        }
        // Once c is free, all four are taken, each with its own fence.
        let last_c_fence = other.fence().unwrap();
        assert!(other.release().await.unwrap());
        assert!(multi.acquire(AcquireOptions::immediately()).await.unwrap());
        let fences = multi.fences().unwrap();
        let names: Vec<_> = fences.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "d"]);
        let c_fence = fences[2].1;
        assert!(
            c_fence > last_c_fence,
            "c's fence rises over its last holder's"
        );
        assert!(multi.release().await.unwrap());
        for k in ["a", "b", "c", "d"] {
            assert!(!store.is_locked(&key(k)).await.unwrap());
        }
        // Released: a second release answers false.
        assert!(!multi.release().await.unwrap());
    });
}

#[test]
fn an_abort_while_waiting_frees_the_keys_taken() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let holder = Lock::new(key("b"), ttl(10_000), &store, rt.clone());
    let multi = MultiLock::new(keys(&["a", "b"]), ttl(10_000), &store, rt.clone()).unwrap();
    rt.block_on(async {
        assert!(holder.acquire(AcquireOptions::immediately()).await.unwrap());
        let stop = rt.sleep(100);
        let outcome = multi.acquire_until(wait(5_000, 10), stop).await;
        assert!(matches!(outcome, Err(Error::Aborted)), "{outcome:?}");
        assert!(!store.is_locked(&key("a")).await.unwrap(), "a left held");
        assert!(holder.release().await.unwrap());
    });
}

#[test]
fn losing_any_key_is_losing_the_lock() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let multi = MultiLock::new(keys(&["x", "y"]), ttl(1_000), &store, rt.clone()).unwrap();
    rt.block_on(async {
        assert!(multi.acquire(AcquireOptions::immediately()).await.unwrap());
        // Someone frees y behind the lock's back (an expiry, an operator).
        assert!(store.force_release(&key("y")).await.unwrap() == keel_lock::ForceRelease::Freed);
        let extended = multi.extend(None).await;
        assert!(
            matches!(extended, Err(Error::NotHeld { .. })),
            "{extended:?}"
        );
        // x was freed with it: nothing is left half-held.
        assert!(!store.is_locked(&key("x")).await.unwrap());
    });
    // In run(), the loss signal fires when any key's hold runs out.
    let multi = MultiLock::new(keys(&["p", "q"]), ttl(1_000), &store, rt.clone()).unwrap();
    let lost = rt.block_on(multi.run(AcquireOptions::immediately(), |held| {
        let rt = rt.clone();
        async move {
            assert!(
                held.fence.is_none(),
                "a multi-key lock has a fence per key, none for the set"
            );
            assert_eq!(held.lost(), None, "lost at once");
            rt.sleep(5_000).await;
            held.lost()
        }
    }));
    assert_eq!(lost.unwrap().unwrap(), Some(keel_lock::LossReason::Expired));
}

#[test]
fn keep_alive_extends_every_key() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let multi = MultiLock::new(keys(&["m", "n", "o"]), ttl(1_000), &store, rt.clone()).unwrap();
    let keep = keel_lock::KeepAlive {
        every_ms: Some(300),
        max_hold_ms: None,
    };
    let out = rt.block_on(multi.try_run_with(
        AcquireOptions::immediately(),
        std::future::pending(),
        Some(keep),
        |held| {
            let (rt, store) = (rt.clone(), &store);
            async move {
                rt.sleep(4_000).await;
                for k in ["m", "n", "o"] {
                    assert!(store.is_locked(&key(k)).await.unwrap(), "{k} ran out");
                }
                Ok::<_, Infallible>(held.lost())
            }
        },
    ));
    assert_eq!(out.unwrap(), Some(None));
    rt.block_on(async {
        for k in ["m", "n", "o"] {
            assert!(!store.is_locked(&key(k)).await.unwrap(), "{k} not released");
        }
    });
}

#[test]
fn a_key_that_ran_out_while_a_later_one_was_waited_for_is_taken_again() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    // b is held for 3 s; the multi-lock's keys last 1 s: a runs out while b is waited for, so
    // a is taken again once b comes free, and the set is held whole.
    let holder = Lock::new(key("b"), ttl(3_000), &store, rt.clone());
    let multi = MultiLock::new(keys(&["a", "b"]), ttl(1_000), &store, rt.clone()).unwrap();
    rt.block_on(async {
        assert!(holder.acquire(AcquireOptions::immediately()).await.unwrap());
        assert!(multi.acquire(wait(10_000, 10)).await.unwrap());
        assert!(!multi.is_expired());
        assert!(store.is_locked(&key("a")).await.unwrap());
        assert!(multi.release().await.unwrap());
    });
}

#[test]
fn read_locks_over_several_keys_share_and_a_writer_waits() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let read = || {
        MultiLock::new(keys(&["r1", "r2"]), ttl(10_000), &store, rt.clone())
            .unwrap()
            .holding(Holding::Shared(Share::READ))
    };
    let (a, b) = (read(), read());
    let writer = MultiLock::new(keys(&["r2", "r3"]), ttl(10_000), &store, rt.clone()).unwrap();
    rt.block_on(async {
        assert!(a.acquire(AcquireOptions::immediately()).await.unwrap());
        assert!(b.acquire(AcquireOptions::immediately()).await.unwrap());
        assert!(!writer.acquire(AcquireOptions::immediately()).await.unwrap());
        assert!(
            !store.is_locked(&key("r3")).await.unwrap(),
            "r3 left held by a refused writer"
        );
        assert!(a.release().await.unwrap());
        assert!(b.release().await.unwrap());
        assert!(writer.acquire(AcquireOptions::immediately()).await.unwrap());
        assert!(writer.release().await.unwrap());
    });
}

#[test]
fn bad_key_sets_are_refused() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let make = |ks: Vec<Key>| MultiLock::new(ks, ttl(1_000), &store, rt.clone()).err();
    let reason = |e: Option<InputError>| match e {
        Some(InputError::InvalidKeySet { reason }) => reason,
        other => panic!("expected InvalidKeySet, got {other:?}"),
    };
    assert_eq!(reason(make(vec![])), "no keys");
    assert_eq!(reason(make(keys(&["a", "b", "a"]))), "a key given twice");
    let many: Vec<Key> = (0..=keel_lock::lock::MAX_KEYS)
        .map(|i| key(&format!("k{i}")))
        .collect();
    assert_eq!(reason(make(many)), "more than 64 keys");
    let most: Vec<Key> = (0..keel_lock::lock::MAX_KEYS)
        .map(|i| key(&format!("k{i}")))
        .collect();
    assert!(make(most).is_none());
    assert!(InputError::InvalidKeySet { reason: "no keys" }
        .to_string()
        .contains("1 to 64 distinct keys"));
}

#[test]
fn serialize_and_restore_carry_every_key() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let multi = MultiLock::new(keys(&["s2", "s1", "s3"]), ttl(10_000), &store, rt.clone()).unwrap();
    rt.block_on(async {
        assert!(matches!(multi.serialize(), Err(Error::NotHeld { .. })));
        assert!(multi.acquire(AcquireOptions::immediately()).await.unwrap());
        let text = multi.serialize().unwrap();
        assert!(text.starts_with("keel-lock-set:1:3:"), "{text}");
        let back = MultiLock::restore(&text, &store, rt.clone()).unwrap();
        assert_eq!(back.fences(), multi.fences());
        let names: Vec<_> = back.keys().map(Key::as_str).collect();
        assert_eq!(names, ["s1", "s2", "s3"]);
        back.extend(None).await.unwrap();
        assert!(back.release().await.unwrap());
        for k in ["s1", "s2", "s3"] {
            assert!(!store.is_locked(&key(k)).await.unwrap());
        }
        // Cut short, another count, another prefix: refused.
        let cut = &text[..text.rfind(',').unwrap()];
        for bad in [
            cut.to_owned(),
            text.replacen(":3:", ":2:", 1),
            text.replacen("set:1", "set:2", 1),
        ] {
            assert!(
                matches!(
                    MultiLock::restore(&bad, &store, rt.clone()),
                    Err(InputError::MalformedSerializedLock { .. })
                ),
                "{bad}"
            );
        }
    });
}
