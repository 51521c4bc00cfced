//! Histories of lock operations as clients saw them, and a checker that finds what a correct
//! store could not have produced.
//!
//! Clients record [`Event`]s: the invocation and outcome of each `acquire`, `release` and
//! `extend` (an outcome is `Ok`, `Fail` — the store definitely said no — or `Info`, unknown: the
//! call errored, timed out or its process died), entering and leaving the critical section,
//! writes to a fenced resource, and store restarts. The model follows Jepsen's
//! invoke/ok/fail/info histories; the checks are specific to leases.
//!
//! **Time.** Every event carries a [`Stamp`]: an interval `[earliest, latest]` of a clock all
//! clients share (microseconds), inside which the event really happened. A client takes the
//! invocation stamp before sending a request and the outcome stamp after the answer arrived,
//! widened by its clock's error. The checker flags only what holds for *every* placement of
//! events within their intervals, so a slow or loaded machine widens intervals and can hide a
//! violation, but never invents one.
//!
//! **What a grant proves.** A store grants at some instant between the acquire's invocation and
//! its answer, and a lease lasts `ttl` from the grant by the store's clock. So a lease is
//! certainly valid from the answer (`ok.latest`) until `invoke.earliest + ttl` (pushed later by
//! each successful extend, cut short by the owner's release), less
//! [`CheckOptions::lease_tolerance_us`] for the store clock's granularity; and it certainly
//! ended by `ok.latest + ttl` (plus the tolerance, later for extends) unless released sooner.
//!
//! **Properties** ([`ViolationKind`]): no two owners hold certainly valid leases on one key at
//! once; fences strictly increase per key in grant order; a fenced resource never accepts a
//! write with a lower fence after a higher one; release and extend succeed only for the live
//! owner; an immediate acquire is never refused while the key is certainly free (what catches a
//! store that never expires). A store restart marked non-persistent turns the overlaps and fence
//! regressions it causes, and refusals within a TTL after it (a lost release may bring a lease
//! back), into documented [`Report::losses`] instead of violations.
//!
//! **Shapes beyond the lock.** Shared holds (a semaphore's permits, read locks) may overlap up
//! to their limit, never beside an exclusive hold (a write lock). A set of keys acquired all or
//! nothing ([`EventKind::AcquireSet`]) is judged per key as usual, and as a whole: once its call
//! answered it held every key or none. Campaigns ([`Op::Campaign`]) are exclusive acquires whose
//! holders are leaders: never two certainly valid at once, fences increasing in the order
//! exclusion shows leadership was granted, and each observer ([`EventKind::LeaderObserved`])
//! told them in fence order.
//!
//! **Assumption about unknown outcomes.** An `Info` acquire may have been granted, at any time up
//! to its `Info` stamp (and then hold the key for its TTL); a waiting (not immediate) acquire that
//! answered no may have been handed the key while it waited, and given it back by its answer (a
//! store answers a waiter's grant or takes it back when the wait ends); an acquire with no outcome at all (its process died) may have been granted at any later time,
//! so it keeps its key "possibly held" for the rest of the history.

use std::collections::HashMap;

mod checks;
mod events;
mod leaders;
mod leases;
mod report;
mod sets;
#[cfg(test)]
mod tests;

pub use events::*;
use leases::Checker;
pub use report::*;

/// Checks `history` (in any order; indexes in the report refer to this slice).
pub fn check(history: &[Event], options: &CheckOptions) -> Report {
    let mut checker = Checker {
        history,
        options,
        report: Report::default(),
        restarts: Vec::new(),
        reported: HashMap::new(),
        sets: Vec::new(),
        set_of: HashMap::new(),
    };
    let mut keys = checker.collect();
    for (key, h) in &mut keys {
        checker.bound_leases(h);
        checker.mutual_exclusion(key, h);
        let flagged = checker.fence_order(key, h);
        checker.leader_order(key, h, &flagged);
        checker.observe_order(key, h);
        checker.stale_writes(key, h);
        checker.non_owner(key, h);
        checker.refused_while_free(key, h);
    }
    checker.all_or_nothing(&keys);
    checker.report.restarts = checker.restarts.len();
    checker.report
}
