//! keel-lock's component under a real host: every property of the lock, exercised through the
//! exported WIT interface, with the store provided by the host's `wasi:keyvalue`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Barrier, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use keel_lock_component_host::{
    component_exports, default_component_path, Host, Instance, LockError,
};

const LONG_TTL: u64 = 60_000;
/// The TTL of a hold a test waits out: a few calls on a loaded machine never take that long, so
/// the hold is certainly live while they run.
const SHORT_TTL: u64 = 2_000;
/// The short TTL of the conformance run's expiry properties, for the same reason.
const CONFORMANCE_SHORT_TTL: u64 = 1_000;

fn host() -> &'static Host {
    static HOST: OnceLock<Host> = OnceLock::new();
    HOST.get_or_init(|| {
        let path = default_component_path();
        match Host::new(&path) {
            Ok(h) => h,
            Err(e) => panic!(
                "cannot load the component at {} (build it with `cargo build --target \
                 wasm32-wasip2 --release --features component,testing`): {e:?}",
                path.display()
            ),
        }
    })
}

fn instance() -> Instance {
    host().instance().expect("instantiate")
}

fn unique_key(test: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("test:{test}:{}", N.fetch_add(1, Ordering::Relaxed))
}

fn sleep_ms(ms: u64) {
    thread::sleep(Duration::from_millis(ms));
}

/// Unwraps the trap layer (a trap always fails the test) and the error layer.
macro_rules! ok {
    ($e:expr) => {
        $e.expect("the component trapped")
            .expect("the component answered an error")
    };
}

fn err<T: std::fmt::Debug>(answer: wasmtime::Result<Result<T, LockError>>) -> LockError {
    answer
        .expect("the component trapped")
        .expect_err("expected a lock-error")
}

#[test]
fn acquire_is_exclusive_across_instances() {
    let key = unique_key("exclusive");
    let (mut a, mut b) = (instance(), instance());
    let la = ok!(a.new_lock(&key, LONG_TTL));
    let lb = ok!(b.new_lock(&key, LONG_TTL));
    assert!(!ok!(b.is_locked(lb)));
    assert_eq!(ok!(b.remaining_time(lb)), None);
    assert!(ok!(a.acquire(la, 0, None)), "a free key must be acquired");
    assert!(
        !ok!(b.acquire(lb, 0, None)),
        "a held key was acquired by another instance"
    );
    assert!(
        !ok!(a.acquire(la, 0, None)),
        "not reentrant: the holder's acquire answers false"
    );
    let la2 = ok!(a.new_lock(&key, LONG_TTL));
    assert!(
        !ok!(a.acquire(la2, 0, None)),
        "a second handle in the same instance acquired"
    );
    assert!(ok!(b.is_locked(lb)));
    let left = ok!(b.remaining_time(lb)).expect("held key has a remaining time");
    assert!(left > 0 && left <= LONG_TTL, "remaining {left}");
    assert_eq!(a.key(la).unwrap(), key);
    assert_eq!(a.ttl_ms(la).unwrap(), LONG_TTL);
    assert!(ok!(a.release(la)));
    assert!(
        ok!(b.acquire(lb, 0, None)),
        "a released key must be free for anyone"
    );
    assert!(ok!(b.release(lb)));
}

#[test]
fn stored_value_is_expiry_fence_and_owner_and_release_keeps_the_fence() {
    let key = unique_key("value");
    let mut a = instance();
    let l = ok!(a.new_lock(&key, LONG_TTL));
    assert!(ok!(a.acquire(l, 0, None)));
    let value = String::from_utf8(host().kv().get("default", &key).expect("written")).unwrap();
    // `2:<expiry, epoch ms>:<last fence>:<owner token>`
    let parts: Vec<&str> = value.splitn(4, ':').collect();
    assert_eq!(parts.len(), 4, "{value}");
    assert_eq!(parts[0], "2");
    let expiry: u64 = parts[1].parse().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(
        expiry > now && expiry <= now + LONG_TTL + 1_000,
        "expiry {expiry}, now {now}"
    );
    let fence: u64 = parts[2].parse().unwrap();
    assert!(fence >= 1, "fence {fence}");
    assert_eq!(parts[3].len(), 32, "owner token is 128-bit hex");
    assert!(ok!(a.release(l)));
    // Released: free (expiry 0, no owner), the fence counter kept for the next holder.
    assert_eq!(
        host().kv().get("default", &key),
        Some(format!("2:0:{fence}:").into_bytes())
    );
}

#[test]
fn release_is_owner_checked() {
    let key = unique_key("release");
    let (mut a, mut b) = (instance(), instance());
    let la = ok!(a.new_lock(&key, LONG_TTL));
    let lb = ok!(b.new_lock(&key, LONG_TTL));
    assert!(
        !ok!(a.release(la)),
        "release of a never-acquired lock answered true"
    );
    assert!(ok!(a.acquire(la, 0, None)));
    assert!(!ok!(b.release(lb)), "a stranger's release answered true");
    assert!(ok!(b.is_locked(lb)), "a stranger's release freed the key");
    assert!(ok!(a.release(la)));
    assert!(!ok!(a.release(la)), "a second release answered true");
    assert!(!ok!(b.is_locked(lb)));
}

#[test]
fn extend_is_owner_checked_and_moves_expiry() {
    let key = unique_key("extend");
    let (mut a, mut b) = (instance(), instance());
    let la = ok!(a.new_lock(&key, SHORT_TTL));
    let lb = ok!(b.new_lock(&key, SHORT_TTL));
    assert!(matches!(err(a.extend(la, None)), LockError::NotHeld(k) if k == key));
    let start = Instant::now();
    assert!(ok!(a.acquire(la, 0, None)));
    assert!(matches!(
        err(b.extend(lb, Some(LONG_TTL))),
        LockError::NotHeld(_)
    ));
    ok!(a.extend(la, Some(LONG_TTL)));
    // Well past the original TTL, counted from before the acquire.
    thread::sleep(
        (start + Duration::from_millis(SHORT_TTL + 300)).saturating_duration_since(Instant::now()),
    );
    assert!(
        ok!(b.is_locked(lb)),
        "the key expired at its old deadline despite extend"
    );
    assert!(!a.is_expired(la).unwrap());
    let left = ok!(b.remaining_time(lb)).unwrap_or(0);
    assert!(
        left > LONG_TTL / 2 && left <= LONG_TTL,
        "remaining {left} ms after extending to {LONG_TTL}"
    );
    ok!(a.extend(la, None)); // back to the lock's own TTL
    let left = ok!(a.remaining_time(la)).unwrap_or(0);
    assert!(
        left <= SHORT_TTL,
        "remaining {left} ms after extending to the {SHORT_TTL} ms default"
    );
    assert!(ok!(a.release(la)));
}

#[test]
fn expired_hold_frees_the_key_and_stays_dead() {
    let key = unique_key("expiry");
    let (mut a, mut b) = (instance(), instance());
    let la = ok!(a.new_lock(&key, SHORT_TTL));
    let lb = ok!(b.new_lock(&key, LONG_TTL));
    assert!(ok!(a.acquire(la, 0, None)));
    assert!(!a.is_expired(la).unwrap());
    // Past the TTL from the grant, which came before the acquire answered.
    sleep_ms(SHORT_TTL + 300);
    assert!(a.is_expired(la).unwrap());
    assert!(!ok!(b.is_locked(lb)), "isLocked after the TTL passed");
    assert_eq!(ok!(b.remaining_time(lb)), None);
    // The expired holder cannot revive its hold.
    assert!(matches!(
        err(a.extend(la, Some(LONG_TTL))),
        LockError::NotHeld(_)
    ));
    assert!(
        !ok!(b.is_locked(lb)),
        "extend after expiry revived the lock"
    );
    assert!(
        ok!(b.acquire(lb, 0, None)),
        "an expired key could not be acquired"
    );
    assert!(
        !ok!(a.release(la)),
        "the expired holder's release answered true"
    );
    assert!(
        ok!(b.is_locked(lb)),
        "the expired holder's release freed the new holder"
    );
    assert!(ok!(b.release(lb)));
}

#[test]
fn acquire_waits_for_the_holder() {
    let key = unique_key("wait");
    let (mut a, mut b) = (instance(), instance());
    let la = ok!(a.new_lock(&key, SHORT_TTL));
    let lb = ok!(b.new_lock(&key, LONG_TTL));
    // Every time below is measured from before the holder's acquire, so a late wake-up in one
    // wait cannot make the next one look too short.
    let start = Instant::now();
    assert!(ok!(a.acquire(la, 0, None)));
    let t = Instant::now();
    assert!(!ok!(b.acquire(lb, 100, Some(20))), "acquired a held key");
    assert!(
        t.elapsed() >= Duration::from_millis(95),
        "gave up after {:?}",
        t.elapsed()
    );
    assert!(
        ok!(b.acquire(lb, 30_000, Some(20))),
        "never acquired after the holder expired"
    );
    // The holder's TTL ran from its grant, which came after `start` (the store's clock has
    // whole milliseconds, hence the one of slack).
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(SHORT_TTL - 1) && waited < Duration::from_millis(30_000),
        "{waited:?}"
    );
    assert!(ok!(b.release(lb)));
}

#[test]
fn waiting_acquire_wins_as_soon_as_the_holder_releases() {
    let key = unique_key("handoff");
    let kv_host = host();
    let mut a = instance();
    let la = ok!(a.new_lock(&key, LONG_TTL));
    assert!(ok!(a.acquire(la, 0, None)));
    thread::scope(|s| {
        let waiter = s.spawn(|| {
            let mut b = kv_host.instance().unwrap();
            let lb = ok!(b.new_lock(&key, LONG_TTL));
            let t = Instant::now();
            let won = ok!(b.acquire(lb, 10_000, Some(10)));
            assert!(ok!(b.release(lb)));
            (won, t.elapsed())
        });
        sleep_ms(200);
        assert!(ok!(a.release(la)));
        let (won, waited) = waiter.join().unwrap();
        assert!(won);
        assert!(waited < Duration::from_millis(5_000), "{waited:?}");
    });
}

#[test]
fn serialize_and_restore_hand_a_hold_to_another_instance() {
    let key = unique_key("handover");
    let (mut a, mut b) = (instance(), instance());
    let la = ok!(a.new_lock(&key, LONG_TTL));
    assert!(matches!(err(a.serialize(la)), LockError::NotHeld(_)));
    assert!(ok!(a.acquire(la, 0, None)));
    let text = ok!(a.serialize(la));
    assert!(text.starts_with("keel-lock:3:"), "{text}");
    let lb = ok!(b.restore(&text));
    assert_eq!(b.key(lb).unwrap(), key);
    assert_eq!(b.ttl_ms(lb).unwrap(), LONG_TTL);
    ok!(b.extend(lb, None));
    assert!(ok!(b.release(lb)), "the restored handle could not release");
    assert!(!ok!(a.release(la)), "the hold was released twice");
    assert!(!ok!(a.is_locked(la)));
}

#[test]
fn bad_input_returns_the_error_variant_and_never_traps() {
    let mut a = instance();
    let invalid = |e: LockError| matches!(e, LockError::InvalidInput(_));
    assert!(invalid(err(a.new_lock("", 1_000))));
    assert!(invalid(err(a.new_lock(&"k".repeat(513), 1_000))));
    assert!(invalid(err(a.new_lock(&"é".repeat(257), 1_000))));
    assert!(invalid(err(a.new_lock("k", 0))));
    assert!(invalid(err(a.new_lock("k", 2_147_483_648))));
    assert!(invalid(err(a.new_lock("k", u64::MAX))));
    ok!(a.new_lock(&"k".repeat(512), 2_147_483_647));

    let key = unique_key("bad-input");
    let l = ok!(a.new_lock(&key, LONG_TTL));
    assert!(invalid(err(a.acquire(l, u64::MAX, None))));
    assert!(invalid(err(a.acquire(l, 2_147_483_648, None))));
    assert!(invalid(err(a.acquire(l, 0, Some(u64::MAX)))));
    assert!(!ok!(a.is_locked(l)), "a refused acquire touched the store");
    assert!(ok!(a.acquire(l, 0, Some(0))));
    assert!(invalid(err(a.extend(l, Some(0)))));
    assert!(invalid(err(a.extend(l, Some(u64::MAX)))));
    let text = ok!(a.serialize(l));

    let mut bad = vec![
        String::new(),
        "keel-lock".into(),
        "keel-lock:1".into(),
        "{\"key\":\"x\"}".into(),
        "keel-lock:1:0:0:YQ:YQ".into(),
        text.replacen("keel-lock:3:", "keel-lock:99:", 1),
        "x".repeat(100_000),
        format!("{text}:extra"),
    ];
    // Every truncation: the check at the end refuses a cut inside the key too.
    bad.extend((0..text.len()).map(|cut| text[..cut].to_owned()));
    for s in &bad {
        let answer = a.restore(s).expect("the component trapped");
        assert!(
            matches!(answer, Err(LockError::InvalidInput(_))),
            "restore({s:?}) answered {answer:?}"
        );
    }
    // After all that, the instance still works and still holds its lock.
    assert!(ok!(a.is_locked(l)));
    assert!(ok!(a.release(l)));
}

#[test]
fn store_failures_return_store_error() {
    let mut a = instance();
    assert!(
        matches!(err(a.new_lock_in("missing-bucket", "k", 1_000)), LockError::StoreError(m) if m.contains("no such store"))
    );
    let key = unique_key("foreign");
    host().kv().put("default", &key, b"not a keel-lock value");
    let l = ok!(a.new_lock(&key, 1_000));
    assert!(
        matches!(err(a.acquire(l, 0, None)), LockError::StoreError(m) if m.contains("did not write"))
    );
    assert!(matches!(err(a.is_locked(l)), LockError::StoreError(_)));
    assert_eq!(
        host().kv().get("default", &key).as_deref(),
        Some(&b"not a keel-lock value"[..])
    );
}

#[test]
fn buckets_are_separate() {
    let key = unique_key("buckets");
    let (mut a, mut b) = (instance(), instance());
    let la = ok!(a.new_lock_in("bucket-a", &key, LONG_TTL));
    let lb = ok!(b.new_lock_in("bucket-b", &key, LONG_TTL));
    assert!(ok!(a.acquire(la, 0, None)));
    assert!(ok!(b.acquire(lb, 0, None)), "buckets share keys");
    assert!(ok!(a.release(la)) && ok!(b.release(lb)));
}

/// Many instances on many threads race for one free key, round after round: exactly one wins
/// each round. The host's store is one mutex-protected map; the instances run in parallel.
#[test]
fn concurrent_contenders_have_exactly_one_winner() {
    const THREADS: usize = 6;
    const ROUNDS: usize = 40;
    let keys: Vec<String> = (0..ROUNDS).map(|_| unique_key("race")).collect();
    let barrier = Barrier::new(THREADS);
    let winners: Vec<AtomicU64> = (0..ROUNDS).map(|_| AtomicU64::new(0)).collect();
    thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                let mut inst = host().instance().unwrap();
                for (round, key) in keys.iter().enumerate() {
                    let l = ok!(inst.new_lock(key, LONG_TTL));
                    barrier.wait();
                    if ok!(inst.acquire(l, 0, None)) {
                        winners[round].fetch_add(1, Ordering::SeqCst);
                    }
                    inst.drop_lock(l).unwrap();
                }
            });
        }
    });
    for (round, w) in winners.iter().enumerate() {
        assert_eq!(w.load(Ordering::SeqCst), 1, "round {round}: {w:?} winners");
    }
    let (swaps, failed) = host().kv().swap_counts();
    eprintln!("host store so far: {swaps} successful swaps, {failed} lost compare-and-swap races");
}

/// Instances on parallel threads take turns on one key: the fence each holder gets, in the
/// order they held the key, strictly increases (the counter lives in the key's value and moves
/// with the same compare-and-swap as the hold), and a handle has no fence once it released.
#[test]
fn fences_increase_across_racing_instances() {
    const THREADS: usize = 4;
    const TURNS: usize = 12;
    let key = unique_key("fences");
    let order = std::sync::Mutex::new(Vec::new());
    thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                let mut inst = host().instance().unwrap();
                let l = ok!(inst.new_lock(&key, 10_000));
                assert_eq!(inst.fence(l).unwrap(), None, "a fence before acquiring");
                for _ in 0..TURNS {
                    assert!(ok!(inst.acquire(l, 30_000, Some(1))), "starved for 30 s");
                    let fence = inst.fence(l).unwrap().expect("a held lock has a fence");
                    // Recorded while holding: the list is in hold order.
                    order.lock().unwrap().push(fence);
                    sleep_ms(1);
                    assert!(ok!(inst.release(l)));
                    assert_eq!(inst.fence(l).unwrap(), None, "a fence after releasing");
                }
            });
        }
    });
    let order = order.into_inner().unwrap();
    assert_eq!(order.len(), THREADS * TURNS);
    for pair in order.windows(2) {
        assert!(
            pair[1] > pair[0],
            "fence {} after {} in hold order: {order:?}",
            pair[1],
            pair[0]
        );
    }
}

/// Contenders that wait: every one eventually gets the lock, and no two are ever inside the
/// critical section at once.
#[test]
fn waiting_contenders_take_turns() {
    const THREADS: usize = 4;
    const TURNS: usize = 15;
    let key = unique_key("turns");
    let inside = AtomicBool::new(false);
    let done = AtomicU64::new(0);
    thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                let mut inst = host().instance().unwrap();
                let l = ok!(inst.new_lock(&key, 10_000));
                for _ in 0..TURNS {
                    assert!(ok!(inst.acquire(l, 30_000, Some(1))), "starved for 30 s");
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    sleep_ms(2);
                    inside.store(false, Ordering::SeqCst);
                    done.fetch_add(1, Ordering::SeqCst);
                    assert!(ok!(inst.release(l)), "the holder's release answered false");
                }
            });
        }
    });
    assert_eq!(done.load(Ordering::SeqCst), (THREADS * TURNS) as u64);
}

/// The core's own conformance properties (`keel_lock::conformance`), run inside the component
/// against this host's key-value store: every one holds, and all apply but the two that need
/// a store step this one lacks (a queue for shared holds, several keys in one step).
#[test]
fn conformance_properties_hold_against_the_host_store() {
    let mut a = instance();
    let names = a.properties().unwrap();
    assert_eq!(names, keel_lock::conformance::PROPERTIES);
    let outcomes = ok!(a.check_all(
        "conformance",
        "keel-lock-conformance:",
        CONFORMANCE_SHORT_TTL,
        100,
        50
    ));
    assert_eq!(
        outcomes
            .iter()
            .map(|o| o.property.clone())
            .collect::<Vec<_>>(),
        names
    );
    let failed: Vec<_> = outcomes.iter().filter(|o| o.violation.is_some()).collect();
    assert!(failed.is_empty(), "violations: {failed:?}");
    let not_applicable: Vec<&str> = outcomes
        .iter()
        .filter(|o| o.not_applicable.is_some())
        .map(|o| o.property.as_str())
        .collect();
    assert_eq!(
        not_applicable,
        [
            "nobody_passes_a_queued_waiter",
            "sets_taken_in_one_step_are_atomic"
        ],
        "{outcomes:?}"
    );
    assert_eq!(outcomes.len() - not_applicable.len(), 22);
    assert!(matches!(
        err(a.check_all("conformance", "p", 0, 100, 2)),
        LockError::InvalidInput(_)
    ));
    assert!(matches!(
        err(a.check_all("missing-x", "p", 150, 100, 2)),
        LockError::StoreError(_)
    ));
    assert!(matches!(
        err(a.check_all("conformance", &"p".repeat(500), 150, 100, 2)),
        LockError::InvalidInput(_)
    ));
}

/// The production component (built without `testing`) is the `keel-lock` world: it exports the
/// lock API and nothing else; the testing component adds `conformance`.
#[test]
fn production_world_exports_only_the_lock_api() {
    let production = std::env::var_os("KEEL_LOCK_PRODUCTION_COMPONENT").expect(
        "KEEL_LOCK_PRODUCTION_COMPONENT must name the component built with `--features component` \
         (scripts/test.d/60-component.sh sets it)",
    );
    let lock_api = [
        "keel:lock/lock@0.1.0",
        "keel:lock/multi@0.1.0",
        "keel:lock/shared@0.1.0",
        "keel:lock/types@0.1.0",
    ];
    let exports = |path: &std::path::Path| component_exports(path).expect("read the exports");
    assert_eq!(exports(std::path::Path::new(&production)), lock_api);
    let mut testing = lock_api.to_vec();
    testing.insert(0, "keel:lock/conformance@0.1.0");
    assert_eq!(exports(&default_component_path()), testing);
}
