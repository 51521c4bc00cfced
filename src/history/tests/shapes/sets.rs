//! Several keys, all or nothing.

use super::*;

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
    .at_once(2, "b", "t", 210, 211, 1000, Out::Ok(Some(3)));
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
        h.at_once(3, "b", "x", 0, 0, 1000, Out::Ok(Some(1)))
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
        h.at_once(3, "a", "x", 0, 1, 100, Out::Ok(Some(1)));
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
        h.at_once(3, "b", "x", 0, 1, 1000, Out::Ok(Some(1)))
            .set(1, "s", &["a", "b"], 2, 10, &[Out::Fail, Out::Fail])
            .at_once(2, "a", "o", at, at + 1, 1000, Out::Fail);
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
    h.at_once(3, "b", "u", 50, 52, 100, Out::Ok(Some(2)));
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
