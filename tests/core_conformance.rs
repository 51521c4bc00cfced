//! The conformance kit: the memory store passes every property, and — so that a pass means
//! something — hand-written stores with one deliberate flaw each are caught by exactly the
//! properties that describe that flaw.
// Native only: virtual time and proptest are native dev-dependencies; the wasm suites live in
// tests/wasm_*.rs.
#![cfg(not(target_arch = "wasm32"))]

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use keel_lock::conformance::Verdict;
use keel_lock::conformance::{self, check_all, ConformanceOptions, PropertyResult, PROPERTIES};
use keel_lock::virtual_time::VirtualRuntime;
use keel_lock::{
    Fence, Grant, Key, LockInfo, LockStore, ManyGrant, MemoryLockStore, Metadata, OwnerToken,
    Runtime, Share, SharedGrant, Ttl,
};

fn run_kit<S: LockStore>(
    store: &S,
    rt: &VirtualRuntime,
    options: &ConformanceOptions,
) -> Vec<(&'static str, PropertyResult)>
where
    S::Error: Debug,
{
    rt.block_on(check_all(store, rt, options))
}

fn failed(results: &[(&'static str, PropertyResult)]) -> Vec<&'static str> {
    results
        .iter()
        .filter(|(_, r)| r.is_err())
        .map(|(name, _)| *name)
        .collect()
}

/// Asserts that the run covered every property and that exactly `expected` failed, each
/// violation naming its own property.
fn assert_caught(results: &[(&'static str, PropertyResult)], expected: &[&str]) {
    let names: Vec<_> = results.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        names, PROPERTIES,
        "check_all skipped or reordered properties"
    );
    for (name, result) in results {
        if let Err(v) = result {
            assert_eq!(
                v.property, *name,
                "violation filed under the wrong property"
            );
            assert!(!v.message.is_empty());
        }
    }
    let mut got = failed(results);
    got.sort_unstable();
    let mut want = expected.to_vec();
    want.sort_unstable();
    assert_eq!(got, want, "results: {results:#?}");
}

// ---------------------------------------------------------------------------------------------
// The real store
// ---------------------------------------------------------------------------------------------

#[test]
fn the_memory_store_passes_every_property() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let start = rt.now_ms();
    let results = run_kit(&store, &rt, &ConformanceOptions::default());
    assert_eq!(results.len(), keel_lock::conformance::PROPERTIES.len());
    assert_caught(&results, &[]);
    assert!(
        results.iter().all(|(_, r)| *r == Ok(Verdict::Holds)),
        "the memory store keeps fences, so every property applies: {results:#?}"
    );
    // Six properties outlive the short TTL (150 + 100 ms each) on the virtual clock: the kit
    // really waited, instead of checking expiry without letting time pass.
    assert!(rt.now_ms() - start >= 6 * 250, "{} ms", rt.now_ms() - start);
}

#[test]
fn the_memory_store_passes_with_tight_options_and_two_contenders() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let options = ConformanceOptions {
        key_prefix: "tight:".into(),
        short_ttl_ms: 1,
        settle_ms: 0,
        contenders: 2,
    };
    assert_caught(&run_kit(&store, &rt, &options), &[]);
}

#[test]
fn the_kit_leaves_the_store_clean() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    run_kit(&store, &rt, &ConformanceOptions::default());
    // The kit may run against a shared, live store: it must not leave any key held. Right
    // after the run (no time passes), every row left behind is already expired.
    let rows = store.stored_rows();
    assert_eq!(
        store.purge_expired(),
        rows,
        "the kit left live locks behind"
    );
    assert_eq!(store.stored_rows(), 0);
}

#[test]
fn single_properties_can_be_run_on_their_own() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let options = ConformanceOptions::default();
    assert_eq!(
        rt.block_on(conformance::concurrent_acquires_have_one_winner(
            &store, &rt, &options
        )),
        Ok(Verdict::Holds)
    );
    assert_eq!(
        rt.block_on(conformance::late_release_keeps_new_holder(
            &store, &rt, &options
        )),
        Ok(Verdict::Holds)
    );
}

// ---------------------------------------------------------------------------------------------
// A hand-rolled store with switchable flaws
// ---------------------------------------------------------------------------------------------

/// What `acquire` does between reading the row and writing it.
#[derive(Clone, Copy)]
enum Gap {
    /// Nothing: read and write happen in one step (atomic).
    None,
    /// A 1 ms virtual sleep, like a network round trip between GET and SET.
    Sleep,
    /// Yields to the executor once.
    Yield,
    /// Sleeps 0 or 1 ms, alternating per call.
    Jitter,
}

/// How `acquire` numbers its grants.
#[derive(Clone, Copy, PartialEq)]
enum Fences {
    /// One counter for the store, never reset: correct.
    Counter,
    /// No fences at all: still a lock, one whose holders cannot fence their writes.
    Absent,
    /// The counter restarts when a key is released, so the next holder gets an old fence.
    ReusedAfterRelease,
}

#[derive(Clone, Copy)]
struct Flaws {
    gap: Gap,
    release_checks_owner: bool,
    extend_checks_owner: bool,
    fences: Fences,
    /// The first this many extends reach the store `extend_late_ms` after they were sent, as
    /// over a stalled network: not a flaw, a slow store.
    late_extends: u64,
    extend_late_ms: u64,
    /// A grant's answer comes back this long after the row was written: a slow store too.
    acquire_answers_late_ms: u64,
    /// Every extend answers false, live lock or not.
    extend_refuses: bool,
    /// Rows live this much longer than the TTL asked for.
    holds_past_ttl_ms: u64,
    /// Every release fails with a store error.
    release_fails: bool,
    /// A release answers true but leaves the row: the key stays held until its TTL.
    release_keeps_row: bool,
    /// What `acquire_many` does.
    many: Many,
}

/// How the store takes a set of keys.
#[derive(Clone, Copy, PartialEq)]
enum Many {
    /// It has no one-step method: the core takes keys one at a time.
    Unsupported,
    /// Every key or none, in one step: correct.
    Atomic,
    /// Key after key, keeping those it got when a later one is held: a partial set.
    KeyByKey,
}

const CORRECT: Flaws = Flaws {
    gap: Gap::None,
    release_checks_owner: true,
    extend_checks_owner: true,
    fences: Fences::Counter,
    late_extends: 0,
    // Longer than the default short TTL (150 ms).
    extend_late_ms: 400,
    acquire_answers_late_ms: 0,
    extend_refuses: false,
    holds_past_ttl_ms: 0,
    release_fails: false,
    release_keeps_row: false,
    many: Many::Unsupported,
};

struct RowStore {
    rt: VirtualRuntime,
    rows: RefCell<HashMap<String, (OwnerToken, u64)>>,
    flaws: Flaws,
    calls: Cell<u64>,
    extends: Cell<u64>,
    last_fence: Cell<u64>,
}

impl RowStore {
    fn new(rt: &VirtualRuntime, flaws: Flaws) -> Self {
        RowStore {
            rt: rt.clone(),
            rows: RefCell::new(HashMap::new()),
            flaws,
            calls: Cell::new(0),
            extends: Cell::new(0),
            last_fence: Cell::new(0),
        }
    }

    /// The live row's owner, if any.
    fn live_owner(&self, key: &Key) -> Option<OwnerToken> {
        let now = self.rt.now_ms();
        self.rows
            .borrow()
            .get(key.as_str())
            .filter(|(_, expires_at)| *expires_at > now)
            .map(|(owner, _)| owner.clone())
    }

    fn may_touch(&self, key: &Key, owner: &OwnerToken, checks_owner: bool) -> bool {
        match self.live_owner(key) {
            Some(current) => !checks_owner || current == *owner,
            None => false,
        }
    }

    async fn gap(&self) {
        let n = self.calls.get();
        self.calls.set(n + 1);
        match self.flaws.gap {
            Gap::None => {}
            Gap::Sleep => self.rt.sleep(1).await,
            Gap::Yield => YieldOnce(false).await,
            Gap::Jitter => self.rt.sleep(n % 2).await,
        }
    }
}

struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

/// The error `RowStore` answers when a flaw makes a call fail.
#[derive(Debug)]
struct RowStoreDown;

impl LockStore for RowStore {
    type Error = RowStoreDown;

    fn name(&self) -> &'static str {
        "row"
    }
    async fn acquire(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
    ) -> Result<Option<Grant>, RowStoreDown> {
        if self.live_owner(key).is_some() {
            return Ok(None);
        }
        // With a gap, another acquirer can read "free" here too, and both then write.
        self.gap().await;
        let expires_at = self.rt.now_ms() + ttl.as_ms() + self.flaws.holds_past_ttl_ms;
        self.rows
            .borrow_mut()
            .insert(key.as_str().to_owned(), (owner.clone(), expires_at));
        let grant = if self.flaws.fences == Fences::Absent {
            Grant::unfenced()
        } else {
            self.last_fence.set(self.last_fence.get() + 1);
            Grant::new(Fence::new(self.last_fence.get()).ok())
        };
        if self.flaws.acquire_answers_late_ms > 0 {
            self.rt.sleep(self.flaws.acquire_answers_late_ms).await;
        }
        Ok(Some(grant))
    }
    async fn release(&self, key: &Key, owner: &OwnerToken) -> Result<bool, RowStoreDown> {
        if self.flaws.release_fails {
            return Err(RowStoreDown);
        }
        if !self.may_touch(key, owner, self.flaws.release_checks_owner) {
            return Ok(false);
        }
        if !self.flaws.release_keeps_row {
            self.rows.borrow_mut().remove(key.as_str());
        }
        if self.flaws.fences == Fences::ReusedAfterRelease {
            self.last_fence.set(0);
        }
        Ok(true)
    }
    async fn extend(&self, key: &Key, owner: &OwnerToken, ttl: Ttl) -> Result<bool, RowStoreDown> {
        let n = self.extends.get();
        self.extends.set(n + 1);
        if n < self.flaws.late_extends {
            self.rt.sleep(self.flaws.extend_late_ms).await;
        }
        if self.flaws.extend_refuses || !self.may_touch(key, owner, self.flaws.extend_checks_owner)
        {
            return Ok(false);
        }
        let expires_at = self.rt.now_ms() + ttl.as_ms() + self.flaws.holds_past_ttl_ms;
        if let Some(row) = self.rows.borrow_mut().get_mut(key.as_str()) {
            row.1 = expires_at;
        }
        Ok(true)
    }
    fn acquires_many(&self) -> bool {
        self.flaws.many != Many::Unsupported
    }
    async fn acquire_many(
        &self,
        keys: &[Key],
        owners: &[OwnerToken],
        ttl: Ttl,
    ) -> Result<ManyGrant, RowStoreDown> {
        match self.flaws.many {
            Many::Unsupported => return Ok(ManyGrant::Unsupported),
            Many::Atomic if keys.iter().any(|key| self.live_owner(key).is_some()) => {
                return Ok(ManyGrant::Refused)
            }
            _ => {}
        }
        let mut grants = Vec::new();
        for (key, owner) in keys.iter().zip(owners) {
            match self.acquire(key, owner, ttl).await? {
                Some(grant) => grants.push(grant),
                None => return Ok(ManyGrant::Refused),
            }
        }
        Ok(ManyGrant::All(grants))
    }
    async fn is_locked(&self, key: &Key) -> Result<bool, RowStoreDown> {
        Ok(self.live_owner(key).is_some())
    }
    async fn remaining_time(&self, key: &Key) -> Result<Option<u64>, RowStoreDown> {
        let now = self.rt.now_ms();
        Ok(self
            .rows
            .borrow()
            .get(key.as_str())
            .filter(|(_, expires_at)| *expires_at > now)
            .map(|(_, expires_at)| expires_at - now))
    }
}

fn check_flaws(flaws: Flaws) -> Vec<(&'static str, PropertyResult)> {
    let rt = VirtualRuntime::new();
    let store = RowStore::new(&rt, flaws);
    run_kit(&store, &rt, &ConformanceOptions::default())
}

/// The control: with no flaw switched on, the hand-rolled store passes, so every failure
/// below comes from the flaw and not from the store's design.
#[test]
fn the_hand_rolled_store_without_flaws_passes() {
    assert_caught(&check_flaws(CORRECT), &[]);
}

#[test]
fn a_store_taking_sets_in_one_step_passes() {
    let results = check_flaws(Flaws {
        many: Many::Atomic,
        ..CORRECT
    });
    assert_caught(&results, &[]);
    let verdict = results
        .iter()
        .find(|(name, _)| *name == "sets_taken_in_one_step_are_atomic");
    assert_eq!(verdict.map(|(_, v)| v.clone()), Some(Ok(Verdict::Holds)));
}

#[test]
fn a_set_taken_key_by_key_is_caught() {
    let got = failed(&check_flaws(Flaws {
        many: Many::KeyByKey,
        ..CORRECT
    }));
    assert!(
        got.contains(&"sets_taken_in_one_step_are_atomic")
            && got.contains(&"several_keys_all_or_nothing"),
        "{got:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// (a) Non-atomic acquire
// ---------------------------------------------------------------------------------------------

/// What a get-then-set acquire breaks: every race for a key, free or expired.
const NON_ATOMIC: &[&str] = &[
    "concurrent_acquires_have_one_winner",
    "concurrent_acquires_of_expired_key_have_one_winner",
    "fences_increase",
];

fn result_of<'a>(
    results: &'a [(&'static str, PropertyResult)],
    property: &str,
) -> &'a PropertyResult {
    &results
        .iter()
        .find(|(name, _)| *name == property)
        .expect("property ran")
        .1
}

#[test]
fn a_non_atomic_acquire_with_a_sleep_is_caught() {
    let results = check_flaws(Flaws {
        gap: Gap::Sleep,
        ..CORRECT
    });
    assert_caught(&results, NON_ATOMIC);
    let violation = results[1].1.as_ref().unwrap_err();
    assert!(
        violation.message.contains("50 won"),
        "every contender should have won: {}",
        violation.message
    );
}

#[test]
fn a_non_atomic_acquire_with_a_yield_is_caught() {
    assert_caught(
        &check_flaws(Flaws {
            gap: Gap::Yield,
            ..CORRECT
        }),
        NON_ATOMIC,
    );
}

#[test]
fn a_non_atomic_acquire_with_jittered_latency_is_caught() {
    // Which races the alternating delay lines up for depends on how many acquires came
    // before: the concurrent-acquire property always catches it, the others may too.
    let results = check_flaws(Flaws {
        gap: Gap::Jitter,
        ..CORRECT
    });
    let got = failed(&results);
    assert!(
        got.contains(&"concurrent_acquires_have_one_winner"),
        "results: {results:#?}"
    );
    assert!(
        got.iter().all(|name| NON_ATOMIC.contains(name)),
        "a non-atomic acquire failed properties about something else: {got:?}"
    );
}

#[test]
fn a_non_atomic_acquire_is_caught_with_just_two_contenders() {
    let rt = VirtualRuntime::new();
    let store = RowStore::new(
        &rt,
        Flaws {
            gap: Gap::Sleep,
            ..CORRECT
        },
    );
    let options = ConformanceOptions {
        contenders: 2,
        ..ConformanceOptions::default()
    };
    let result = rt.block_on(conformance::concurrent_acquires_have_one_winner(
        &store, &rt, &options,
    ));
    let violation = result.unwrap_err();
    assert_eq!(violation.property, "concurrent_acquires_have_one_winner");
    assert!(violation.message.contains("2 won"), "{}", violation.message);
}

// ---------------------------------------------------------------------------------------------
// (b) Release / extend without the owner check
// ---------------------------------------------------------------------------------------------

#[test]
fn release_and_extend_without_an_owner_check_are_caught() {
    assert_caught(
        &check_flaws(Flaws {
            release_checks_owner: false,
            extend_checks_owner: false,
            ..CORRECT
        }),
        &[
            "release_requires_owner",
            "extend_requires_owner",
            "late_release_keeps_new_holder",
            "keys_are_independent",
        ],
    );
}

#[test]
fn release_without_an_owner_check_is_caught_on_its_own() {
    let results = check_flaws(Flaws {
        release_checks_owner: false,
        ..CORRECT
    });
    assert_caught(
        &results,
        &[
            "release_requires_owner",
            "late_release_keeps_new_holder",
            "keys_are_independent",
        ],
    );
    let late = result_of(&results, "late_release_keeps_new_holder");
    assert!(
        late.as_ref().unwrap_err().message.contains("release"),
        "{late:?}"
    );
}

#[test]
fn extend_without_an_owner_check_is_caught_on_its_own() {
    let results = check_flaws(Flaws {
        extend_checks_owner: false,
        ..CORRECT
    });
    assert_caught(
        &results,
        &[
            "extend_requires_owner",
            "late_release_keeps_new_holder",
            "keys_are_independent",
        ],
    );
    let late = result_of(&results, "late_release_keeps_new_holder");
    assert!(
        late.as_ref().unwrap_err().message.contains("extend"),
        "{late:?}"
    );
}

#[test]
fn every_flaw_at_once_is_caught_by_all_the_relevant_properties() {
    assert_caught(
        &check_flaws(Flaws {
            gap: Gap::Sleep,
            release_checks_owner: false,
            extend_checks_owner: false,
            fences: Fences::ReusedAfterRelease,
            ..CORRECT
        }),
        &[
            "concurrent_acquires_have_one_winner",
            "concurrent_acquires_of_expired_key_have_one_winner",
            "release_requires_owner",
            "extend_requires_owner",
            "late_release_keeps_new_holder",
            "keys_are_independent",
            "fences_increase",
        ],
    );
}

/// A release that answers true but frees nothing leaves a refused multi-key acquisition's keys
/// held, and keeps overlapping multi-key runs from finishing.
#[test]
fn a_release_that_frees_nothing_is_caught_by_the_multi_key_properties_too() {
    assert_caught(
        &check_flaws(Flaws {
            release_keeps_row: true,
            ..CORRECT
        }),
        &[
            "release_requires_owner",
            "released_key_is_free",
            "inspection_agrees",
            "several_keys_all_or_nothing",
            "opposite_order_sets_complete",
            "fences_increase",
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// (c) Fences
// ---------------------------------------------------------------------------------------------

#[test]
fn a_fence_reused_after_release_is_caught() {
    let results = check_flaws(Flaws {
        fences: Fences::ReusedAfterRelease,
        ..CORRECT
    });
    assert_caught(&results, &["fences_increase"]);
    let violation = result_of(&results, "fences_increase").as_ref().unwrap_err();
    assert!(
        violation.message.contains("after release"),
        "{}",
        violation.message
    );
}

// ---------------------------------------------------------------------------------------------
// (d) A store too slow for the short TTL
// ---------------------------------------------------------------------------------------------

/// Runs one of the two extend properties against a `RowStore` with `flaws`, with the default
/// options; answers its result, how many extends the store saw, and how many rows it left live.
fn one_property(flaws: Flaws, property: &str) -> (PropertyResult, u64, usize) {
    let rt = VirtualRuntime::new();
    let store = RowStore::new(&rt, flaws);
    let options = ConformanceOptions::default();
    let result = match property {
        "extend_requires_owner" => {
            rt.block_on(conformance::extend_requires_owner(&store, &rt, &options))
        }
        "extend_pushes_expiry_out" => {
            rt.block_on(conformance::extend_pushes_expiry_out(&store, &rt, &options))
        }
        other => panic!("no such extend property: {other}"),
    };
    let now = rt.now_ms();
    let live = store
        .rows
        .borrow()
        .values()
        .filter(|(_, at)| *at > now)
        .count();
    (result, store.extends.get(), live)
}

/// Runs `property` as [`one_property`] does and asserts it failed, filed under its own name,
/// with a message containing every one of `texts`; answers the extends the store saw and the
/// rows left live.
fn fails_saying(flaws: Flaws, property: &str, texts: &[&str]) -> (u64, usize) {
    let (result, extends, live) = one_property(flaws, property);
    let violation = result.expect_err(property);
    assert_eq!(violation.property, property);
    assert!(
        texts.iter().all(|text| violation.message.contains(text)),
        "{property}: {}",
        violation.message
    );
    (extends, live)
}

/// An owner's extend that arrives after the short TTL ran out is rightly refused: the kit tries
/// the property again with fresh keys instead of reporting a broken store.
#[test]
fn an_extend_refused_after_a_stall_longer_than_the_short_ttl_is_tried_again() {
    let options = ConformanceOptions::default();
    // Every extend of the first try arrives late: the free key's, the stranger's and the
    // owner's in one property, the owner's in the other.
    for (property, per_try) in [
        ("extend_requires_owner", 3),
        ("extend_pushes_expiry_out", 1),
    ] {
        let slow = Flaws {
            late_extends: per_try,
            ..CORRECT
        };
        let (result, extends, _) = one_property(slow, property);
        assert_eq!(result, Ok(Verdict::Holds), "{property}");
        assert_eq!(extends, 2 * per_try, "{property}: two tries");
    }
    // And the whole run passes with the first few extends late.
    let rt = VirtualRuntime::new();
    let store = RowStore::new(
        &rt,
        Flaws {
            late_extends: 4,
            ..CORRECT
        },
    );
    assert_caught(&run_kit(&store, &rt, &options), &[]);
}

/// A store that is slower than the short TTL every time cannot be judged, and the failure says
/// so (and what to change) instead of calling the store broken.
#[test]
fn a_store_always_slower_than_the_short_ttl_fails_saying_it_was_too_slow() {
    let always = Flaws {
        late_extends: u64::MAX,
        ..CORRECT
    };
    let too_slow = [
        "too slow to judge; give the check a longer short TTL",
        "in each of 3 tries",
        "short TTL of 150 ms",
    ];
    for (property, per_try) in [
        ("extend_requires_owner", 3),
        ("extend_pushes_expiry_out", 1),
    ] {
        let (extends, _) = fails_saying(always, property, &too_slow);
        assert_eq!(extends, 3 * per_try, "{property}: three tries");
    }
}

/// An owner's extend refused while the lock is plainly live is a violation on the first try:
/// the retry is only for answers that came too late to judge.
#[test]
fn an_extend_refused_inside_the_short_ttl_is_caught_at_once() {
    let refuses = Flaws {
        extend_refuses: true,
        ..CORRECT
    };
    let (extends, _) = fails_saying(
        refuses,
        "extend_requires_owner",
        &["inside the short TTL of 150 ms"],
    );
    assert_eq!(extends, 3, "one try");
    assert_caught(
        &check_flaws(refuses),
        &["extend_requires_owner", "extend_pushes_expiry_out"],
    );
}

/// The short TTL is timed from before the acquire is sent: a grant that comes back 100 ms late,
/// then an extend that arrives 60 ms after that, reaches a lock that expired at 150 ms. Timed
/// from the grant's answer (60 ms) the refusal would look like a violation.
#[test]
fn the_short_ttl_is_timed_from_before_the_acquire_is_sent() {
    let slow = Flaws {
        acquire_answers_late_ms: 100,
        late_extends: u64::MAX,
        extend_late_ms: 60,
        ..CORRECT
    };
    let (extends, live) = fails_saying(slow, "extend_pushes_expiry_out", &["too slow to judge"]);
    assert_eq!(extends, 3, "three tries");
    assert_eq!(live, 0, "no lock left held");
}

/// However slow the store, a refused extend of a lock that still reads as held afterwards is a
/// violation (only the owner took that fresh key); and a slow try followed by a quick refusal is
/// a violation too.
#[test]
fn a_refused_extend_of_a_lock_still_held_is_caught_however_slow() {
    let refuses_while_held = Flaws {
        extend_refuses: true,
        late_extends: u64::MAX,
        holds_past_ttl_ms: 10_000,
        ..CORRECT
    };
    let (extends, live) = fails_saying(
        refuses_while_held,
        "extend_requires_owner",
        &["while its lock was still held"],
    );
    assert_eq!(extends, 3, "one try");
    assert_eq!(live, 0, "the kit released the lock it judged");
    let slow_then_quick = Flaws {
        extend_refuses: true,
        late_extends: 3,
        ..CORRECT
    };
    let (extends, _) = fails_saying(
        slow_then_quick,
        "extend_requires_owner",
        &["inside the short TTL"],
    );
    assert_eq!(extends, 6, "a slow try, then a quick refusal");
}

/// The kit lets go of the lock it judged before reporting; when that release fails too, the
/// report is still the refused extend, not the release's error.
#[test]
fn a_refused_extend_is_reported_even_when_the_cleanup_release_fails() {
    let refuses_and_cannot_release = Flaws {
        extend_refuses: true,
        release_fails: true,
        ..CORRECT
    };
    for property in ["extend_requires_owner", "extend_pushes_expiry_out"] {
        fails_saying(
            refuses_and_cannot_release,
            property,
            &["the owner's extend answered false", "inside the short TTL"],
        );
    }
}

#[test]
fn a_store_without_fences_is_a_finding_not_a_failure() {
    let results = check_flaws(Flaws {
        fences: Fences::Absent,
        ..CORRECT
    });
    assert_caught(&results, &[]);
    match result_of(&results, "fences_increase") {
        Ok(Verdict::NotApplicable(why)) => assert!(why.contains("no fences"), "{why}"),
        other => panic!("expected a not-applicable finding, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Broken shared holds
// ---------------------------------------------------------------------------------------------

/// The memory store with its shared acquire replaced by `shared`.
struct SharedFlaw<'a> {
    inner: &'a MemoryLockStore<VirtualRuntime>,
    shared: fn(&MemoryLockStore<VirtualRuntime>, &Key, &OwnerToken, Ttl, Share) -> SharedGrant,
}

impl LockStore for SharedFlaw<'_> {
    type Error = Infallible;
    fn name(&self) -> &'static str {
        "shared-flaw"
    }
    async fn acquire(&self, k: &Key, o: &OwnerToken, t: Ttl) -> Result<Option<Grant>, Self::Error> {
        self.inner.acquire(k, o, t).await
    }
    async fn release(&self, k: &Key, o: &OwnerToken) -> Result<bool, Self::Error> {
        self.inner.release(k, o).await
    }
    async fn extend(&self, k: &Key, o: &OwnerToken, t: Ttl) -> Result<bool, Self::Error> {
        self.inner.extend(k, o, t).await
    }
    async fn is_locked(&self, k: &Key) -> Result<bool, Self::Error> {
        self.inner.is_locked(k).await
    }
    async fn remaining_time(&self, k: &Key) -> Result<Option<u64>, Self::Error> {
        self.inner.remaining_time(k).await
    }
    fn hands_over(&self) -> bool {
        true
    }
    async fn acquire_or_wait(
        &self,
        k: &Key,
        o: &OwnerToken,
        t: Ttl,
        wait: keel_lock::Wait,
    ) -> Result<Option<Grant>, Self::Error> {
        self.inner.acquire_or_wait(k, o, t, wait).await
    }
    async fn acquire_shared(
        &self,
        k: &Key,
        o: &OwnerToken,
        t: Ttl,
        share: Share,
    ) -> Result<SharedGrant, Self::Error> {
        Ok((self.shared)(self.inner, k, o, t, share))
    }
    fn hands_over_shared(&self) -> bool {
        true
    }
    async fn acquire_shared_or_wait(
        &self,
        k: &Key,
        o: &OwnerToken,
        t: Ttl,
        share: Share,
        wait: keel_lock::Wait,
    ) -> Result<SharedGrant, Self::Error> {
        self.inner
            .acquire_shared_or_wait(k, o, t, share, wait)
            .await
    }
}

fn run_shared_flaw(
    shared: fn(&MemoryLockStore<VirtualRuntime>, &Key, &OwnerToken, Ttl, Share) -> SharedGrant,
) -> Vec<(&'static str, PropertyResult)> {
    let rt = VirtualRuntime::new();
    let inner = MemoryLockStore::new(rt.clone());
    let store = SharedFlaw {
        inner: &inner,
        shared,
    };
    run_kit(&store, &rt, &ConformanceOptions::default())
}

#[test]
fn permits_granted_past_the_limit_are_caught() {
    // Doubles every limit: twice as many permits as asked for, and mismatches named wrong.
    let results = run_shared_flaw(|m, k, o, t, share| {
        let doubled = Share::new(share.weight(), share.limit().saturating_mul(2)).unwrap();
        m.acquire_shared_sync(k, o, t, doubled)
    });
    assert_caught(
        &results,
        &[
            "shared_holds_stay_within_the_limit",
            "a_second_limit_is_refused",
            // Its queue keeps the true limit: the waiter finds the doubled one a mismatch.
            "nobody_passes_a_queued_waiter",
        ],
    );
}

#[test]
fn permits_taken_as_a_lock_are_caught() {
    // Shared holds kept as exclusive rows: one permit at a time.
    let results = run_shared_flaw(|m, k, o, t, _| m.acquire_sync(k, o, t).into());
    let failed = failed(&results);
    for property in [
        "shared_holds_stay_within_the_limit",
        "each_permit_is_its_own_lease",
        "a_second_limit_is_refused",
    ] {
        assert!(
            failed.contains(&property),
            "{property} passed: {results:#?}"
        );
    }
}

#[test]
fn a_newcomer_passing_a_queued_waiter_is_caught() {
    // Waits in the memory store's queue, but a plain acquire_shared ignores the queue: with
    // anyone queued it answers a grant.
    let results = run_shared_flaw(|m, k, o, t, share| {
        if m.waiting() > 0 {
            return SharedGrant::Granted(Grant::new(None));
        }
        m.acquire_shared_sync(k, o, t, share)
    });
    assert!(
        failed(&results).contains(&"nobody_passes_a_queued_waiter"),
        "{results:#?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Metadata and inspect: the memory store with one flaw in what it keeps
// ---------------------------------------------------------------------------------------------

/// What the flawed store does with a hold's metadata.
#[derive(Clone, Copy, PartialEq)]
enum MetadataFlaw {
    /// Keeps the owner token as the hold's metadata: `inspect` shows a token.
    TokenAsMetadata,
    /// Drops it: it says it keeps metadata, and `inspect` shows none.
    Dropped,
}

/// The memory store, its acquires' owners changed as `flaw` says.
struct MetadataFlawed {
    inner: MemoryLockStore<VirtualRuntime>,
    flaw: MetadataFlaw,
}

impl MetadataFlawed {
    fn owner(&self, owner: &OwnerToken) -> OwnerToken {
        let metadata = match self.flaw {
            MetadataFlaw::TokenAsMetadata => Metadata::new(owner.as_str()).ok(),
            MetadataFlaw::Dropped => None,
        };
        owner.clone().with_metadata(metadata)
    }
}

impl LockStore for MetadataFlawed {
    type Error = Infallible;

    fn name(&self) -> &'static str {
        "metadata-flawed"
    }
    async fn acquire(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
    ) -> Result<Option<Grant>, Infallible> {
        self.inner.acquire(key, &self.owner(owner), ttl).await
    }
    async fn release(&self, key: &Key, owner: &OwnerToken) -> Result<bool, Infallible> {
        self.inner.release(key, owner).await
    }
    async fn extend(&self, key: &Key, owner: &OwnerToken, ttl: Ttl) -> Result<bool, Infallible> {
        self.inner.extend(key, owner, ttl).await
    }
    async fn is_locked(&self, key: &Key) -> Result<bool, Infallible> {
        self.inner.is_locked(key).await
    }
    async fn remaining_time(&self, key: &Key) -> Result<Option<u64>, Infallible> {
        self.inner.remaining_time(key).await
    }
    fn keeps_metadata(&self) -> bool {
        true
    }
    async fn inspect(&self, key: &Key) -> Result<Option<LockInfo>, Infallible> {
        self.inner.inspect(key).await
    }
}

fn check_metadata_flaw(flaw: MetadataFlaw) -> Vec<&'static str> {
    let rt = VirtualRuntime::new();
    let store = MetadataFlawed {
        inner: MemoryLockStore::new(rt.clone()),
        flaw,
    };
    failed(&run_kit(&store, &rt, &ConformanceOptions::default()))
}

#[test]
fn a_store_that_shows_a_token_as_metadata_is_caught() {
    assert_eq!(
        check_metadata_flaw(MetadataFlaw::TokenAsMetadata),
        ["inspect_agrees_with_the_holds", "metadata_is_kept_per_hold"]
    );
}

#[test]
fn a_store_that_drops_metadata_is_caught() {
    assert_eq!(
        check_metadata_flaw(MetadataFlaw::Dropped),
        ["metadata_is_kept_per_hold"]
    );
}
