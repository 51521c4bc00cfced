//! N holders (a counting semaphore), and readers beside writers.

use super::*;

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
