//! Hold metadata and `inspect` through the component's exported lock API: what a holder says
//! about itself is kept with its hold (each permit and reader its own), `inspect` shows the
//! live holds in fence order and never an owner token, bad metadata is `invalid-input`, and
//! values written in the store's earlier formats still read.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::thread;
use std::time::Duration;

use keel_lock_component_host::{
    default_component_path, Host, Instance, LockError, LockHandle, LockInfo,
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
    format!("inspect:{test}:{}", N.fetch_add(1, Ordering::Relaxed))
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

/// What `info` shows of each holder: (metadata, fence), in its order.
fn shown(info: &LockInfo) -> Vec<(Option<String>, Option<u64>)> {
    info.holders
        .iter()
        .map(|h| (h.metadata.clone(), h.fence))
        .collect()
}

fn raw(key: &str) -> String {
    String::from_utf8(host().kv().get(BUCKET, key).expect("the key's value")).unwrap()
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Metadata that a careless encoding of the key's value would garble.
const AWKWARD: &[&str] = &[
    "host-a job 7",
    "",
    "a, b: c % d =e",
    "two\nlines\r\n\ttab",
    "2:1:1:forged-owner",
    "4:1:3:99999999999999,1,1,,forged",
    "ключ 🔒",
];

#[test]
fn metadata_round_trips_and_is_kept_through_extend_and_restore() {
    let (mut a, mut b) = (instance(), instance());
    for text in AWKWARD {
        let key = unique_key("round-trip");
        let l = ok!(a.new_lock(&key, LONG_TTL));
        ok!(a.set_metadata(l, Some(text)));
        assert!(ok!(a.acquire(l, 0, None)));
        let fence = a.fence(l).unwrap();
        let info = ok!(b.inspect_key(BUCKET, &key));
        assert_eq!(shown(&info), [(Some(text.to_string()), fence)], "{text:?}");
        let left = info.holders[0].remaining_ms;
        assert!(left > 0 && left <= LONG_TTL, "{left} ms left");
        assert_eq!(info.waiting, None, "this store keeps no queue");
        // Extended by another instance holding the serialized hold (which carries no
        // metadata): the hold keeps what it was taken with.
        let restored = ok!(b.restore(&ok!(a.serialize(l))));
        ok!(b.extend(restored, Some(LONG_TTL * 2)));
        let info = ok!(a.inspect(l));
        assert_eq!(shown(&info), [(Some(text.to_string()), fence)], "{text:?}");
        assert!(info.holders[0].remaining_ms > LONG_TTL, "the extend landed");
        assert!(ok!(b.release(restored)));
        assert!(ok!(a.inspect(l)).holders.is_empty(), "shown after release");
    }
    // Cleared: the next hold says nothing.
    let key = unique_key("cleared");
    let l = ok!(a.new_lock(&key, LONG_TTL));
    ok!(a.set_metadata(l, Some("first")));
    ok!(a.set_metadata(l, None));
    assert!(ok!(a.acquire(l, 0, None)));
    assert_eq!(shown(&ok!(a.inspect(l))), [(None, a.fence(l).unwrap())]);
    assert!(ok!(a.release(l)));
}

#[test]
fn a_hold_keeps_the_metadata_it_was_taken_with() {
    let key = unique_key("taken-with");
    let mut a = instance();
    let l = ok!(a.new_lock(&key, LONG_TTL));
    ok!(a.set_metadata(l, Some("job 1")));
    assert!(ok!(a.acquire(l, 0, None)));
    ok!(a.set_metadata(l, Some("job 2")));
    ok!(a.extend(l, None));
    let fence = a.fence(l).unwrap();
    assert_eq!(shown(&ok!(a.inspect(l))), [(Some("job 1".into()), fence)]);
    assert!(ok!(a.release(l)));
    assert!(ok!(a.acquire(l, 0, None)));
    let fence = a.fence(l).unwrap();
    assert_eq!(shown(&ok!(a.inspect(l))), [(Some("job 2".into()), fence)]);
    assert!(ok!(a.release(l)));
}

#[test]
fn each_permit_and_reader_shows_its_own_in_fence_order() {
    let key = unique_key("permits");
    let (mut a, mut b) = (instance(), instance());
    let permits: Vec<LockHandle> = (0..3)
        .map(|_| ok!(a.semaphore(BUCKET, &key, 4, LONG_TTL)))
        .collect();
    // Taken in another order than made, one of weight 2, one saying nothing.
    let said = [Some("permit 0"), None, Some("permit 2, weight 2")];
    for (i, &p) in permits.iter().enumerate() {
        ok!(a.set_metadata(p, said[i]));
    }
    ok!(a.set_permits(permits[2], 2));
    let mut expected = Vec::new();
    for i in [2, 0, 1] {
        assert!(ok!(a.acquire(permits[i], 0, None)), "permit {i}");
        expected.push((said[i].map(str::to_owned), a.fence(permits[i]).unwrap()));
    }
    let info = ok!(b.inspect_key(BUCKET, &key));
    assert_eq!(shown(&info), expected);
    let fences: Vec<u64> = expected.iter().map(|(_, f)| f.unwrap()).collect();
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
    // One permit's extend and another's release leave the rest as they were.
    ok!(a.extend(permits[0], Some(LONG_TTL * 2)));
    assert!(ok!(a.release(permits[2])));
    assert_eq!(shown(&ok!(b.inspect_key(BUCKET, &key))), expected[1..]);
    for p in [permits[0], permits[1]] {
        assert!(ok!(a.release(p)));
    }
    assert!(ok!(b.inspect_key(BUCKET, &key)).holders.is_empty());

    // Readers likewise; a writer shows alone.
    let readers: Vec<LockHandle> = (0..2)
        .map(|i| {
            let r = ok!(b.read_lock(BUCKET, &key, LONG_TTL));
            ok!(b.set_metadata(r, Some(&format!("reader {i}"))));
            assert!(ok!(b.acquire(r, 0, None)));
            r
        })
        .collect();
    let info = ok!(a.inspect_key(BUCKET, &key));
    let expected: Vec<_> = (0..2)
        .map(|i| (Some(format!("reader {i}")), b.fence(readers[i]).unwrap()))
        .collect();
    assert_eq!(shown(&info), expected);
    for r in readers {
        assert!(ok!(b.release(r)));
    }
    let w = ok!(a.write_lock(BUCKET, &key, LONG_TTL));
    ok!(a.set_metadata(w, Some("the writer")));
    assert!(ok!(a.acquire(w, 0, None)));
    let fence = a.fence(w).unwrap();
    assert_eq!(
        shown(&ok!(b.inspect_key(BUCKET, &key))),
        [(Some("the writer".into()), fence)]
    );
    assert!(ok!(a.release(w)));
}

#[test]
fn inspect_shows_only_live_holds_and_never_a_token() {
    let key = unique_key("tokens");
    let (mut a, mut b) = (instance(), instance());
    assert!(
        ok!(a.inspect_key(BUCKET, &key)).holders.is_empty(),
        "a never-used key"
    );
    let brief = ok!(a.new_lock(&key, SHORT_TTL));
    assert!(ok!(a.acquire(brief, 0, None)));
    assert_eq!(ok!(b.inspect_key(BUCKET, &key)).holders.len(), 1);
    // Past the TTL from the grant, which came before the acquire answered.
    thread::sleep(Duration::from_millis(SHORT_TTL + 300));
    assert!(
        ok!(b.inspect_key(BUCKET, &key)).holders.is_empty(),
        "an expired hold is shown"
    );
    let l = ok!(a.new_lock(&key, LONG_TTL));
    ok!(a.set_metadata(l, Some("said")));
    assert!(ok!(a.acquire(l, 0, None)));
    let value = raw(&key);
    let token = value
        .splitn(4, ':')
        .nth(3)
        .and_then(|rest| rest.split(' ').next())
        .expect("the owner in the value");
    assert_eq!(token.len(), 32, "{value}");
    let info = ok!(b.inspect_key(BUCKET, &key));
    assert!(
        !format!("{info:?}").contains(token),
        "inspect shows the owner token: {info:?}"
    );
    assert!(ok!(a.release(l)));
}

#[test]
fn bad_metadata_is_invalid_input_and_changes_nothing() {
    let key = unique_key("bad");
    let mut a = instance();
    let l = ok!(a.new_lock(&key, LONG_TTL));
    ok!(a.set_metadata(l, Some(&"é".repeat(512)))); // 1024 bytes: the limit
    for long in ["x".repeat(1025), "é".repeat(513)] {
        match err(a.set_metadata(l, Some(&long))) {
            LockError::InvalidInput(why) => assert!(why.contains("1024"), "{why}"),
            other => panic!("expected invalid-input, got {other:?}"),
        }
    }
    assert!(ok!(a.acquire(l, 0, None)));
    assert_eq!(
        shown(&ok!(a.inspect(l))),
        [(Some("é".repeat(512)), a.fence(l).unwrap())],
        "a refused set-metadata replaced the last one"
    );
    assert!(ok!(a.release(l)));
    let m = ok!(a.new_multi(&[&key], LONG_TTL));
    assert!(matches!(
        err(a.multi_set_metadata(m, Some(&"x".repeat(1025)))),
        LockError::InvalidInput(_)
    ));
    // The free function checks the key as `lock.new` does, and names a bucket's failure.
    assert!(matches!(
        err(a.inspect_key(BUCKET, "")),
        LockError::InvalidInput(_)
    ));
    assert!(matches!(
        err(a.inspect_key(BUCKET, &"k".repeat(513))),
        LockError::InvalidInput(_)
    ));
    assert!(matches!(
        err(a.inspect_key("missing-bucket", "k")),
        LockError::StoreError(_)
    ));
    host().kv().put(BUCKET, &key, b"not a keel-lock value");
    assert!(
        matches!(err(a.inspect_key(BUCKET, &key)), LockError::StoreError(m) if m.contains("did not write"))
    );
}

#[test]
fn inspect_reads_the_bucket_it_names() {
    let key = unique_key("bucket");
    let mut a = instance();
    let l = ok!(a.new_lock_in("bucket-inspect", &key, LONG_TTL));
    ok!(a.set_metadata(l, Some("elsewhere")));
    assert!(ok!(a.acquire(l, 0, None)));
    assert!(ok!(a.inspect_key(BUCKET, &key)).holders.is_empty());
    assert_eq!(
        shown(&ok!(a.inspect_key("bucket-inspect", &key))),
        [(Some("elsewhere".into()), a.fence(l).unwrap())]
    );
    assert!(ok!(a.release(l)));
}

#[test]
fn a_multi_lock_gives_every_key_its_metadata() {
    let (k1, k2) = (unique_key("multi-a"), unique_key("multi-b"));
    let (mut a, mut b) = (instance(), instance());
    let m = ok!(a.new_multi(&[&k2, &k1], LONG_TTL));
    ok!(a.multi_set_metadata(m, Some("transfer 9")));
    assert!(ok!(a.multi_acquire(m, 0, None)));
    for kf in a.multi_fences(m).unwrap().expect("fences of a held set") {
        assert_eq!(
            shown(&ok!(b.inspect_key(BUCKET, &kf.key))),
            [(Some("transfer 9".into()), Some(kf.fence))]
        );
    }
    assert!(ok!(a.multi_release(m)));
}

#[test]
fn values_in_earlier_formats_still_read() {
    let mut a = instance();
    let later = now_ms() + LONG_TTL;
    // The first format: no fence at all.
    let key = unique_key("v1");
    host()
        .kv()
        .put(BUCKET, &key, format!("1:{later}:0123abcd").as_bytes());
    let info = ok!(a.inspect_key(BUCKET, &key));
    assert_eq!(shown(&info), [(None, None)]);
    let l = ok!(a.new_lock(&key, LONG_TTL));
    assert!(!ok!(a.acquire(l, 0, None)), "a v1 hold was taken over");
    assert!(ok!(a.is_locked(l)));

    // Shared holds of the `3:` format (no fence per hold, no metadata), taken by real handles
    // and rewritten as that version wrote them: they still count, release and extend.
    let key = unique_key("v3");
    let permits: Vec<LockHandle> = (0..2)
        .map(|_| ok!(a.semaphore(BUCKET, &key, 4, LONG_TTL)))
        .collect();
    for &p in &permits {
        assert!(ok!(a.acquire(p, 0, None)));
    }
    let last = a.fence(permits[1]).unwrap().unwrap();
    let value = raw(&key);
    let holds: Vec<String> = value
        .splitn(4, ':')
        .nth(3)
        .unwrap()
        .split(' ')
        .map(|hold| {
            // `<expiry>,<weight>,<fence>,<metadata>,<owner>` → `<expiry>,<weight>,<owner>`
            let f: Vec<&str> = hold.splitn(5, ',').collect();
            format!("{},{},{}", f[0], f[1], f[4])
        })
        .collect();
    let v3 = format!("3:{last}:4:{}", holds.join(" "));
    host().kv().put(BUCKET, &key, v3.as_bytes());
    assert_eq!(
        shown(&ok!(a.inspect_key(BUCKET, &key))),
        [(None, None), (None, None)]
    );
    let third = ok!(a.semaphore(BUCKET, &key, 4, LONG_TTL));
    ok!(a.set_metadata(third, Some("after the upgrade")));
    ok!(a.set_permits(third, 3));
    assert!(!ok!(a.acquire(third, 0, None)), "the v3 holds' weight");
    ok!(a.set_permits(third, 2));
    assert!(ok!(a.acquire(third, 0, None)));
    assert_eq!(a.fence(third).unwrap(), Some(last + 1), "the v3 counter");
    assert_eq!(
        shown(&ok!(a.inspect_key(BUCKET, &key))),
        [
            (None, None),
            (None, None),
            (Some("after the upgrade".into()), Some(last + 1))
        ]
    );
    ok!(a.extend(permits[0], None));
    assert!(ok!(a.release(permits[1])), "a v3 hold's release");
    assert!(ok!(a.release(permits[0])));
    assert!(ok!(a.release(third)));
    assert_eq!(raw(&key), format!("2:0:{}:", last + 1));
}
