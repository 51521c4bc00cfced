use super::*;
use crate::memory::queue::Parked;
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
    let (first, until) = store
        .join(
            &key,
            &OwnerToken::mint().unwrap(),
            ttl,
            Holding::Exclusive,
            10_000,
            0,
        )
        .unwrap();
    assert_eq!(until, Some(50), "the first waiter keeps the timer");
    let (second, until) = store
        .join(
            &key,
            &OwnerToken::mint().unwrap(),
            ttl,
            Holding::Exclusive,
            10_000,
            1,
        )
        .unwrap();
    assert_eq!(until, None);
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
    let (parked, _) = store
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

fn permit(weight: u32) -> Holding {
    Holding::Shared(Share::new(weight, 2).unwrap())
}

/// Joins `key`'s queue at `now` for `holding`, waiting up to `wait_ms`.
fn queued(
    store: &MemoryLockStore<VirtualRuntime>,
    key: &Key,
    holding: Holding,
    wait_ms: u64,
    now: u64,
) -> (Parked, Option<u64>) {
    let ttl = Ttl::from_ms(1_000).unwrap();
    store
        .join(
            key,
            &OwnerToken::mint().unwrap(),
            ttl,
            holding,
            wait_ms,
            now,
        )
        .unwrap()
}

/// A newcomer whose deadline comes before the timekeeper's timer pokes it, and the keeper's
/// next step arms for that deadline; the newcomer itself parks with no timer.
#[test]
fn joining_parks_at_once_and_pokes_a_keeper_armed_too_late() {
    let store = MemoryLockStore::new(VirtualRuntime::new());
    let key = Key::new("k").unwrap();
    let holder = OwnerToken::mint().unwrap();
    assert!(store
        .acquire_at(&key, &holder, Ttl::from_ms(500).unwrap(), 0)
        .is_some());
    let (keeper, until) = queued(&store, &key, Holding::Exclusive, 10_000, 0);
    assert_eq!(until, Some(500), "armed for the holder's expiry");
    assert!(!keeper.woken());
    let (hasty, until) = queued(&store, &key, Holding::Exclusive, 100, 10);
    assert_eq!(until, None);
    assert!(
        keeper.woken(),
        "poked: its timer is due after the newcomer's deadline"
    );
    assert_eq!(parked_until(store.wait_step(&keeper, 10)), Some(110));
    assert!(matches!(
        store.wait_step(&keeper, 110),
        WaitStep::Park { .. }
    ));
    assert!(matches!(store.wait_step(&hasty, 110), WaitStep::Done(None)));
    store.leave(&hasty);
    store.leave(&keeper);
    assert_eq!(store.waiting(), 0);
}

/// A hand-over made before a waiter's deadline is the waiter's, even when the waiter only
/// steps after that deadline.
#[test]
fn a_hand_over_before_the_deadline_stands_when_the_waiter_steps_after_it() {
    let store = MemoryLockStore::new(VirtualRuntime::new());
    let key = Key::new("k").unwrap();
    let ttl = Ttl::from_ms(1_000).unwrap();
    let holder = OwnerToken::mint().unwrap();
    assert!(granted(store.acquire_shared_at(
        &key,
        &holder,
        ttl,
        share(2),
        0
    )));
    let (waiter, _) = queued(&store, &key, permit(2), 100, 0);
    assert!(store.release_at(&key, &holder, 50));
    assert!(waiter.woken());
    assert!(matches!(
        store.wait_step(&waiter, 150),
        WaitStep::Done(Some(_))
    ));
    store.leave(&waiter);
    assert_eq!(store.waiting(), 0);
    assert_eq!(
        store.acquire_shared_at(&key, &holder, ttl, share(1), 150),
        SharedGrant::Busy,
        "the waiter holds both permits"
    );
}

/// A waiter whose deadline passed before the key was freed is skipped by the hand-over, though
/// the timer that would tell it has not run yet, and the one behind it gets the permit.
#[test]
fn a_hand_over_after_a_waiters_deadline_skips_it() {
    let store = MemoryLockStore::new(VirtualRuntime::new());
    let key = Key::new("k").unwrap();
    let ttl = Ttl::from_ms(1_000).unwrap();
    let holder = OwnerToken::mint().unwrap();
    assert!(granted(store.acquire_shared_at(
        &key,
        &holder,
        ttl,
        share(2),
        0
    )));
    let (missed, until) = queued(&store, &key, permit(1), 100, 0);
    assert_eq!(until, Some(100), "its timer would tell it at 100");
    let (patient, _) = queued(&store, &key, permit(1), 10_000, 0);
    assert!(store.release_at(&key, &holder, 150));
    assert!(missed.woken() && patient.woken());
    assert!(matches!(
        store.wait_step(&missed, 150),
        WaitStep::Done(None)
    ));
    store.leave(&missed);
    assert!(matches!(
        store.wait_step(&patient, 150),
        WaitStep::Done(Some(_))
    ));
    store.leave(&patient);
    assert_eq!(store.waiting(), 0);
    // One permit is the patient waiter's, the other free: the waiter that ran out holds none.
    assert!(granted(store.acquire_shared_at(
        &key,
        &holder,
        ttl,
        share(1),
        150
    )));
    assert_eq!(
        store.acquire_shared_at(&key, &holder, ttl, share(1), 150),
        SharedGrant::Busy
    );
}

/// The timekeeper granted by a hand-over, stepping when its timer is due, still acts for the
/// queue: a waiter whose deadline passed is told at that step.
#[test]
fn a_granted_timekeeper_whose_timer_is_due_still_tells_the_waiters_that_ran_out() {
    let store = MemoryLockStore::new(VirtualRuntime::new());
    let key = Key::new("k").unwrap();
    let ttl = Ttl::from_ms(1_000).unwrap();
    let holder = OwnerToken::mint().unwrap();
    assert!(store.acquire_at(&key, &holder, ttl, 0).is_some());
    let (keeper, until) = queued(&store, &key, Holding::Exclusive, 10_000, 0);
    assert_eq!(until, Some(1_000));
    let (short, _) = queued(&store, &key, Holding::Exclusive, 100, 0);
    assert!(keeper.woken());
    assert_eq!(parked_until(store.wait_step(&keeper, 0)), Some(100));
    // The holder releases at 90: the keeper is granted; it only steps at 120, past `short`'s
    // deadline, with its timer due.
    assert!(store.release_at(&key, &holder, 90));
    assert!(!short.woken());
    assert!(matches!(
        store.wait_step(&keeper, 120),
        WaitStep::Done(Some(_))
    ));
    assert!(short.woken(), "told by the timekeeper's step");
    assert!(matches!(store.wait_step(&short, 120), WaitStep::Done(None)));
    store.leave(&keeper);
    store.leave(&short);
    assert_eq!(store.waiting(), 0);
}

fn share(weight: u32) -> Share {
    Share::new(weight, 2).unwrap()
}

fn granted(answer: SharedGrant) -> bool {
    matches!(answer, SharedGrant::Granted(_))
}
