//! How the checker is told to judge, and what it found.

use std::fmt;

use super::events::*;

/// Knobs for [`check`](super::check).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckOptions {
    /// How far a store's expiry may be off from `grant + ttl` on the shared clock (its clock's
    /// granularity and offset), in µs. Certain validity ends this much earlier, possible
    /// validity this much later. Default 5 ms.
    pub lease_tolerance_us: Micros,
    /// Violations of each kind to report at most (the count keeps going). Default 100.
    pub max_reported: usize,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            lease_tolerance_us: 5_000,
            max_reported: 100,
        }
    }
}

/// Which property a history broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ViolationKind {
    /// Two owners held certainly valid leases on one key at the same instant, one of them
    /// exclusive.
    MutualExclusion,
    /// Certainly valid shared holds on one key took more permits at one instant than their
    /// limit.
    OverLimit,
    /// Certainly valid shared holds on one key named different limits at one instant (a store
    /// must refuse a limit other than the one the key is held under).
    LimitMismatch,
    /// A grant's fence was not greater than a grant's that certainly came before it on the same
    /// key (or two grants of one key had the same fence).
    FenceOrder,
    /// A fenced resource accepted a write whose fence was lower than one it had certainly
    /// accepted before.
    StaleFenceAccepted,
    /// A release or extend succeeded for an owner that did not hold the key (never acquired it,
    /// had released it, or its lease had certainly expired and been granted to another).
    NonOwnerSucceeded,
    /// An immediate acquire was refused while the key was certainly free.
    RefusedWhileFree,
    /// A set of keys acquired all or nothing was held in part: one call granted some of its keys
    /// and refused others, the owner still held a key of a set its call refused, or the store
    /// refused the owner's release or extend of a key of a granted set while that hold was
    /// certainly valid.
    PartialSet,
    /// Two campaigns held certainly valid leadership of one key at the same instant.
    TwoLeaders,
    /// A leader's fence was not greater than that of a leader certainly granted before it (the
    /// grant order a waiting campaign's invocation cannot show, read from when each leader
    /// certainly held the key).
    LeaderOrder,
    /// An observer was told a leader whose fence was not greater than one it had been told
    /// before (each leader is reported once, in fence order).
    ObserveOrder,
    /// The history itself is inconsistent (an outcome without an invocation, a set naming a key
    /// its owner never acquired).
    Malformed,
}

impl ViolationKind {
    /// The kind's name in reports: `mutual_exclusion`, `fence_order`, ….
    pub fn name(self) -> &'static str {
        match self {
            ViolationKind::MutualExclusion => "mutual_exclusion",
            ViolationKind::OverLimit => "over_limit",
            ViolationKind::LimitMismatch => "limit_mismatch",
            ViolationKind::FenceOrder => "fence_order",
            ViolationKind::StaleFenceAccepted => "stale_fence_accepted",
            ViolationKind::NonOwnerSucceeded => "non_owner_succeeded",
            ViolationKind::RefusedWhileFree => "refused_while_free",
            ViolationKind::PartialSet => "partial_set",
            ViolationKind::TwoLeaders => "two_leaders",
            ViolationKind::LeaderOrder => "leader_order",
            ViolationKind::ObserveOrder => "observe_order",
            ViolationKind::Malformed => "malformed_history",
        }
    }
}

/// A property the history broke, with the offending events (indexes into the history).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The property.
    pub kind: ViolationKind,
    /// The key.
    pub key: String,
    /// What was observed.
    pub message: String,
    /// The events that prove it, as indexes into the checked slice.
    pub events: Vec<usize>,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} on {:?}: {} (events {:?})",
            self.kind.name(),
            self.key,
            self.message,
            self.events
        )
    }
}

/// The checker's verdict.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Operations in the history (invocations).
    pub operations: usize,
    /// Broken properties, at most [`CheckOptions::max_reported`] of each kind.
    pub violations: Vec<Violation>,
    /// How many violations there were in all.
    pub violation_count: usize,
    /// Overlaps, fence regressions and refusals explained by a store restart marked
    /// non-persistent: the store lost its state, as documented — detected and reported, not
    /// counted as violations.
    pub losses: Vec<Violation>,
    /// How many losses there were in all (the list is capped like the violations).
    pub loss_count: usize,
    /// Store restarts in the history.
    pub restarts: usize,
}

impl Report {
    /// No violations.
    pub fn ok(&self) -> bool {
        self.violation_count == 0
    }
}
