//! Several keys held as one through the component's `multi` interface: all or none, taken in
//! sorted order across instances on parallel threads, a fence per key, bad key sets refused.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Barrier, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use keel_lock_component_host::{default_component_path, Faults, Host, Instance, LockError};

const LONG_TTL: u64 = 60_000;
/// The TTL of a hold a test waits out: a few calls on a loaded machine never take that long, so
/// the hold is certainly live while they run.
const SHORT_TTL: u64 = 2_000;
const BUCKET: &str = "default";

fn host() -> &'static Host {
    static HOST: OnceLock<Host> = OnceLock::new();
    HOST.get_or_init(|| {
        let path = default_component_path();
        Host::new(&path).unwrap_or_else(|e| panic!("cannot load {}: {e:?}", path.display()))
    })
}

fn instance() -> Instance {
    host().instance().expect("instantiate")
}

fn unique_key(test: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("multi:{test}:{}", N.fetch_add(1, Ordering::Relaxed))
}

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

/// Whether nobody holds `key`, as a plain lock in another instance sees it.
fn free(key: &str) -> bool {
    let mut probe = instance();
    let l = ok!(probe.new_lock(key, LONG_TTL));
    !ok!(probe.is_locked(l))
}

#[test]
fn a_refused_key_leaves_none_held_and_a_held_set_has_a_fence_per_key() {
    let (k1, k2, k3) = (unique_key("a"), unique_key("b"), unique_key("c"));
    let (mut a, mut b) = (instance(), instance());
    // The last key in sorted order is held elsewhere: the first two are taken, then freed.
    let blocker = ok!(b.new_lock(&k3, LONG_TTL));
    assert!(ok!(b.acquire(blocker, 0, None)));
    let before = b.fence(blocker).unwrap().unwrap();
    let m = ok!(a.new_multi(&[&k3, &k1, &k2], LONG_TTL));
    assert_eq!(
        a.multi_keys(m).unwrap(),
        [&*k1, &*k2, &*k3],
        "keys are taken sorted"
    );
    assert_eq!(a.multi_ttl_ms(m).unwrap(), LONG_TTL);
    assert!(!ok!(a.multi_acquire(m, 0, None)), "a key is held elsewhere");
    assert!(
        a.multi_fences(m).unwrap().is_none(),
        "no fences without every key"
    );
    assert!(free(&k1) && free(&k2), "keys left held");
    // With a timeout: refused when it is spent, again with nothing left behind.
    let started = Instant::now();
    assert!(!ok!(a.multi_acquire(m, 150, Some(10))));
    // The component's clock counts whole milliseconds (the WASI clock's nanoseconds, floored), so
    // the 150 ms it waits out can end up to 1 ms short of 150 ms on the host's finer clock.
    assert!(started.elapsed() >= Duration::from_millis(149));
    assert!(free(&k1) && free(&k2), "keys left held after a timeout");
    let single = ok!(b.new_lock(&k1, LONG_TTL));
    assert!(ok!(b.acquire(single, 0, None)), "the first key is free");
    let single_fence = b.fence(single).unwrap().unwrap();
    assert!(ok!(b.release(single)));
    assert!(
        !ok!(a.multi_release(m)),
        "releasing a set never held answers false"
    );
    assert!(matches!(
        err(a.multi_extend(m, None)),
        LockError::NotHeld(_)
    ));

    // Once the blocker is gone the set is taken whole, with a fence per key.
    assert!(ok!(b.release(blocker)));
    assert!(ok!(a.multi_acquire(m, 0, None)));
    let fences = a.multi_fences(m).unwrap().expect("a held set has fences");
    let keys: Vec<&str> = fences.iter().map(|f| f.key.as_str()).collect();
    assert_eq!(keys, [&*k1, &*k2, &*k3]);
    assert!(
        fences[0].fence > single_fence,
        "{fences:?} after {single_fence}"
    );
    assert!(fences[1].fence >= 1);
    assert!(fences[2].fence > before, "{fences:?} after {before}");
    // Each key is the same hold a plain lock takes: plain locks are refused on every one.
    for key in [&k1, &k2, &k3] {
        let other = ok!(b.new_lock(key, LONG_TTL));
        assert!(
            !ok!(b.acquire(other, 0, None)),
            "{key} taken beside the set"
        );
    }
    assert!(
        !ok!(a.multi_acquire(m, 0, None)),
        "not reentrant: the holder's acquire answers false"
    );
    assert!(
        !free(&k1),
        "the set keeps its keys after a refused re-acquire"
    );
    ok!(a.multi_extend(m, Some(LONG_TTL * 2)));
    let probe = ok!(b.new_lock(&k2, LONG_TTL));
    assert!(ok!(b.remaining_time(probe)).unwrap() > LONG_TTL, "extended");
    assert!(ok!(a.multi_release(m)));
    assert!(
        a.multi_fences(m).unwrap().is_none(),
        "no fences after releasing"
    );
    assert!([&k1, &k2, &k3].iter().all(|k| free(k)));
    assert!(!ok!(a.multi_release(m)), "released twice");
}

#[test]
fn a_set_that_lost_a_key_is_lost_whole() {
    let (k1, k2) = (unique_key("lost-a"), unique_key("lost-b"));
    let (mut a, mut b) = (instance(), instance());
    let m = ok!(a.new_multi_in(BUCKET, &[&k1, &k2], LONG_TTL));
    assert!(ok!(a.multi_acquire(m, 0, None)));
    // The second key is freed behind the set's back (as an operator would) and taken.
    host().kv().put(BUCKET, &k2, b"");
    let other = ok!(b.new_lock(&k2, LONG_TTL));
    assert!(ok!(b.acquire(other, 0, None)));
    // Extending the set fails on that key and frees the first one too.
    match err(a.multi_extend(m, None)) {
        LockError::NotHeld(key) => assert_eq!(key, k2),
        other => panic!("expected not-held, got {other:?}"),
    }
    assert!(free(&k1), "the set's other key is left held");
    assert!(!free(&k2), "the other holder's key is untouched");
    assert!(ok!(b.release(other)));

    // Expiry: a set past its TTL says so, and an expired hold is never revived.
    let short = ok!(a.new_multi(&[&unique_key("short-a"), &unique_key("short-b")], SHORT_TTL));
    assert!(
        !a.multi_is_expired(short).unwrap(),
        "never held is not expired"
    );
    assert!(ok!(a.multi_acquire(short, 0, None)));
    assert!(!a.multi_is_expired(short).unwrap());
    thread::sleep(Duration::from_millis(SHORT_TTL + 300));
    assert!(a.multi_is_expired(short).unwrap());
    assert!(matches!(
        err(a.multi_extend(short, None)),
        LockError::NotHeld(_)
    ));
}

/// Instances on parallel threads take overlapping pairs of three keys, given in both orders,
/// and wait for them: every one gets its pair (no deadlock: a cycle would hold until the wait
/// is spent, well before any TTL runs out), no key is ever held twice at once, and each key's
/// fences, in the order its holders held it, strictly increase. The host delays half its
/// key-value calls by up to 2 ms, so one instance's steps between its two keys interleave with
/// the others'.
#[test]
fn opposite_orders_from_parallel_instances_all_finish_without_overlap() {
    const TURNS: usize = 10;
    let keys = [unique_key("x"), unique_key("y"), unique_key("z")];
    // One thread per pair: each key is in four of them.
    let pairs = [(0, 1), (1, 0), (1, 2), (2, 1), (2, 0), (0, 2)];
    let inside: [AtomicU64; 3] = Default::default();
    let fences: [Mutex<Vec<u64>>; 3] = Default::default();
    let barrier = Barrier::new(pairs.len());
    let slow = host().with_faults(Faults {
        delay: 0.5,
        max_delay_ms: 2,
        ..Faults::none(7)
    });
    thread::scope(|s| {
        for (t, &(i, j)) in pairs.iter().enumerate() {
            let (keys, inside, fences, barrier, slow) = (&keys, &inside, &fences, &barrier, &slow);
            s.spawn(move || {
                let mut inst = slow.instance().unwrap();
                let m = ok!(inst.new_multi(&[&keys[i], &keys[j]], LONG_TTL));
                barrier.wait();
                for _ in 0..TURNS {
                    assert!(
                        ok!(inst.multi_acquire(m, 10_000, Some(1))),
                        "thread {t} waited 10 s for its pair"
                    );
                    let held = inst.multi_fences(m).unwrap().expect("fences while held");
                    for k in [i, j] {
                        assert_eq!(
                            inside[k].fetch_add(1, Ordering::SeqCst),
                            0,
                            "{} held twice",
                            keys[k]
                        );
                        let fence = held.iter().find(|f| f.key == keys[k]).unwrap().fence;
                        fences[k].lock().unwrap().push(fence);
                    }
                    thread::sleep(Duration::from_millis(1));
                    for k in [i, j] {
                        inside[k].fetch_sub(1, Ordering::SeqCst);
                    }
                    assert!(ok!(inst.multi_release(m)));
                }
            });
        }
    });
    for (k, fences) in fences.iter().enumerate() {
        let fences = fences.lock().unwrap();
        assert_eq!(
            fences.len(),
            4 * TURNS,
            "{}: {} holds",
            keys[k],
            fences.len()
        );
        assert!(
            fences.windows(2).all(|w| w[1] > w[0]),
            "{}: fences out of hold order: {fences:?}",
            keys[k]
        );
    }
}

#[test]
fn bad_key_sets_are_invalid_input() {
    let mut a = instance();
    let invalid = |e: LockError| match e {
        LockError::InvalidInput(message) => message,
        other => panic!("expected invalid-input, got {other:?}"),
    };
    let none = invalid(err(a.new_multi(&[], LONG_TTL)));
    assert!(none.contains("1 to 64 distinct keys: no keys"), "{none}");
    let twice = invalid(err(a.new_multi(&["k", "j", "k"], LONG_TTL)));
    assert!(twice.contains("a key given twice"), "{twice}");
    let many: Vec<String> = (0..65).map(|i| format!("k{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let over = invalid(err(a.new_multi(&many, LONG_TTL)));
    assert!(over.contains("more than 64 keys"), "{over}");
    let most = ok!(a.new_multi(&many[..64], LONG_TTL));
    assert_eq!(a.multi_keys(most).unwrap().len(), 64, "64 keys are fine");
    let empty = invalid(err(a.new_multi(&["k", ""], LONG_TTL)));
    assert!(empty.contains("non-empty"), "{empty}");
    let ttl = invalid(err(a.new_multi(&["k", "j"], 0)));
    assert!(!ttl.is_empty());
    let m = ok!(a.new_multi(&["k", "j"], LONG_TTL));
    invalid(err(a.multi_acquire(m, u64::MAX, None)));
    invalid(err(a.multi_extend(m, Some(0))));
    assert!(matches!(
        err(a.new_multi_in("missing-bucket", &["k"], LONG_TTL)),
        LockError::StoreError(_)
    ));
}
