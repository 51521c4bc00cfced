//! The rules for N-holder keys (semaphores), reader/writer keys, sets of keys taken all or
//! nothing, and leaders: for each, a history a correct store may produce and one it may not,
//! with the edges where validity is uncertain and nothing must be flagged.

use super::*;

/// A store's answer as a helper records it.
#[derive(Clone, Copy)]
enum Out {
    Ok(Option<u64>),
    Fail,
    Info,
}

impl H {
    #[allow(clippy::too_many_arguments)]
    fn call(
        &mut self,
        c: u64,
        key: &str,
        owner: &str,
        op: Op,
        sent: Micros,
        answered: Micros,
        ttl: u64,
        immediate: bool,
        holding: Holding,
        out: Out,
    ) -> &mut Self {
        self.ev(
            c,
            key,
            owner,
            sent,
            EventKind::Invoke {
                op,
                ttl_ms: ttl,
                immediate,
                holding,
            },
        );
        let kind = match out {
            Out::Ok(fence) => EventKind::Ok { op, fence },
            Out::Fail => EventKind::Fail { op },
            Out::Info => EventKind::Info { op },
        };
        self.ev(c, key, owner, answered, kind)
    }
    /// A granted immediate acquire of `holding` on "k" with a TTL of `ttl` ms.
    #[allow(clippy::too_many_arguments)]
    fn hold(
        &mut self,
        c: u64,
        owner: &str,
        sent: Micros,
        answered: Micros,
        ttl: u64,
        holding: Holding,
        fence: u64,
    ) -> &mut Self {
        let out = Out::Ok(Some(fence));
        self.call(
            c,
            "k",
            owner,
            Op::Acquire,
            sent,
            answered,
            ttl,
            true,
            holding,
            out,
        )
    }
    /// A waiting acquire of `holding` on "k", sent at `sent` and granted at `answered`.
    fn waited(
        &mut self,
        c: u64,
        owner: &str,
        sent: Micros,
        answered: Micros,
        holding: Holding,
        fence: u64,
    ) -> &mut Self {
        let out = Out::Ok(Some(fence));
        self.call(
            c,
            "k",
            owner,
            Op::Acquire,
            sent,
            answered,
            1000,
            false,
            holding,
            out,
        )
    }
    #[allow(clippy::too_many_arguments)]
    fn on(
        &mut self,
        c: u64,
        key: &str,
        owner: &str,
        op: Op,
        sent: Micros,
        answered: Micros,
        out: Out,
    ) -> &mut Self {
        let ttl = if op == Op::Release { 0 } else { 1000 };
        self.call(
            c,
            key,
            owner,
            op,
            sent,
            answered,
            ttl,
            false,
            Holding::Exclusive,
            out,
        )
    }
    /// One call acquiring `keys` all or nothing (TTL 1000 ms), answered per key by `outs`.
    fn set(
        &mut self,
        c: u64,
        owner: &str,
        keys: &[&str],
        sent: Micros,
        answered: Micros,
        outs: &[Out],
    ) -> &mut Self {
        self.0.push(Event {
            client: c,
            key: String::new(),
            owner: owner.into(),
            at: Stamp::around(sent * MS, 0),
            kind: EventKind::AcquireSet {
                keys: keys.iter().map(|&k| k.to_owned()).collect(),
            },
        });
        for (key, &out) in keys.iter().zip(outs) {
            self.call(
                c,
                key,
                owner,
                Op::Acquire,
                sent,
                answered,
                1000,
                true,
                Holding::Exclusive,
                out,
            );
        }
        self
    }
    /// A campaign for "k" (TTL `ttl` ms), sent at `sent`, leading from `answered` on.
    fn campaign(
        &mut self,
        c: u64,
        owner: &str,
        sent: Micros,
        answered: Micros,
        ttl: u64,
        fence: u64,
    ) -> &mut Self {
        let out = Out::Ok(Some(fence));
        self.call(
            c,
            "k",
            owner,
            Op::Campaign,
            sent,
            answered,
            ttl,
            false,
            Holding::Exclusive,
            out,
        )
    }
    /// A campaign's keep-alive: an extend by `ttl` ms.
    fn keep_alive(
        &mut self,
        c: u64,
        owner: &str,
        sent: Micros,
        answered: Micros,
        ttl: u64,
        out: Out,
    ) -> &mut Self {
        self.call(
            c,
            "k",
            owner,
            Op::Extend,
            sent,
            answered,
            ttl,
            false,
            Holding::Exclusive,
            out,
        )
    }
    fn observed(&mut self, c: u64, observer: &str, at: Micros, fence: Option<u64>) -> &mut Self {
        self.ev(c, "k", observer, at, EventKind::LeaderObserved { fence })
    }
}

fn permits(weight: u64, limit: u64) -> Holding {
    Holding::Shared { weight, limit }
}

fn message_of(r: &Report, kind: ViolationKind) -> String {
    r.violations
        .iter()
        .find(|v| v.kind == kind)
        .map_or_else(|| format!("no {} in {r:?}", kind.name()), |v| v.to_string())
}

// N holders: a counting semaphore.

#[test]
fn permits_above_one_add_up_to_the_limit() {
    // 2 + 2 of 4 fit; 3 + 2 of 4 do not.
    let mut h = H::new();
    h.hold(1, "p1", 0, 2, 1000, permits(2, 4), 1)
        .hold(2, "p2", 10, 12, 1000, permits(2, 4), 2);
    let r = h.check();
    assert_eq!(r.violations, vec![], "{r:?}");
    let mut h = H::new();
    h.hold(1, "p1", 0, 2, 1000, permits(3, 4), 1)
        .hold(2, "p2", 10, 12, 1000, permits(2, 4), 2);
    let r = h.check();
    assert_eq!(kinds(&r), vec![ViolationKind::OverLimit], "{r:?}");
    let message = message_of(&r, ViolationKind::OverLimit);
    assert!(message.starts_with("over_limit on \"k\""), "{message}");
    assert!(message.contains("5 permits of 4"), "{message}");
    assert!(message.contains("3 of 4 permits"), "{message}");
}

#[test]
fn a_permit_that_may_have_expired_is_not_counted() {
    // One permit of one, TTL 100 ms from a send at 0: certainly valid until 95 ms (the 5 ms
    // tolerance), possibly until 107 ms. A second permit granted at 99 ms proves nothing …
    let second_at = |answered: Micros| {
        let mut h = H::new();
        h.hold(1, "p1", 0, 2, 100, permits(1, 1), 1).hold(
            2,
            "p2",
            answered - 2,
            answered,
            1000,
            permits(1, 1),
            2,
        );
        h.check()
    };
    let r = second_at(99);
    assert_eq!(r.violations, vec![], "{r:?}");
    // … one granted at 50 ms, while the first is certainly valid, is one too many.
    assert_eq!(kinds(&second_at(50)), vec![ViolationKind::OverLimit]);
    // A permit whose grant is unknown (an error, a timeout) is not counted either.
    let mut h = H::new();
    h.call(
        1,
        "k",
        "p1",
        Op::Acquire,
        0,
        2,
        1000,
        true,
        permits(1, 1),
        Out::Info,
    )
    .hold(2, "p2", 10, 12, 1000, permits(1, 1), 2);
    let r = h.check();
    assert_eq!(r.violations, vec![], "{r:?}");
}

#[test]
fn a_waiting_permit_granted_when_one_is_released_passes() {
    // Two of two held; a third waits and is handed the permit p1 releases.
    let mut h = H::new();
    h.hold(1, "p1", 0, 2, 1000, permits(1, 2), 1)
        .hold(2, "p2", 5, 7, 1000, permits(1, 2), 2)
        .waited(3, "p3", 10, 52, permits(1, 2), 3)
        .on(1, "k", "p1", Op::Release, 50, 51, Out::Ok(None));
    let r = h.check();
    assert_eq!(r.violations, vec![], "{r:?}");
    // Handed over before p1's release was even sent: three permits of two.
    let mut h = H::new();
    h.hold(1, "p1", 0, 2, 1000, permits(1, 2), 1)
        .hold(2, "p2", 5, 7, 1000, permits(1, 2), 2)
        .waited(3, "p3", 10, 30, permits(1, 2), 3)
        .on(1, "k", "p1", Op::Release, 50, 51, Out::Ok(None));
    assert_eq!(kinds(&h.check()), vec![ViolationKind::OverLimit]);
}

// Readers and writers: a read lock is one permit of a limit nobody reaches.

#[test]
fn read_locks_under_the_api_limit_and_under_none_are_one_kind() {
    let api = permits(1, Holding::READ_LIMIT);
    assert!(api.is_read() && Holding::READ.is_read() && !permits(1, 2).is_read());
    let mut h = H::new();
    h.hold(1, "r1", 0, 2, 1000, api, 1)
        .hold(2, "r2", 5, 7, 1000, Holding::READ, 2)
        .hold(3, "r3", 9, 11, 1000, api, 3);
    let r = h.check();
    assert_eq!(r.violations, vec![], "{r:?}");
    // A writer beside them is named as such.
    h.hold(4, "w", 20, 22, 1000, Holding::Exclusive, 4);
    let r = h.check();
    assert_eq!(kinds(&r), vec![ViolationKind::MutualExclusion], "{r:?}");
    let message = message_of(&r, ViolationKind::MutualExclusion);
    assert!(message.contains("an exclusive hold"), "{message}");
    assert!(message.contains("read lock"), "{message}");
}

#[test]
fn a_reader_queued_behind_a_writer_may_share_only_once_it_is_gone() {
    // The writer holds; a reader waits and is handed the key at the writer's release, and
    // another reader joins it.
    let mut h = H::new();
    h.hold(1, "w", 0, 2, 1000, Holding::Exclusive, 1)
        .waited(2, "r1", 10, 53, Holding::READ, 2)
        .on(1, "k", "w", Op::Release, 50, 51, Out::Ok(None))
        .hold(3, "r2", 60, 62, 1000, Holding::READ, 3);
    let r = h.check();
    assert_eq!(r.violations, vec![], "{r:?}");
    // Granted before the writer let go.
    let mut h = H::new();
    h.hold(1, "w", 0, 2, 1000, Holding::Exclusive, 1)
        .waited(2, "r1", 10, 30, Holding::READ, 2)
        .on(1, "k", "w", Op::Release, 50, 51, Out::Ok(None));
    let r = h.check();
    assert_eq!(kinds(&r), vec![ViolationKind::MutualExclusion], "{r:?}");
    // A second writer queued behind readers is granted once they are gone.
    let mut h = H::new();
    h.hold(1, "r1", 0, 2, 1000, Holding::READ, 1)
        .hold(2, "r2", 3, 5, 1000, Holding::READ, 2)
        .waited(3, "w", 10, 42, Holding::Exclusive, 3)
        .on(1, "k", "r1", Op::Release, 30, 31, Out::Ok(None))
        .on(2, "k", "r2", Op::Release, 40, 41, Out::Ok(None));
    let r = h.check();
    assert_eq!(r.violations, vec![], "{r:?}");
}

#[test]
fn a_writer_that_may_have_expired_does_not_clash_with_a_reader() {
    // The writer's 100 ms lease is certain until 95 ms; a reader granted at 99 ms may have
    // followed its expiry.
    let mut h = H::new();
    h.hold(1, "w", 0, 2, 100, Holding::Exclusive, 1)
        .hold(2, "r", 97, 99, 1000, Holding::READ, 2);
    let r = h.check();
    assert_eq!(r.violations, vec![], "{r:?}");
}

// Several keys, all or nothing.

fn granted_set() -> H {
    let mut h = H::new();
    h.set(
        1,
        "s",
        &["a", "b"],
        0,
        2,
        &[Out::Ok(Some(1)), Out::Ok(Some(1))],
    )
    .on(1, "a", "s", Op::Extend, 100, 101, Out::Ok(None))
    .on(1, "b", "s", Op::Extend, 100, 101, Out::Ok(None))
    .on(1, "a", "s", Op::Release, 200, 201, Out::Ok(None))
    .on(1, "b", "s", Op::Release, 200, 201, Out::Ok(None))
    .call(
        2,
        "b",
        "t",
        Op::Acquire,
        210,
        211,
        1000,
        true,
        Holding::Exclusive,
        Out::Ok(Some(3)),
    );
    h
}

#[test]
fn a_set_held_whole_passes() {
    let r = granted_set().check();
    assert_eq!(r.violations, vec![], "{r:?}");
    assert_eq!(r.operations, 7);
}

#[test]
fn a_set_granted_on_some_keys_and_refused_on_others_is_caught() {
    let mut h = H::new();
    h.set(
        1,
        "s",
        &["a", "b", "c"],
        0,
        2,
        &[Out::Ok(Some(1)), Out::Fail, Out::Ok(Some(1))],
    );
    let r = h.check();
    assert_eq!(kinds(&r), vec![ViolationKind::PartialSet], "{r:?}");
    let message = message_of(&r, ViolationKind::PartialSet);
    assert!(message.starts_with("partial_set on \"b\""), "{message}");
    assert!(message.contains("[a, b, c]"), "{message}");
    // An unknown answer on one key proves nothing about the others.
    let mut h = H::new();
    h.set(1, "s", &["a", "b"], 0, 2, &[Out::Ok(Some(1)), Out::Info]);
    let r = h.check();
    assert_eq!(r.violations, vec![], "{r:?}");
}

#[test]
fn a_key_of_a_refused_set_still_held_after_the_answer_is_caught() {
    let refused_then = |release: Out| {
        let mut h = H::new();
        // "b" is held by another: the set's refusal is right.
        h.call(
            3,
            "b",
            "x",
            Op::Acquire,
            0,
            0,
            1000,
            true,
            Holding::Exclusive,
            Out::Ok(Some(1)),
        )
        .set(1, "s", &["a", "b"], 0, 10, &[Out::Fail, Out::Fail])
        .on(1, "a", "s", Op::Release, 20, 21, release);
        h.check()
    };
    let r = refused_then(Out::Ok(None));
    // Reported once, as the set's: not also as a stranger's release.
    assert_eq!(kinds(&r), vec![ViolationKind::PartialSet], "{r:?}");
    assert!(message_of(&r, ViolationKind::PartialSet).contains("after its set [a, b] was refused"));
    let r = refused_then(Out::Fail);
    assert_eq!(r.violations, vec![], "{r:?}");
}

#[test]
fn a_set_refused_while_all_its_keys_were_certainly_free_is_caught() {
    // "a" was held until its lease certainly ran out; "b" never was.
    let refused_at = |at: Micros, immediate: bool| {
        let mut h = H::new();
        h.call(
            3,
            "a",
            "x",
            Op::Acquire,
            0,
            1,
            100,
            true,
            Holding::Exclusive,
            Out::Ok(Some(1)),
        );
        h.ev(
            1,
            "",
            "s",
            at,
            EventKind::AcquireSet {
                keys: vec!["a".into(), "b".into()],
            },
        );
        for key in ["a", "b"] {
            h.call(
                1,
                key,
                "s",
                Op::Acquire,
                at,
                at + 2,
                1000,
                immediate,
                Holding::Exclusive,
                Out::Fail,
            );
        }
        h.check()
    };
    let r = refused_at(300, true);
    assert_eq!(kinds(&r), vec![ViolationKind::RefusedWhileFree], "{r:?}");
    assert!(message_of(&r, ViolationKind::RefusedWhileFree).contains("the set [a, b] by s"));
    // While "a" may still be held, the refusal is right; a waiting set's no proves nothing.
    assert_eq!(refused_at(50, true).violations, vec![]);
    assert_eq!(refused_at(300, false).violations, vec![]);
}

#[test]
fn a_refused_set_may_have_held_its_keys_only_while_it_asked() {
    // A set taken one key at a time holds "a" while it asks for "b", and frees it before it
    // answers no: another immediate acquire of "a" refused meanwhile is no violation …
    let other_refused_at = |at: Micros| {
        let mut h = H::new();
        h.call(
            3,
            "b",
            "x",
            Op::Acquire,
            0,
            1,
            1000,
            true,
            Holding::Exclusive,
            Out::Ok(Some(1)),
        )
        .set(1, "s", &["a", "b"], 2, 10, &[Out::Fail, Out::Fail])
        .call(
            2,
            "a",
            "o",
            Op::Acquire,
            at,
            at + 1,
            1000,
            true,
            Holding::Exclusive,
            Out::Fail,
        );
        h.check()
    };
    let r = other_refused_at(4);
    assert_eq!(r.violations, vec![], "{r:?}");
    // … but once the set answered, "a" was certainly free.
    let r = other_refused_at(20);
    assert_eq!(kinds(&r), vec![ViolationKind::RefusedWhileFree], "{r:?}");
}

#[test]
fn a_granted_set_whose_key_the_store_disowns_is_caught() {
    // Granted [a, b], but the extend of "b" is refused while that hold is certainly valid.
    let mut h = H::new();
    h.set(
        1,
        "s",
        &["a", "b"],
        0,
        2,
        &[Out::Ok(Some(1)), Out::Ok(Some(1))],
    )
    .on(1, "a", "s", Op::Extend, 100, 101, Out::Ok(None))
    .on(1, "b", "s", Op::Extend, 100, 101, Out::Fail);
    let r = h.check();
    assert_eq!(kinds(&r), vec![ViolationKind::PartialSet], "{r:?}");
    let message = message_of(&r, ViolationKind::PartialSet);
    assert!(message.contains("refused its extend of \"b\""), "{message}");
    // Refused once the hold may have expired (1000 ms TTL, 5 ms tolerance): no proof.
    let mut h = H::new();
    h.set(
        1,
        "s",
        &["a", "b"],
        0,
        2,
        &[Out::Ok(Some(1)), Out::Ok(Some(1))],
    )
    .on(1, "b", "s", Op::Extend, 996, 997, Out::Fail);
    let r = h.check();
    assert_eq!(r.violations, vec![], "{r:?}");
}

#[test]
fn each_key_of_a_set_keeps_its_own_exclusion() {
    // Another owner granted "b" (for 100 ms) while the set certainly holds it.
    let mut h = granted_set();
    h.call(
        3,
        "b",
        "u",
        Op::Acquire,
        50,
        52,
        100,
        true,
        Holding::Exclusive,
        Out::Ok(Some(2)),
    );
    let r = h.check();
    assert_eq!(kinds(&r), vec![ViolationKind::MutualExclusion], "{r:?}");
    assert_eq!(r.violations[0].key, "b");
}

#[test]
fn a_set_naming_a_key_it_never_acquired_is_malformed() {
    let mut h = H::new();
    h.set(1, "s", &["a"], 0, 2, &[Out::Ok(Some(1))]);
    h.0[0].kind = EventKind::AcquireSet {
        keys: vec!["a".into(), "z".into()],
    };
    let r = h.check();
    assert_eq!(kinds(&r), vec![ViolationKind::Malformed], "{r:?}");
}

// Leaders.

/// A leads from 2 ms (fence 1), kept alive, and resigns at 120 ms; B, campaigning since 1 ms,
/// leads from 122 ms (fence 2) and is kept alive; an observer sees A, nobody, B.
fn succession() -> H {
    let mut h = H::new();
    h.campaign(1, "A", 0, 2, 100, 1)
        .keep_alive(1, "A", 50, 51, 100, Out::Ok(None))
        .keep_alive(1, "A", 100, 101, 100, Out::Ok(None))
        .on(1, "k", "A", Op::Release, 120, 121, Out::Ok(None))
        .campaign(2, "B", 1, 122, 100, 2)
        .keep_alive(2, "B", 170, 171, 100, Out::Ok(None))
        .observed(3, "o", 10, Some(1))
        .observed(3, "o", 121, None)
        .observed(3, "o", 130, Some(2));
    h
}

#[test]
fn leaders_one_after_another_pass() {
    let r = succession().check();
    assert_eq!(r.violations, vec![], "{r:?}");
}

#[test]
fn two_leaders_at_once_are_caught() {
    // A waited 300 ms, so its own TTL from the campaign's start proves nothing; its keep-alives
    // do: certainly leading until 420 + 100 − 5 ms. B, which waited too, leads from 430 ms,
    // certainly so by its own keep-alive.
    let mut h = H::new();
    h.campaign(1, "A", 0, 300, 100, 1)
        .keep_alive(1, "A", 350, 351, 100, Out::Ok(None))
        .keep_alive(1, "A", 420, 421, 100, Out::Ok(None))
        .campaign(2, "B", 5, 430, 100, 2)
        .keep_alive(2, "B", 440, 441, 100, Out::Ok(None));
    let r = h.check();
    assert_eq!(kinds(&r), vec![ViolationKind::TwoLeaders], "{r:?}");
    let message = message_of(&r, ViolationKind::TwoLeaders);
    assert!(message.contains("two certainly valid leaders"), "{message}");
    assert!(message.contains("A (fence 1, leader"), "{message}");
}

#[test]
fn a_leader_that_may_have_lost_its_term_is_not_a_second_leader() {
    // A is certainly leading until 350 + 100 − 5 ms by its first keep-alive; B leads from
    // 450 ms (kept alive). Whether they overlap hangs on A's second keep-alive, at 420 ms.
    let second_keep_alive = |out: Out| {
        let mut h = H::new();
        h.campaign(1, "A", 0, 300, 100, 1)
            .keep_alive(1, "A", 350, 351, 100, Out::Ok(None))
            .keep_alive(1, "A", 420, 421, 100, out)
            .campaign(2, "B", 5, 450, 100, 2)
            .keep_alive(2, "B", 460, 461, 100, Out::Ok(None));
        h.check()
    };
    // Answered yes: A leads until 515 ms, beside B.
    assert_eq!(
        kinds(&second_keep_alive(Out::Ok(None))),
        vec![ViolationKind::TwoLeaders]
    );
    // Unanswered, it may have failed; refused, it proves no longer term: A may have lost
    // leadership at 445 ms, before B's.
    for out in [Out::Info, Out::Fail] {
        let r = second_keep_alive(out);
        assert_eq!(r.violations, vec![], "{r:?}");
    }
}

#[test]
fn leaders_fences_must_follow_the_grant_order() {
    // B campaigned before A was answered, so invocations order nothing; but A led first.
    let fences = |b: u64, keep_b_alive: bool| {
        let mut h = H::new();
        h.campaign(1, "A", 0, 5, 100, 7)
            .on(1, "k", "A", Op::Release, 50, 51, Out::Ok(None))
            .campaign(2, "B", 1, 52, 100, b);
        if keep_b_alive {
            h.keep_alive(2, "B", 60, 61, 100, Out::Ok(None));
        }
        h.check()
    };
    let r = fences(3, true);
    assert_eq!(kinds(&r), vec![ViolationKind::LeaderOrder], "{r:?}");
    let message = message_of(&r, ViolationKind::LeaderOrder);
    assert!(message.contains("granted after leader A"), "{message}");
    assert!(fences(8, true).ok());
    // B sent at 1 ms with a 100 ms TTL: certainly leading from 52 until 96 ms even without a
    // keep-alive, so the order is proven then too.
    assert_eq!(kinds(&fences(3, false)), vec![ViolationKind::LeaderOrder]);
    // B's term never certain (it waited past its TTL and was not kept alive): no proof.
    let mut h = H::new();
    h.campaign(1, "A", 0, 5, 100, 7)
        .on(1, "k", "A", Op::Release, 150, 151, Out::Ok(None))
        .campaign(2, "B", 1, 152, 100, 3);
    let r = h.check();
    assert_eq!(r.violations, vec![], "{r:?}");
}

#[test]
fn a_fence_regression_the_invocations_prove_is_reported_once() {
    // C campaigned after A was answered: the plain fence order proves it, and the leader rule
    // does not say it again.
    let mut h = H::new();
    h.campaign(1, "A", 0, 5, 100, 7)
        .on(1, "k", "A", Op::Release, 50, 51, Out::Ok(None))
        .campaign(2, "C", 10, 52, 100, 3);
    let r = h.check();
    assert_eq!(kinds(&r), vec![ViolationKind::FenceOrder], "{r:?}");
}

#[test]
fn a_leader_order_across_a_lossy_restart_is_a_loss() {
    let mut h = H::new();
    h.campaign(1, "A", 0, 5, 1000, 7)
        .restart(20, 30, false)
        .campaign(2, "B", 1, 40, 1000, 1);
    let r = h.check();
    assert!(r.ok(), "{r:?}");
    let lost: Vec<_> = r.losses.iter().map(|v| v.kind).collect();
    assert!(lost.contains(&ViolationKind::LeaderOrder), "{r:?}");
    assert!(lost.contains(&ViolationKind::TwoLeaders), "{r:?}");
}

#[test]
fn an_observer_told_leaders_out_of_order_is_caught() {
    let told = |fences: &[Option<u64>]| {
        let mut h = succession();
        for (n, &f) in fences.iter().enumerate() {
            h.observed(4, "p", 200 + n as Micros, f);
        }
        h.check()
    };
    assert!(told(&[Some(1), None, Some(2)]).ok());
    let r = told(&[Some(2), Some(1)]);
    assert_eq!(kinds(&r), vec![ViolationKind::ObserveOrder], "{r:?}");
    let message = message_of(&r, ViolationKind::ObserveOrder);
    assert!(
        message.contains("fence 1 after the one with fence 2"),
        "{message}"
    );
    // The same leader twice, with nobody in between.
    assert_eq!(
        kinds(&told(&[Some(2), None, Some(2)])),
        vec![ViolationKind::ObserveOrder]
    );
    // Two observers are each judged in their own order.
    let mut h = succession();
    h.observed(4, "p", 5, Some(2)).observed(5, "q", 6, Some(1));
    let r = h.check();
    assert_eq!(r.violations, vec![], "{r:?}");
}
