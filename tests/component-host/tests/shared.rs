//! Shared holds through the component's `shared` interface: semaphores and read-write locks on a
//! real host's `wasi:keyvalue`, each key's holders in one value changed by compare-and-swap.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Barrier, OnceLock};
use std::thread;
use std::time::Duration;

use keel_lock_component_host::{
    default_component_path, Host, Instance, LockError, MismatchedLimits,
};

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
    format!("shared:{test}:{}", N.fetch_add(1, Ordering::Relaxed))
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

#[test]
fn a_semaphore_grants_up_to_its_limit_with_weights_and_a_fence_per_permit() {
    let key = unique_key("limit");
    let (mut a, mut b) = (instance(), instance());
    let p: Vec<_> = (0..3)
        .map(|i| {
            let inst = if i % 2 == 0 { &mut a } else { &mut b };
            ok!(inst.semaphore(BUCKET, &key, 3, LONG_TTL))
        })
        .collect();
    assert!(ok!(a.acquire(p[0], 0, None)));
    assert!(ok!(b.acquire(p[1], 0, None)));
    ok!(a.set_permits(p[2], 2));
    assert!(
        !ok!(a.acquire(p[2], 0, None)),
        "2 more permits beside 2 of 3"
    );
    ok!(a.set_permits(p[2], 1));
    assert!(ok!(a.acquire(p[2], 0, None)), "the third permit");
    let fences: Vec<u64> = [(0, p[0]), (1, p[1]), (0, p[2])]
        .iter()
        .map(|&(i, l)| {
            let inst = if i == 0 { &mut a } else { &mut b };
            inst.fence(l).unwrap().expect("a held permit has a fence")
        })
        .collect();
    assert!(fences.windows(2).all(|w| w[1] > w[0]), "fences {fences:?}");
    let fourth = ok!(b.semaphore(BUCKET, &key, 3, LONG_TTL));
    assert!(!ok!(b.acquire(fourth, 0, None)), "a fourth permit");
    let plain = ok!(b.new_lock(&key, LONG_TTL));
    assert!(
        !ok!(b.acquire(plain, 0, None)),
        "a plain lock beside permits"
    );
    assert!(ok!(b.is_locked(plain)));
    assert!(ok!(b.release(p[1])), "one permit released");
    assert!(!ok!(b.release(p[1])), "released twice");
    assert!(ok!(b.acquire(fourth, 0, None)), "its weight is free again");
    assert!(b.fence(fourth).unwrap().unwrap() > fences[2]);
    ok!(a.extend(p[0], Some(LONG_TTL * 2)));
    assert!(
        ok!(a.remaining_time(p[0])).unwrap() > LONG_TTL,
        "until the last permit expires"
    );
    assert!(ok!(a.release(p[0])));
    assert!(ok!(a.release(p[2])));
    assert!(ok!(b.release(fourth)));
    assert!(!ok!(b.is_locked(plain)));
    assert!(
        ok!(b.acquire(plain, 0, None)),
        "a plain lock once every permit went"
    );
    assert!(b.fence(plain).unwrap().unwrap() > fences[2]);
    let late = ok!(a.semaphore(BUCKET, &key, 3, LONG_TTL));
    assert!(
        !ok!(a.acquire(late, 0, None)),
        "a permit beside the plain lock"
    );
    assert!(ok!(b.release(plain)));
}

#[test]
fn readers_share_and_a_writer_excludes() {
    let key = unique_key("rw");
    let (mut a, mut b) = (instance(), instance());
    let r1 = ok!(a.read_lock(BUCKET, &key, LONG_TTL));
    let r2 = ok!(b.read_lock(BUCKET, &key, LONG_TTL));
    let w = ok!(b.write_lock(BUCKET, &key, LONG_TTL));
    assert!(ok!(a.acquire(r1, 0, None)));
    assert!(ok!(b.acquire(r2, 0, None)), "readers share");
    assert!(!ok!(b.acquire(w, 0, None)), "a writer beside readers");
    assert!(ok!(a.release(r1)));
    assert!(!ok!(b.acquire(w, 0, None)), "a writer beside one reader");
    assert!(ok!(b.release(r2)));
    assert!(
        ok!(b.acquire(w, 0, None)),
        "the writer once the readers left"
    );
    let r3 = ok!(a.read_lock(BUCKET, &key, LONG_TTL));
    assert!(!ok!(a.acquire(r3, 0, None)), "a reader beside the writer");
    let plain = ok!(a.new_lock(&key, LONG_TTL));
    assert!(
        !ok!(a.acquire(plain, 0, None)),
        "a plain lock beside the writer"
    );
    // A reader waiting (polling) gets in once the writer leaves.
    let waiter = thread::spawn(move || {
        let r = ok!(a.read_lock(BUCKET, &key, LONG_TTL));
        ok!(a.acquire(r, 5_000, Some(10)))
    });
    thread::sleep(Duration::from_millis(100));
    assert!(ok!(b.release(w)));
    assert!(waiter.join().unwrap(), "the waiting reader");
    assert!(matches!(
        err(b.set_permits(r2, 2)),
        LockError::InvalidInput(_)
    ));
    assert!(matches!(
        err(b.set_permits(w, 1)),
        LockError::InvalidInput(_)
    ));
}

#[test]
fn a_limit_mismatch_is_an_error_and_changes_nothing() {
    let key = unique_key("mismatch");
    let (mut a, mut b) = (instance(), instance());
    let three = ok!(a.semaphore(BUCKET, &key, 3, LONG_TTL));
    assert!(ok!(a.acquire(three, 0, None)));
    let four = ok!(b.semaphore(BUCKET, &key, 4, LONG_TTL));
    match err(b.acquire(four, 0, None)) {
        LockError::LimitMismatch(MismatchedLimits {
            key: k,
            held,
            asked,
        }) => {
            assert_eq!((k.as_str(), held, asked), (key.as_str(), 3, 4));
        }
        other => panic!("expected limit-mismatch, got {other:?}"),
    }
    assert!(matches!(
        err(b.acquire(four, 200, Some(10))),
        LockError::LimitMismatch(_)
    ));
    let reader = ok!(b.read_lock(BUCKET, &key, LONG_TTL));
    assert!(matches!(
        err(b.acquire(reader, 0, None)),
        LockError::LimitMismatch(_)
    ));
    assert!(ok!(a.release(three)));
    assert!(
        ok!(b.acquire(four, 0, None)),
        "limit 4 once the limit-3 holds went"
    );
    assert!(ok!(b.release(four)));
    // Bad terms are input errors, never traps.
    assert!(matches!(
        err(a.semaphore(BUCKET, &key, 0, LONG_TTL)),
        LockError::InvalidInput(_)
    ));
    assert!(matches!(
        err(a.semaphore(BUCKET, "", 3, LONG_TTL)),
        LockError::InvalidInput(_)
    ));
    assert!(matches!(
        err(a.read_lock(BUCKET, &key, 0)),
        LockError::InvalidInput(_)
    ));
    assert!(matches!(
        err(a.set_permits(three, 0)),
        LockError::InvalidInput(_)
    ));
    assert!(matches!(
        err(a.set_permits(three, 4)),
        LockError::InvalidInput(_)
    ));
}

#[test]
fn a_crashed_permit_frees_only_itself_at_its_ttl() {
    let key = unique_key("expiry");
    let (mut a, mut b) = (instance(), instance());
    let crashed = ok!(a.semaphore(BUCKET, &key, 2, SHORT_TTL));
    let alive = ok!(b.semaphore(BUCKET, &key, 2, LONG_TTL));
    assert!(ok!(a.acquire(crashed, 0, None)));
    assert!(ok!(b.acquire(alive, 0, None)));
    let third = ok!(b.semaphore(BUCKET, &key, 2, LONG_TTL));
    assert!(!ok!(b.acquire(third, 0, None)), "both permits taken");
    // The crashed holder never releases; a waiter polls until its permit expires.
    assert!(
        ok!(b.acquire(third, 30_000, Some(20))),
        "the crashed permit's weight, at its TTL"
    );
    assert!(b.fence(third).unwrap().unwrap() > b.fence(alive).unwrap().unwrap());
    assert!(
        !ok!(a.release(crashed)),
        "the crashed holder's late release"
    );
    assert!(matches!(
        err(a.extend(crashed, None)),
        LockError::NotHeld(_)
    ));
    assert!(ok!(b.is_locked(alive)), "the other permit stays held");
    assert!(ok!(b.release(alive)));
    assert!(ok!(b.release(third)));
    assert!(!ok!(b.is_locked(third)));
    // Nothing of the shared holds is left in the key's value: it is a free lock value again.
    let value = host().kv().get(BUCKET, &key).expect("the key's value");
    assert!(
        value.starts_with(b"2:0:"),
        "{}",
        String::from_utf8_lossy(&value)
    );
}

#[test]
fn permit_holders_on_parallel_threads_never_exceed_the_limit() {
    const THREADS: usize = 6;
    const TURNS: usize = 8;
    const LIMIT: u32 = 3;
    let key = unique_key("race");
    let inside = AtomicI64::new(0);
    let max_inside = AtomicI64::new(0);
    let barrier = Barrier::new(THREADS);
    thread::scope(|s| {
        for t in 0..THREADS {
            let (key, inside, max_inside, barrier) = (&key, &inside, &max_inside, &barrier);
            s.spawn(move || {
                let mut inst = instance();
                barrier.wait();
                for _ in 0..TURNS {
                    let p = ok!(inst.semaphore(BUCKET, key, LIMIT, LONG_TTL));
                    let weight = 1 + (t as u32 % 2);
                    ok!(inst.set_permits(p, weight));
                    assert!(
                        ok!(inst.acquire(p, 30_000, Some(1))),
                        "a permit within 30 s"
                    );
                    let now =
                        inside.fetch_add(i64::from(weight), Ordering::SeqCst) + i64::from(weight);
                    max_inside.fetch_max(now, Ordering::SeqCst);
                    thread::sleep(Duration::from_millis(2));
                    inside.fetch_sub(i64::from(weight), Ordering::SeqCst);
                    assert!(ok!(inst.release(p)));
                    inst.drop_lock(p).unwrap();
                }
            });
        }
    });
    let max = max_inside.load(Ordering::SeqCst);
    assert!(max <= i64::from(LIMIT), "weights inside reached {max}");
    assert!(max >= 2, "permits never overlapped (max {max})");
}
