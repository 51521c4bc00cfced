use super::*;
use crate::virtual_time::VirtualRuntime;

#[test]
fn expired_rows_do_not_accumulate() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let ttl = Ttl::from_ms(10).unwrap();
    let mut peak = 0;
    for i in 0..100_000 {
        let key = Key::new(format!("job:{i}")).unwrap();
        assert!(store
            .acquire_sync(&key, &OwnerToken::mint().unwrap(), ttl)
            .is_some());
        rt.advance(20); // every key expires before the next one is taken
        peak = peak.max(store.stored_rows());
    }
    assert!(peak <= SWEEP_FLOOR, "peak {peak} rows for 1 live key");
}

fn parked_until(step: WaitStep) -> Option<u64> {
    match step {
        WaitStep::Park { until } => until,
        WaitStep::Done(grant) => panic!("parked expected, the wait ended: {grant:?}"),
    }
}

/// The timekeeper leaves (aborted) after the holder expired but before its timer stepped
/// it: the waiter told to keep time next finds the key free and takes it, rather than
/// parking until its own deadline with the key held by nobody.
#[test]
fn the_next_timekeeper_takes_a_key_its_holder_let_expire() {
    let store = MemoryLockStore::new(VirtualRuntime::new());
    let (key, ttl) = (Key::new("k").unwrap(), Ttl::from_ms(50).unwrap());
    let holder = OwnerToken::mint().unwrap();
    assert!(store.acquire_at(&key, &holder, ttl, 0).is_some());
    let first = store
        .join(
            &key,
            &OwnerToken::mint().unwrap(),
            ttl,
            Holding::Exclusive,
            10_000,
            0,
        )
        .unwrap();
    let second = store
        .join(
            &key,
            &OwnerToken::mint().unwrap(),
            ttl,
            Holding::Exclusive,
            10_000,
            1,
        )
        .unwrap();
    assert_eq!(parked_until(store.wait_step(&first, 0)), Some(50));
    assert_eq!(parked_until(store.wait_step(&second, 1)), None);
    store.leave(&first);
    assert!(matches!(
        store.wait_step(&second, 60),
        WaitStep::Done(Some(_))
    ));
    store.leave(&second);
    assert_eq!(store.waiting(), 0);
}

/// Refused just before the holder's expiry and queued just after it (two clock reads): the
/// waiter's first step takes the key.
#[test]
fn a_waiter_queued_after_the_holders_expiry_takes_the_key_at_its_first_step() {
    let store = MemoryLockStore::new(VirtualRuntime::new());
    let (key, ttl) = (Key::new("k").unwrap(), Ttl::from_ms(50).unwrap());
    let (holder, waiter) = (OwnerToken::mint().unwrap(), OwnerToken::mint().unwrap());
    assert!(store.acquire_at(&key, &holder, ttl, 0).is_some());
    assert!(store.acquire_at(&key, &waiter, ttl, 49).is_none());
    let parked = store
        .join(&key, &waiter, ttl, Holding::Exclusive, 10_000, 50)
        .unwrap();
    assert!(matches!(
        store.wait_step(&parked, 50),
        WaitStep::Done(Some(_))
    ));
    store.leave(&parked);
    assert!(!store.release_at(&key, &holder, 51));
    assert!(store.release_at(&key, &waiter, 51));
}

#[test]
fn live_rows_survive_sweeps() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let long = Ttl::from_ms(1_000_000).unwrap();
    let owners: Vec<_> = (0..500).map(|_| OwnerToken::mint().unwrap()).collect();
    for (i, o) in owners.iter().enumerate() {
        assert!(store
            .acquire_sync(&Key::new(format!("k{i}")).unwrap(), o, long)
            .is_some());
    }
    assert_eq!(store.purge_expired(), 0);
    for (i, o) in owners.iter().enumerate() {
        assert!(store.release_sync(&Key::new(format!("k{i}")).unwrap(), o));
    }
}
