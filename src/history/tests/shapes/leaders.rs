//! Leaders: one at a time, in fence order, told in order.

use super::*;

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
