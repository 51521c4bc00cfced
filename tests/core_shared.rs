//! Shared holds on the memory store: semaphore permits and read-write locks — the limit,
//! weights, per-permit expiry and ownership, the FIFO that nobody passes, limit mismatches, and
//! a store without shared holds refusing them. Virtual time makes every interleaving exact.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use common::{key, ttl, PollingStore, Task};

use std::cell::{Cell, RefCell};

use keel_lock::share::MAX_LIMIT;
use keel_lock::virtual_time::VirtualRuntime;
use keel_lock::{
    AcquireOptions, Error, Holding, Lock, LockStore, MemoryLockStore, OwnerToken, Runtime, Share,
    SharedGrant,
};

fn permits(weight: u32, limit: u32) -> Holding {
    Holding::Shared(Share::new(weight, limit).unwrap())
}

const READ: Holding = Holding::Shared(Share::READ);

fn immediately() -> AcquireOptions {
    AcquireOptions::immediately()
}

fn granted(answer: SharedGrant) -> bool {
    matches!(answer, SharedGrant::Granted(_))
}

#[test]
fn a_semaphore_grants_at_most_its_limit_in_weight() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let (k, t) = (key("api"), ttl(1_000));
    let share = |w| Share::new(w, 3).unwrap();
    let owners: Vec<_> = (0..4).map(|_| OwnerToken::mint().unwrap()).collect();
    assert!(granted(store.acquire_shared_sync(
        &k,
        &owners[0],
        t,
        share(2)
    )));
    assert!(!granted(store.acquire_shared_sync(
        &k,
        &owners[1],
        t,
        share(2)
    )));
    assert!(granted(store.acquire_shared_sync(
        &k,
        &owners[1],
        t,
        share(1)
    )));
    assert_eq!(
        store.acquire_shared_sync(&k, &owners[2], t, share(1)),
        SharedGrant::Busy
    );
    // One permit back: one fits again.
    assert!(store.release_sync(&k, &owners[1]));
    assert!(granted(store.acquire_shared_sync(
        &k,
        &owners[2],
        t,
        share(1)
    )));
    // A lock on the key waits for every permit; permits wait for the lock.
    assert!(store.acquire_sync(&k, &owners[3], t).is_none());
    assert!(store.release_sync(&k, &owners[0]));
    assert!(store.release_sync(&k, &owners[2]));
    assert!(store.acquire_sync(&k, &owners[3], t).is_some());
    assert_eq!(
        store.acquire_shared_sync(&k, &owners[0], t, share(1)),
        SharedGrant::Busy
    );
}

#[test]
fn each_permit_is_its_own_lease() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let k = key("api");
    let (a, b, c) = (
        OwnerToken::mint().unwrap(),
        OwnerToken::mint().unwrap(),
        OwnerToken::mint().unwrap(),
    );
    let one = Share::new(1, 2).unwrap();
    assert!(granted(store.acquire_shared_sync(&k, &a, ttl(100), one)));
    assert!(granted(store.acquire_shared_sync(&k, &b, ttl(1_000), one)));
    // A stranger can neither release nor extend a permit.
    assert!(!store.release_sync(&k, &c));
    assert!(!store.extend_sync(&k, &c, ttl(5_000)));
    assert_eq!(
        store.remaining_time_sync(&k),
        Some(1_000),
        "until the last permit expires"
    );
    rt.advance(100);
    // a's permit expired (its holder crashed); b's stays, and a's place is free again.
    assert!(!store.extend_sync(&k, &a, ttl(5_000)));
    assert!(store.extend_sync(&k, &b, ttl(2_000)));
    assert!(granted(store.acquire_shared_sync(&k, &c, ttl(100), one)));
    assert_eq!(
        store.acquire_shared_sync(&k, &a, ttl(100), one),
        SharedGrant::Busy
    );
    rt.advance(2_000);
    assert_eq!(store.remaining_time_sync(&k), None);
    assert_eq!(store.purge_expired(), 1);
    assert_eq!(
        store.stored_shared_keys(),
        0,
        "expired permits left a row behind"
    );
}

#[test]
fn fences_increase_over_every_grant_of_a_key() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let k = key("k");
    let mut last = None;
    for holding in [READ, READ, Holding::Exclusive, permits(1, 4), permits(2, 4)] {
        let lock = Lock::new(k.clone(), ttl(1_000), &store, rt.clone()).holding(holding);
        if holding == Holding::Exclusive {
            // The readers hold the key: the writer comes after them.
            let readers_gone = store.force_release_sync(&k);
            assert!(readers_gone);
        }
        assert!(
            rt.block_on(lock.acquire(immediately())).unwrap(),
            "{holding:?}"
        );
        assert!(lock.fence() > last, "{holding:?} got no higher fence");
        last = lock.fence();
        if holding == Holding::Exclusive {
            rt.block_on(lock.release()).unwrap();
        }
    }
}

#[test]
fn readers_share_and_a_writer_excludes() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let lock = |h| Lock::new(key("doc"), ttl(1_000), &store, rt.clone()).holding(h);
    let (r1, r2, w) = (lock(READ), lock(READ), lock(Holding::Exclusive));
    rt.block_on(async {
        assert!(r1.acquire(immediately()).await.unwrap());
        assert!(r2.acquire(immediately()).await.unwrap());
        assert!(!w.acquire(immediately()).await.unwrap());
        assert!(store.is_locked(&key("doc")).await.unwrap());
        r1.release().await.unwrap();
        assert!(
            !w.acquire(immediately()).await.unwrap(),
            "one reader is still in"
        );
        r2.release().await.unwrap();
        assert!(w.acquire(immediately()).await.unwrap());
        assert!(!r1.acquire(immediately()).await.unwrap());
    });
}

#[test]
fn two_limits_on_one_key_are_refused_with_a_clear_error() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let lock = |h| Lock::new(key("k"), ttl(1_000), &store, rt.clone()).holding(h);
    let three = lock(permits(1, 3));
    rt.block_on(three.acquire(immediately())).unwrap();
    for other in [permits(1, 4), READ] {
        match rt.block_on(lock(other).acquire(common::wait(1_000, 50))) {
            Err(Error::LimitMismatch { key, held, asked }) => {
                assert_eq!((key.as_str(), held), ("k", 3));
                assert_eq!(asked, other.share().unwrap().limit());
            }
            other => panic!("expected LimitMismatch, got {other:?}"),
        }
    }
    // Once the key is free, another limit is fine.
    rt.block_on(three.release()).unwrap();
    assert!(rt
        .block_on(lock(permits(1, 4)).acquire(immediately()))
        .unwrap());
}

#[test]
fn a_store_without_shared_holds_refuses_them_instead_of_granting_a_lock() {
    let rt = VirtualRuntime::new();
    let memory = MemoryLockStore::new(rt.clone());
    // The trait's defaults for everything but the five required operations: no shared holds.
    let store = PollingStore::new(&rt, &memory);
    let reader = Lock::new(key("k"), ttl(1_000), &store, rt.clone()).holding(READ);
    match rt.block_on(reader.acquire(immediately())) {
        Err(Error::Unsupported { store, operation }) => {
            assert_eq!(store, "polling");
            assert_eq!(operation.to_string(), "acquire_shared");
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
    assert_eq!(memory.stored_rows(), 0, "something was granted");
}

/// A caller that arrives on key "k" `arrive_ms` after the start, waits its turn, holds for
/// `hold_ms`, and records (name, time in) in `order`.
#[allow(clippy::too_many_arguments)]
fn waiter<'a>(
    store: &'a MemoryLockStore<VirtualRuntime>,
    rt: &VirtualRuntime,
    name: &'static str,
    holding: Holding,
    arrive_ms: u64,
    hold_ms: u64,
    order: &'a RefCell<Vec<(&'static str, u64)>>,
    weight_in: &'a Cell<u64>,
) -> Task<'a> {
    let rt = rt.clone();
    Box::pin(async move {
        rt.sleep(arrive_ms).await;
        let l = Lock::new(key("k"), ttl(10_000), store, rt.clone()).holding(holding);
        // A writer weighs more than any limit: it fits only alone.
        let (w, limit) = holding
            .share()
            .map_or((u64::from(MAX_LIMIT) + 1, u64::from(MAX_LIMIT) + 1), |s| {
                (u64::from(s.weight()), u64::from(s.limit()))
            });
        let ran = l
            .run(common::wait(60_000, 50), |_| async {
                assert!(
                    weight_in.get() + w <= limit,
                    "{name} went in beside too much"
                );
                weight_in.set(weight_in.get() + w);
                order.borrow_mut().push((name, rt.now_ms()));
                rt.sleep(hold_ms).await;
                weight_in.set(weight_in.get() - w);
            })
            .await
            .unwrap();
        assert!(ran.is_some(), "{name} timed out");
    })
}

#[test]
fn a_heavy_waiter_is_not_starved_by_lighter_ones_behind_it() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let (order, inside) = (RefCell::new(Vec::new()), Cell::new(0));
    let start = rt.now_ms();
    let mut tasks = Vec::new();
    // Three singles hold 3 of 4; "heavy" wants 3 and queues; "light" arrives after it and
    // would fit beside the singles, but must not pass it.
    for (i, name) in ["s1", "s2", "s3"].into_iter().enumerate() {
        tasks.push(waiter(
            &store,
            &rt,
            name,
            permits(1, 4),
            0,
            100 + 10 * i as u64,
            &order,
            &inside,
        ));
    }
    tasks.push(waiter(
        &store,
        &rt,
        "heavy",
        permits(3, 4),
        5,
        50,
        &order,
        &inside,
    ));
    tasks.push(waiter(
        &store,
        &rt,
        "light",
        permits(1, 4),
        6,
        50,
        &order,
        &inside,
    ));
    rt.join_all(tasks);
    let order = order.into_inner();
    let at = |n| order.iter().find(|(name, _)| *name == n).unwrap().1 - start;
    // heavy goes in when two singles are gone (s2 at 110): 1 + 3 = 4. light fits beside it.
    assert_eq!(at("heavy"), 110, "{order:?}");
    assert!(at("light") >= at("heavy"), "light passed heavy: {order:?}");
}

#[test]
fn a_queued_writer_is_not_overtaken_by_later_readers() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let (order, inside) = (RefCell::new(Vec::new()), Cell::new(0));
    let start = rt.now_ms();
    let tasks = vec![
        waiter(&store, &rt, "r1", READ, 0, 100, &order, &inside),
        waiter(&store, &rt, "w", Holding::Exclusive, 5, 50, &order, &inside),
        waiter(&store, &rt, "r2", READ, 6, 10, &order, &inside),
        waiter(&store, &rt, "r3", READ, 7, 10, &order, &inside),
    ];
    rt.join_all(tasks);
    let order = order.into_inner();
    let names: Vec<_> = order.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, ["r1", "w", "r2", "r3"]);
    // The writer goes in when r1 leaves; both readers together when the writer leaves.
    assert_eq!(order[1].1 - start, 100);
    assert_eq!(
        (order[2].1 - start, order[3].1 - start),
        (150, 150),
        "one release hands over to both readers"
    );
}

#[test]
fn at_most_limit_in_weight_among_many_racing_waiters() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let (order, inside) = (RefCell::new(Vec::new()), Cell::new(0u64));
    let peak = Cell::new(0u64);
    let mut tasks: Vec<Task> = Vec::new();
    for i in 0..24u64 {
        let (store, rt, order, inside, peak) = (&store, rt.clone(), &order, &inside, &peak);
        let weight = 1 + (i % 3) as u32;
        tasks.push(Box::pin(async move {
            rt.sleep(i % 5).await;
            let l = Lock::new(key("k"), ttl(10_000), store, rt.clone()).holding(permits(weight, 4));
            let ran = l
                .run(common::wait(60_000, 50), |_| async {
                    inside.set(inside.get() + u64::from(weight));
                    peak.set(peak.get().max(inside.get()));
                    assert!(inside.get() <= 4, "{} permits held out of 4", inside.get());
                    order.borrow_mut().push(i);
                    rt.sleep(3 + i % 7).await;
                    inside.set(inside.get() - u64::from(weight));
                })
                .await
                .unwrap();
            assert!(ran.is_some());
        }));
    }
    rt.join_all(tasks);
    assert_eq!(order.borrow().len(), 24);
    assert_eq!(peak.get(), 4, "the permits were never all used");
    assert_eq!(store.waiting(), 0);
}

#[test]
fn a_crashed_holders_permit_frees_at_its_ttl_and_goes_to_the_waiter() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let crashed = Lock::new(key("k"), ttl(200), &store, rt.clone()).holding(permits(1, 1));
    assert!(rt.block_on(crashed.acquire(immediately())).unwrap());
    let start = rt.now_ms();
    let waiter = Lock::new(key("k"), ttl(1_000), &store, rt.clone()).holding(permits(1, 1));
    assert!(rt
        .block_on(waiter.acquire(common::wait(5_000, 1_000)))
        .unwrap());
    assert_eq!(
        rt.now_ms() - start,
        200,
        "handed over at the expiry, not at a poll"
    );
}
