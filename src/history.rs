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
//! regressions it causes into documented [`Report::losses`] instead of violations.
//!
//! **Assumption about unknown outcomes.** An `Info` acquire may have been granted, at any time up
//! to its `Info` stamp (and then hold the key for its TTL); a waiting (not immediate) acquire that
//! answered no may have been handed the key while it waited, and given it back by its answer (a
//! store answers a waiter's grant or takes it back when the wait ends); an acquire with no outcome at all (its process died) may have been granted at any later time,
//! so it keeps its key "possibly held" for the rest of the history.

use std::collections::HashMap;
use std::fmt;

/// Microseconds on the clock the clients share (e.g. the Unix epoch).
pub type Micros = i64;

/// When an event happened: certainly within `[earliest, latest]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// The event happened no earlier than this.
    pub earliest: Micros,
    /// The event happened no later than this.
    pub latest: Micros,
}

impl Stamp {
    /// `[earliest, latest]`; the bounds are swapped if given the wrong way round.
    pub fn new(earliest: Micros, latest: Micros) -> Self {
        Stamp {
            earliest: earliest.min(latest),
            latest: earliest.max(latest),
        }
    }

    /// An instant known to within `±tolerance`.
    pub fn around(at: Micros, tolerance: Micros) -> Self {
        Stamp::new(at.saturating_sub(tolerance), at.saturating_add(tolerance))
    }
}

/// A store operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// Take the key.
    Acquire,
    /// Free the key (the owner's own hold only).
    Release,
    /// Push the expiry back (the owner's own hold only).
    Extend,
}

impl Op {
    /// The operation's name in a history: `acquire`, `release`, `extend`.
    pub fn name(self) -> &'static str {
        match self {
            Op::Acquire => "acquire",
            Op::Release => "release",
            Op::Extend => "extend",
        }
    }
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    /// The client sent `op`. `ttl_ms` is the TTL requested (acquire, extend); `immediate` marks
    /// an acquire that is one store call, not a wait (only those are judged by the
    /// refused-while-free check).
    Invoke {
        /// The operation.
        op: Op,
        /// TTL requested, in ms (0 for release).
        ttl_ms: u64,
        /// A single-call acquire (no waiting, no retries).
        immediate: bool,
    },
    /// The store answered yes: granted (with its fence, if it keeps them), released, extended.
    Ok {
        /// The operation.
        op: Op,
        /// An acquire's fence.
        fence: Option<u64>,
    },
    /// The store answered no.
    Fail {
        /// The operation.
        op: Op,
    },
    /// The outcome is unknown (an error, a timeout).
    Info {
        /// The operation.
        op: Op,
    },
    /// The owner entered its critical section.
    Enter,
    /// The owner left its critical section.
    Exit,
    /// The owner learned its lease was gone (a refused extend, the local deadline).
    ExpiryObserved,
    /// The owner wrote to a fenced resource guarded by `key`; the stamp spans the write call.
    FencedWrite {
        /// The fence the write carried.
        fence: u64,
        /// Whether the resource accepted it.
        accepted: bool,
    },
    /// The store was stopped and started again, somewhere within the stamp. `persistent`: the
    /// store claims to keep its state across the restart.
    StoreRestart {
        /// The store claims durability.
        persistent: bool,
    },
}

/// One recorded event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The client (process, task) that recorded it; operations of one client on one owner are
    /// sequential.
    pub client: u64,
    /// The lock's key (empty for a store restart, which concerns every key).
    pub key: String,
    /// The hold this concerns: a label unique per acquisition (not necessarily the store's
    /// owner token). A deliberate stranger's release or extend uses a label of its own.
    pub owner: String,
    /// When.
    pub at: Stamp,
    /// What.
    pub kind: EventKind,
}

/// Knobs for [`check`].
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
    /// Two owners held certainly valid leases on one key at the same instant.
    MutualExclusion,
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
    /// The history itself is inconsistent (an outcome without an invocation).
    Malformed,
}

impl ViolationKind {
    /// The kind's name in reports: `mutual_exclusion`, `fence_order`, ….
    pub fn name(self) -> &'static str {
        match self {
            ViolationKind::MutualExclusion => "mutual_exclusion",
            ViolationKind::FenceOrder => "fence_order",
            ViolationKind::StaleFenceAccepted => "stale_fence_accepted",
            ViolationKind::NonOwnerSucceeded => "non_owner_succeeded",
            ViolationKind::RefusedWhileFree => "refused_while_free",
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
    /// Overlaps and fence regressions explained by a store restart marked non-persistent: the
    /// store lost its state, as documented — detected and reported, not counted as violations.
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

/// One acquisition as the history shows it.
#[derive(Debug, Clone)]
struct Lease {
    owner: String,
    invoke: usize,
    /// The `Ok` or `Info` outcome; `None`: no outcome at all.
    outcome: Option<usize>,
    granted: bool,
    /// A waiting acquire that answered no: possibly held only until its answer.
    gave_up: bool,
    fence: Option<u64>,
    /// Certainly valid over `[valid_from, valid_until]` (granted leases only; may be empty).
    valid_from: Micros,
    valid_until: Micros,
    /// Possibly valid from `possible_from` until `possible_until`.
    possible_from: Micros,
    possible_until: Micros,
    /// The section's `Enter`, if any.
    entered: Option<usize>,
}

struct Pending {
    op: Op,
    invoke: usize,
    ttl_us: Micros,
    immediate: bool,
}

/// A finished operation other than acquire.
struct Call {
    op: Op,
    owner: String,
    invoke: usize,
    outcome: Option<usize>,
    result: Outcome,
    ttl_us: Micros,
    immediate: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Ok,
    Fail,
    Unknown,
}

#[derive(Default)]
struct KeyHistory {
    leases: Vec<Lease>,
    calls: Vec<Call>,
    writes: Vec<usize>,
}

struct Checker<'a> {
    history: &'a [Event],
    options: &'a CheckOptions,
    report: Report,
    /// Restarts: (stamp, persistent).
    restarts: Vec<(Stamp, bool)>,
    /// Violations so far, per kind.
    reported: HashMap<ViolationKind, usize>,
}

/// Checks `history` (in any order; indexes in the report refer to this slice).
pub fn check(history: &[Event], options: &CheckOptions) -> Report {
    let mut checker = Checker {
        history,
        options,
        report: Report::default(),
        restarts: Vec::new(),
        reported: HashMap::new(),
    };
    let keys = checker.collect();
    for (key, mut h) in keys {
        checker.bound_leases(&mut h);
        checker.mutual_exclusion(&key, &h);
        checker.fence_order(&key, &h);
        checker.stale_writes(&key, &h);
        checker.non_owner(&key, &h);
        checker.refused_while_free(&key, &h);
    }
    checker.report.restarts = checker.restarts.len();
    checker.report
}

const TTL_US_MAX: Micros = Micros::MAX / 4;

impl Checker<'_> {
    fn at(&self, i: usize) -> Stamp {
        self.history[i].at
    }

    fn violate(&mut self, kind: ViolationKind, key: &str, message: String, events: Vec<usize>) {
        self.report.violation_count += 1;
        let shown = self.reported.entry(kind).or_insert(0);
        *shown += 1;
        if *shown <= self.options.max_reported {
            self.report.violations.push(Violation {
                kind,
                key: key.to_owned(),
                message,
                events,
            });
        }
    }

    /// A non-persistent restart certainly between `before` and `after` (instants), if any.
    fn lossy_restart_between(&self, before: Micros, after: Micros) -> Option<Stamp> {
        self.restarts
            .iter()
            .find(|(s, persistent)| !persistent && s.latest >= before && s.earliest <= after)
            .map(|(s, _)| *s)
    }

    /// Reports a broken property, or a documented loss when a non-persistent restart lies
    /// between the two events' instants.
    fn violate_or_loss(
        &mut self,
        kind: ViolationKind,
        key: &str,
        message: String,
        events: Vec<usize>,
        window: (Micros, Micros),
    ) {
        if let Some(restart) = self.lossy_restart_between(window.0, window.1) {
            self.report.loss_count += 1;
            if self.report.losses.len() < self.options.max_reported {
                self.report.losses.push(Violation {
                    kind,
                    key: key.to_owned(),
                    message: format!(
                        "{message} — across a non-persistent store restart at [{}, {}]",
                        restart.earliest, restart.latest
                    ),
                    events,
                });
            }
        } else {
            self.violate(kind, key, message, events);
        }
    }

    /// Pairs invocations with outcomes, per key.
    fn collect(&mut self) -> Vec<(String, KeyHistory)> {
        let mut order: Vec<usize> = (0..self.history.len()).collect();
        // Process events in an order consistent with each client's own sequence.
        order.sort_by_key(|&i| (self.history[i].at.earliest, self.history[i].at.latest, i));
        let mut keys: HashMap<&str, KeyHistory> = HashMap::new();
        let mut pending: HashMap<(&str, &str), Vec<Pending>> = HashMap::new();
        let mut lease_of: HashMap<(&str, &str), usize> = HashMap::new();
        for &i in &order {
            let e = &self.history[i];
            let slot = (e.key.as_str(), e.owner.as_str());
            match &e.kind {
                EventKind::StoreRestart { persistent } => self.restarts.push((e.at, *persistent)),
                EventKind::Invoke {
                    op,
                    ttl_ms,
                    immediate,
                } => {
                    self.report.operations += 1;
                    let ttl_us = Micros::try_from(*ttl_ms)
                        .unwrap_or(Micros::MAX)
                        .saturating_mul(1000)
                        .min(TTL_US_MAX);
                    pending.entry(slot).or_default().push(Pending {
                        op: *op,
                        invoke: i,
                        ttl_us,
                        immediate: *immediate,
                    });
                }
                EventKind::Ok { op, .. } | EventKind::Fail { op } | EventKind::Info { op } => {
                    let open = pending.get_mut(&slot).and_then(|list| {
                        let at = list.iter().rposition(|p| p.op == *op)?;
                        Some(list.remove(at))
                    });
                    let Some(p) = open else {
                        self.violate(
                            ViolationKind::Malformed,
                            &e.key,
                            format!(
                                "an outcome of {} by {} without an invocation",
                                op.name(),
                                e.owner
                            ),
                            vec![i],
                        );
                        continue;
                    };
                    let result = match &e.kind {
                        EventKind::Ok { .. } => Outcome::Ok,
                        EventKind::Fail { .. } => Outcome::Fail,
                        _ => Outcome::Unknown,
                    };
                    let fence = match &e.kind {
                        EventKind::Ok { fence, .. } => *fence,
                        _ => None,
                    };
                    self.finish(&mut keys, &mut lease_of, e, p, Some(i), result, fence);
                }
                EventKind::Enter => {
                    if let Some(&l) = lease_of.get(&slot) {
                        if let Some(h) = keys.get_mut(e.key.as_str()) {
                            h.leases[l].entered.get_or_insert(i);
                        }
                    }
                }
                EventKind::FencedWrite { .. } => {
                    keys.entry(e.key.as_str()).or_default().writes.push(i);
                }
                EventKind::Exit | EventKind::ExpiryObserved => {}
            }
        }
        // Invocations with no outcome: their process died mid-call.
        let mut open: Vec<(usize, Pending)> = Vec::new();
        for list in pending.into_values() {
            open.extend(list.into_iter().map(|p| (p.invoke, p)));
        }
        open.sort_by_key(|(i, _)| *i);
        for (i, p) in open {
            let e = &self.history[i];
            self.finish(&mut keys, &mut lease_of, e, p, None, Outcome::Unknown, None);
        }
        let mut keys: Vec<(String, KeyHistory)> =
            keys.into_iter().map(|(k, h)| (k.to_owned(), h)).collect();
        keys.sort_by(|a, b| a.0.cmp(&b.0));
        keys
    }

    #[allow(clippy::too_many_arguments)]
    fn finish<'h>(
        &self,
        keys: &mut HashMap<&'h str, KeyHistory>,
        lease_of: &mut HashMap<(&'h str, &'h str), usize>,
        e: &'h Event,
        p: Pending,
        outcome: Option<usize>,
        result: Outcome,
        fence: Option<u64>,
    ) {
        let h = keys.entry(e.key.as_str()).or_default();
        // A waiting acquire that answers no may still have been handed the key by the store and
        // have given it back by the time it answered (a hand-over racing its timeout): possibly
        // held while it waited, like an unknown outcome, but no longer than its answer.
        let gave_up = p.op == Op::Acquire && result == Outcome::Fail && !p.immediate;
        let result = if gave_up { Outcome::Unknown } else { result };
        if p.op == Op::Acquire && result != Outcome::Fail {
            lease_of.insert((e.key.as_str(), e.owner.as_str()), h.leases.len());
            h.leases.push(Lease {
                owner: e.owner.clone(),
                invoke: p.invoke,
                outcome,
                granted: result == Outcome::Ok,
                gave_up,
                fence,
                valid_from: 0,
                valid_until: 0,
                possible_from: 0,
                possible_until: 0,
                entered: None,
            });
        }
        // Every call is kept (an acquire's with its TTL, for its lease's bounds).
        h.calls.push(Call {
            op: p.op,
            owner: e.owner.clone(),
            invoke: p.invoke,
            outcome,
            result,
            ttl_us: p.ttl_us,
            immediate: p.immediate,
        });
    }

    /// Fills in each lease's certain and possible validity from its own calls.
    fn bound_leases(&self, h: &mut KeyHistory) {
        let tol = self.options.lease_tolerance_us;
        let mut by_owner: HashMap<&str, Vec<&Call>> = HashMap::new();
        for c in &h.calls {
            by_owner.entry(c.owner.as_str()).or_default().push(c);
        }
        for lease in &mut h.leases {
            let calls = by_owner
                .get(lease.owner.as_str())
                .map_or(&[][..], |v| &v[..]);
            let invoke = self.at(lease.invoke);
            let ttl = calls
                .iter()
                .find(|c| c.op == Op::Acquire && c.invoke == lease.invoke)
                .map_or(0, |c| c.ttl_us);
            let answered = lease.outcome.map_or(Micros::MAX, |o| self.at(o).latest);
            lease.possible_from = invoke.earliest;
            lease.valid_from = answered;
            if !lease.granted {
                // Possibly granted up to its outcome (or at any time, without one); a waiter that
                // gave up has given any grant back by its answer.
                lease.valid_until = Micros::MIN;
                let held_for = if lease.gave_up { 0 } else { ttl };
                lease.possible_until = answered.saturating_add(held_for).saturating_add(tol);
                continue;
            }
            let mut certain = invoke.earliest.saturating_add(ttl).saturating_sub(tol);
            let mut possible = answered.saturating_add(ttl).saturating_add(tol);
            let mut released_at: Option<(Micros, Micros)> = None;
            for c in calls
                .iter()
                .filter(|c| c.invoke > lease.invoke || c.op != Op::Acquire)
            {
                let ci = self.at(c.invoke);
                if ci.earliest < invoke.earliest {
                    continue;
                }
                let done = c.outcome.map_or(Micros::MAX, |o| self.at(o).latest);
                match (c.op, c.result) {
                    (Op::Extend, Outcome::Ok) => {
                        if ci.earliest <= certain {
                            certain = certain
                                .max(ci.earliest.saturating_add(c.ttl_us).saturating_sub(tol));
                        }
                        possible = possible.max(done.saturating_add(c.ttl_us).saturating_add(tol));
                    }
                    (Op::Extend, Outcome::Unknown) => {
                        possible = possible.max(done.saturating_add(c.ttl_us).saturating_add(tol));
                    }
                    (Op::Release, Outcome::Ok) => {
                        released_at.get_or_insert((ci.earliest, done));
                    }
                    // A release whose outcome is unknown may have taken effect: the lease is no
                    // longer certain from its invocation on (possibly still valid, though).
                    (Op::Release, Outcome::Unknown) => certain = certain.min(ci.earliest),
                    _ => {}
                }
            }
            if let Some((from, by)) = released_at {
                certain = certain.min(from);
                possible = possible.min(by);
            }
            lease.valid_until = certain;
            lease.possible_until = possible;
        }
    }

    fn describe(&self, lease: &Lease) -> String {
        let fence = lease
            .fence
            .map_or("no fence".to_owned(), |f| format!("fence {f}"));
        format!(
            "{} ({fence}, certainly valid [{}, {}]{})",
            lease.owner,
            lease.valid_from,
            lease.valid_until,
            if lease.entered.is_some() {
                ", inside its section"
            } else {
                ""
            }
        )
    }

    fn mutual_exclusion(&mut self, key: &str, h: &KeyHistory) {
        let mut certain: Vec<&Lease> = h
            .leases
            .iter()
            .filter(|l| l.granted && l.valid_from < l.valid_until)
            .collect();
        certain.sort_by_key(|l| (l.valid_from, l.valid_until));
        let mut longest: Option<&Lease> = None;
        for lease in certain {
            if let Some(prev) = longest {
                if prev.owner != lease.owner && lease.valid_from < prev.valid_until {
                    let mut events = vec![prev.invoke, lease.invoke];
                    events.extend(prev.outcome);
                    events.extend(lease.outcome);
                    events.extend(prev.entered);
                    events.extend(lease.entered);
                    let message = format!(
                        "two certainly valid leases at once: {} and {}",
                        self.describe(prev),
                        self.describe(lease)
                    );
                    let window = (self.at(prev.invoke).earliest, lease.valid_from);
                    self.violate_or_loss(
                        ViolationKind::MutualExclusion,
                        key,
                        message,
                        events,
                        window,
                    );
                }
            }
            if longest.is_none_or(|p| lease.valid_until > p.valid_until) {
                longest = Some(lease);
            }
        }
    }

    fn fence_order(&mut self, key: &str, h: &KeyHistory) {
        let mut fenced: Vec<(&Lease, u64)> = h
            .leases
            .iter()
            .filter(|l| l.granted)
            .filter_map(|l| l.fence.map(|f| (l, f)))
            .collect();
        // Same fence twice: wrong whatever the order.
        let mut seen: HashMap<u64, &Lease> = HashMap::new();
        for &(lease, fence) in &fenced {
            if let Some(first) = seen.insert(fence, lease) {
                let message = format!(
                    "fence {fence} granted twice: to {} and to {}",
                    first.owner, lease.owner
                );
                let (a, b) = (self.at(first.invoke).earliest, lease.valid_from);
                let window = (
                    a.min(self.at(lease.invoke).earliest),
                    b.max(first.valid_from),
                );
                let events = vec![first.invoke, lease.invoke];
                self.violate_or_loss(ViolationKind::FenceOrder, key, message, events, window);
            }
        }
        // In certain grant order: a grant whose invocation came after another's answer must have
        // the greater fence.
        fenced.sort_by_key(|(l, _)| l.valid_from);
        let mut best: Vec<(Micros, u64, usize)> = Vec::with_capacity(fenced.len());
        for (n, &(l, f)) in fenced.iter().enumerate() {
            let prev = best.last().copied();
            best.push(match prev {
                Some((_, bf, bn)) if bf >= f => (l.valid_from, bf, bn),
                _ => (l.valid_from, f, n),
            });
        }
        for &(lease, fence) in &fenced {
            let invoked = self.at(lease.invoke).earliest;
            let before = best.partition_point(|&(answered, _, _)| answered < invoked);
            if before == 0 {
                continue;
            }
            let (_, top, n) = best[before - 1];
            if top > fence {
                let earlier = fenced[n].0;
                let message = format!(
                    "fence {fence} granted to {} after fence {top} had been granted to {}: fences must strictly increase",
                    lease.owner, earlier.owner
                );
                let events = vec![earlier.invoke, lease.invoke];
                let window = (self.at(earlier.invoke).earliest, lease.valid_from);
                self.violate_or_loss(ViolationKind::FenceOrder, key, message, events, window);
            }
        }
    }

    fn stale_writes(&mut self, key: &str, h: &KeyHistory) {
        let mut accepted: Vec<(usize, u64)> = h
            .writes
            .iter()
            .filter_map(|&i| match self.history[i].kind {
                EventKind::FencedWrite {
                    fence,
                    accepted: true,
                } => Some((i, fence)),
                _ => None,
            })
            .collect();
        accepted.sort_by_key(|&(i, _)| self.at(i).latest);
        let mut best: Vec<(Micros, u64, usize)> = Vec::with_capacity(accepted.len());
        for &(i, f) in &accepted {
            let prev = best.last().copied();
            best.push(match prev {
                Some((_, bf, bi)) if bf >= f => (self.at(i).latest, bf, bi),
                _ => (self.at(i).latest, f, i),
            });
        }
        for &(i, fence) in &accepted {
            let started = self.at(i).earliest;
            let before = best.partition_point(|&(done, _, _)| done < started);
            if before == 0 {
                continue;
            }
            let (_, top, j) = best[before - 1];
            if top > fence {
                let message = format!(
                    "the resource accepted a write with fence {fence} from {} after accepting fence {top} from {}",
                    self.history[i].owner, self.history[j].owner
                );
                let window = (self.at(j).earliest, self.at(i).latest);
                self.violate_or_loss(
                    ViolationKind::StaleFenceAccepted,
                    key,
                    message,
                    vec![j, i],
                    window,
                );
            }
        }
    }

    fn non_owner(&mut self, key: &str, h: &KeyHistory) {
        // Indexes: each owner's leases and calls; granted leases by invocation time, with the
        // earliest certain start over every suffix (who could have taken the key after a time).
        let mut leases_of: HashMap<&str, Vec<&Lease>> = HashMap::new();
        for l in &h.leases {
            leases_of.entry(l.owner.as_str()).or_default().push(l);
        }
        let mut calls_of: HashMap<&str, Vec<&Call>> = HashMap::new();
        for c in &h.calls {
            calls_of.entry(c.owner.as_str()).or_default().push(c);
        }
        let mut granted: Vec<&Lease> = h.leases.iter().filter(|l| l.granted).collect();
        granted.sort_by_key(|l| self.at(l.invoke).earliest);
        let mut soonest: Vec<(Micros, usize)> = vec![(Micros::MAX, 0); granted.len() + 1];
        for n in (0..granted.len()).rev() {
            soonest[n] = if granted[n].valid_from < soonest[n + 1].0 {
                (granted[n].valid_from, n)
            } else {
                soonest[n + 1]
            };
        }
        for c in &h.calls {
            if c.op == Op::Acquire || c.result != Outcome::Ok {
                continue;
            }
            let invoked = self.at(c.invoke).earliest;
            let own = leases_of.get(c.owner.as_str()).and_then(|list| {
                list.iter()
                    .filter(|l| self.at(l.invoke).earliest <= self.at(c.invoke).latest)
                    .max_by_key(|l| l.invoke)
                    .copied()
            });
            let Some(lease) = own else {
                let message = format!(
                    "{} by {}, which never acquired the key, succeeded",
                    c.op.name(),
                    c.owner
                );
                let mut events = vec![c.invoke];
                events.extend(c.outcome);
                self.violate(ViolationKind::NonOwnerSucceeded, key, message, events);
                continue;
            };
            // An earlier successful release by the same owner ended the hold.
            let released_before = calls_of.get(c.owner.as_str()).and_then(|list| {
                list.iter().copied().find(|r| {
                    r.op == Op::Release
                        && r.result == Outcome::Ok
                        && r.invoke != c.invoke
                        && r.outcome.is_some_and(|o| self.at(o).latest < invoked)
                })
            });
            if let Some(r) = released_before {
                let message = format!(
                    "{} by {} succeeded after its own release had",
                    c.op.name(),
                    c.owner
                );
                let mut events = vec![r.invoke, c.invoke];
                events.extend(c.outcome);
                self.violate(ViolationKind::NonOwnerSucceeded, key, message, events);
                continue;
            }
            if invoked <= lease.possible_until {
                continue;
            }
            // The lease had certainly expired. An extend must not revive it; a release must not
            // free the key once another owner was granted it (invoked after the expiry, so not
            // this owner, whose labels are one per acquisition).
            let after =
                granted.partition_point(|o| self.at(o.invoke).earliest < lease.possible_until);
            let (first, n) = soonest[after];
            let taken = (first < invoked).then(|| granted[n]);
            if c.op == Op::Extend || taken.is_some() {
                let mut events = vec![lease.invoke, c.invoke];
                events.extend(c.outcome);
                let by = taken.map_or(String::new(), |o| {
                    events.push(o.invoke);
                    format!(", and the key had been granted to {}", o.owner)
                });
                let message = format!(
                    "{} by {} succeeded after its lease had certainly expired (by {}){by}",
                    c.op.name(),
                    c.owner,
                    lease.possible_until
                );
                self.violate(ViolationKind::NonOwnerSucceeded, key, message, events);
            }
        }
    }

    fn refused_while_free(&mut self, key: &str, h: &KeyHistory) {
        // Every lease, possibly valid over [possible_from, possible_until], by start.
        let mut spans: Vec<(Micros, Micros, usize)> = h
            .leases
            .iter()
            .enumerate()
            .map(|(n, l)| (l.possible_from, l.possible_until, n))
            .collect();
        spans.sort_by_key(|s| s.0);
        let mut reach: Vec<(Micros, usize)> = Vec::with_capacity(spans.len());
        for &(_, until, n) in &spans {
            let prev = reach.last().copied();
            reach.push(match prev {
                Some((r, rn)) if r >= until => (r, rn),
                _ => (until, n),
            });
        }
        for c in &h.calls {
            if c.op != Op::Acquire || c.result != Outcome::Fail || !c.immediate {
                continue;
            }
            let Some(outcome) = c.outcome else { continue };
            let (from, to) = (self.at(c.invoke).earliest, self.at(outcome).latest);
            // Leases that may have started before the refusal was decided …
            let started = spans.partition_point(|s| s.0 <= to);
            // … must all have certainly ended before the request was sent.
            let held = started > 0 && reach[started - 1].0 >= from;
            if held {
                continue;
            }
            let last = (started > 0).then(|| reach[started - 1].1);
            let mut events = vec![c.invoke, outcome];
            let after = last.map_or(String::from(" (never held before)"), |n| {
                let l = &h.leases[n];
                events.push(l.invoke);
                format!(
                    " (the last possible lease, {}, ended by {})",
                    l.owner, l.possible_until
                )
            });
            let message = format!(
                "acquire by {} was refused while the key was certainly free{after}",
                c.owner
            );
            self.violate(ViolationKind::RefusedWhileFree, key, message, events);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Micros = 1000;

    /// A tiny history builder: times in ms, each stamp exact to ±0.
    struct H(Vec<Event>);

    impl H {
        fn new() -> Self {
            H(Vec::new())
        }
        fn ev(
            &mut self,
            client: u64,
            key: &str,
            owner: &str,
            at: Micros,
            kind: EventKind,
        ) -> &mut Self {
            self.0.push(Event {
                client,
                key: key.into(),
                owner: owner.into(),
                at: Stamp::around(at * MS, 0),
                kind,
            });
            self
        }
        /// An acquire sent at `sent` (its outcome recorded separately, if at all).
        fn invoke_acquire(
            &mut self,
            c: u64,
            owner: &str,
            sent: Micros,
            ttl: u64,
            immediate: bool,
        ) -> &mut Self {
            self.ev(
                c,
                "k",
                owner,
                sent,
                EventKind::Invoke {
                    op: Op::Acquire,
                    ttl_ms: ttl,
                    immediate,
                },
            )
        }
        fn acquire(
            &mut self,
            c: u64,
            owner: &str,
            sent: Micros,
            answered: Micros,
            ttl: u64,
            fence: Option<u64>,
        ) -> &mut Self {
            self.invoke_acquire(c, owner, sent, ttl, true);
            self.ev(
                c,
                "k",
                owner,
                answered,
                EventKind::Ok {
                    op: Op::Acquire,
                    fence,
                },
            )
        }
        fn refused(&mut self, c: u64, owner: &str, sent: Micros, answered: Micros) -> &mut Self {
            self.invoke_acquire(c, owner, sent, 1000, true);
            self.ev(c, "k", owner, answered, EventKind::Fail { op: Op::Acquire })
        }
        fn section(&mut self, c: u64, owner: &str, enter: Micros, exit: Micros) -> &mut Self {
            self.ev(c, "k", owner, enter, EventKind::Enter);
            self.ev(c, "k", owner, exit, EventKind::Exit)
        }
        fn op(
            &mut self,
            c: u64,
            owner: &str,
            op: Op,
            sent: Micros,
            answered: Micros,
            ok: bool,
        ) -> &mut Self {
            self.ev(
                c,
                "k",
                owner,
                sent,
                EventKind::Invoke {
                    op,
                    ttl_ms: 1000,
                    immediate: false,
                },
            );
            let kind = if ok {
                EventKind::Ok { op, fence: None }
            } else {
                EventKind::Fail { op }
            };
            self.ev(c, "k", owner, answered, kind)
        }
        fn write(
            &mut self,
            c: u64,
            owner: &str,
            sent: Micros,
            answered: Micros,
            fence: u64,
            accepted: bool,
        ) -> &mut Self {
            self.0.push(Event {
                client: c,
                key: "k".into(),
                owner: owner.into(),
                at: Stamp::new(sent * MS, answered * MS),
                kind: EventKind::FencedWrite { fence, accepted },
            });
            self
        }
        fn restart(&mut self, from: Micros, to: Micros, persistent: bool) -> &mut Self {
            self.0.push(Event {
                client: 0,
                key: String::new(),
                owner: String::new(),
                at: Stamp::new(from * MS, to * MS),
                kind: EventKind::StoreRestart { persistent },
            });
            self
        }
        fn check(&self) -> Report {
            check(&self.0, &CheckOptions::default())
        }
    }

    fn kinds(r: &Report) -> Vec<ViolationKind> {
        r.violations.iter().map(|v| v.kind).collect()
    }

    /// A correct run: A holds, releases; B acquires after; fences increase.
    fn sequential() -> H {
        let mut h = H::new();
        h.acquire(1, "a", 0, 2, 1000, Some(1))
            .section(1, "a", 3, 50)
            .write(1, "a", 10, 12, 1, true)
            .op(1, "a", Op::Release, 51, 53, true)
            .refused(2, "b0", 20, 22)
            .acquire(2, "b", 60, 62, 1000, Some(2))
            .section(2, "b", 63, 90)
            .write(2, "b", 70, 72, 2, true)
            .op(2, "b", Op::Extend, 80, 81, true)
            .op(2, "b", Op::Release, 91, 93, true);
        h
    }

    #[test]
    fn a_correct_history_passes() {
        let r = sequential().check();
        assert_eq!(r.violations, vec![], "{r:?}");
        assert!(r.ok());
        assert_eq!(r.operations, 6);
    }

    #[test]
    fn overlapping_valid_leases_are_caught() {
        let mut h = H::new();
        h.acquire(1, "a", 0, 2, 1000, Some(1))
            .section(1, "a", 3, 500)
            .acquire(2, "b", 100, 102, 1000, Some(2))
            .section(2, "b", 103, 200);
        let r = h.check();
        assert_eq!(kinds(&r), vec![ViolationKind::MutualExclusion], "{r:?}");
        assert!(r.violations[0].message.contains("inside its section"));
        let events = &r.violations[0].events;
        assert!(events.contains(&0) && events.contains(&4), "{events:?}");
    }

    #[test]
    fn a_takeover_after_expiry_is_not_an_overlap() {
        // A is paused past its TTL (exits late); B takes over after A's lease expired.
        let mut h = H::new();
        h.acquire(1, "a", 0, 2, 100, Some(1))
            .section(1, "a", 3, 400)
            .write(1, "a", 390, 395, 1, false)
            .acquire(2, "b", 120, 122, 1000, Some(2))
            .section(2, "b", 123, 300)
            .write(2, "b", 130, 135, 2, true)
            .op(1, "a", Op::Release, 401, 402, false);
        let r = h.check();
        assert_eq!(r.violations, vec![], "{r:?}");
    }

    #[test]
    fn clock_uncertainty_hides_unprovable_overlaps() {
        // B's grant arrives 1 ms before A's certain validity ends, but the lease tolerance (5 ms)
        // makes the overlap unprovable: no violation.
        let mut h = H::new();
        h.acquire(1, "a", 0, 2, 100, Some(1))
            .acquire(2, "b", 96, 99, 100, Some(2));
        assert!(h.check().ok());
        // Widen each stamp by 50 ms: still nothing to prove.
        let mut wide = H::new();
        wide.acquire(1, "a", 0, 2, 1000, Some(1))
            .op(1, "a", Op::Release, 500, 502, true);
        wide.acquire(2, "b", 490, 495, 1000, Some(2));
        for e in &mut wide.0 {
            e.at = Stamp::new(e.at.earliest - 50 * MS, e.at.latest + 50 * MS);
        }
        let r = wide.check();
        assert!(r.ok(), "{r:?}");
        // With exact stamps the same events would overlap (B answered before A's release was sent).
        let mut exact = H::new();
        exact
            .acquire(1, "a", 0, 2, 1000, Some(1))
            .op(1, "a", Op::Release, 500, 502, true);
        exact.acquire(2, "b", 400, 450, 1000, Some(2));
        assert_eq!(kinds(&exact.check()), vec![ViolationKind::MutualExclusion]);
    }

    #[test]
    fn fences_must_increase_in_grant_order() {
        let mut h = H::new();
        h.acquire(1, "a", 0, 2, 1000, Some(5))
            .op(1, "a", Op::Release, 10, 12, true)
            .acquire(2, "b", 20, 22, 1000, Some(3));
        assert_eq!(kinds(&h.check()), vec![ViolationKind::FenceOrder]);
        // The same fence twice, even when the order is unknown.
        let mut h = H::new();
        h.acquire(1, "a", 0, 50, 10, Some(7))
            .acquire(2, "b", 10, 60, 10, Some(7));
        assert!(kinds(&h.check()).contains(&ViolationKind::FenceOrder));
        // Concurrent grants (overlapping calls) may come in either order.
        let mut h = H::new();
        h.acquire(1, "a", 0, 50, 10, Some(9))
            .op(1, "a", Op::Release, 51, 52, true)
            .acquire(2, "b", 10, 60, 10, Some(8));
        let r = h.check();
        assert!(!kinds(&r).contains(&ViolationKind::FenceOrder), "{r:?}");
    }

    #[test]
    fn a_stale_fenced_write_accepted_is_caught() {
        let mut h = sequential();
        h.write(1, "a", 100, 101, 1, true);
        let r = h.check();
        assert_eq!(kinds(&r), vec![ViolationKind::StaleFenceAccepted], "{r:?}");
        // Refused, it is what the resource is for.
        let mut h = sequential();
        h.write(1, "a", 100, 101, 1, false);
        assert!(h.check().ok());
    }

    #[test]
    fn release_or_extend_by_a_non_owner_is_caught() {
        let mut h = sequential();
        h.op(3, "stranger", Op::Release, 70, 71, true);
        assert_eq!(kinds(&h.check()), vec![ViolationKind::NonOwnerSucceeded]);
        // After its own release.
        let mut h = sequential();
        h.op(1, "a", Op::Extend, 55, 56, true);
        assert_eq!(kinds(&h.check()), vec![ViolationKind::NonOwnerSucceeded]);
        // After expiry, with the key granted to another: the late release must not free it.
        let mut h = H::new();
        h.acquire(1, "a", 0, 2, 100, Some(1))
            .acquire(2, "b", 200, 202, 1000, Some(2))
            .op(1, "a", Op::Release, 300, 301, true);
        let r = h.check();
        assert_eq!(kinds(&r), vec![ViolationKind::NonOwnerSucceeded], "{r:?}");
        // Refused, all is well.
        let mut h = H::new();
        h.acquire(1, "a", 0, 2, 100, Some(1))
            .acquire(2, "b", 200, 202, 1000, Some(2))
            .op(1, "a", Op::Release, 300, 301, false)
            .op(3, "stranger", Op::Extend, 310, 311, false);
        assert!(h.check().ok());
    }

    #[test]
    fn a_release_with_an_unknown_outcome_may_have_freed_the_key() {
        let mut h = H::new();
        h.acquire(1, "a", 0, 2, 1000, Some(1))
            .ev(
                1,
                "k",
                "a",
                50,
                EventKind::Invoke {
                    op: Op::Release,
                    ttl_ms: 0,
                    immediate: false,
                },
            )
            .ev(1, "k", "a", 52, EventKind::Info { op: Op::Release })
            .acquire(2, "b", 60, 62, 1000, Some(2));
        let r = h.check();
        assert!(r.ok(), "{r:?}");
        // Had it answered no, B's grant would overlap A's lease.
        let mut h = H::new();
        h.acquire(1, "a", 0, 2, 1000, Some(1))
            .op(1, "a", Op::Release, 50, 52, false)
            .acquire(2, "b", 60, 62, 1000, Some(2));
        assert_eq!(kinds(&h.check()), vec![ViolationKind::MutualExclusion]);
    }

    #[test]
    fn a_refusal_while_certainly_free_is_caught() {
        // A's 100 ms lease certainly ended by 2 + 100 + 5 ms; a refusal at 300 ms is wrong.
        let mut h = H::new();
        h.acquire(1, "a", 0, 2, 100, Some(1))
            .refused(2, "b", 300, 302);
        let r = h.check();
        assert_eq!(kinds(&r), vec![ViolationKind::RefusedWhileFree], "{r:?}");
        // Within the lease (or its tolerance) a refusal is right.
        let mut h = H::new();
        h.acquire(1, "a", 0, 2, 100, Some(1))
            .refused(2, "b", 104, 106);
        assert!(h.check().ok());
        // An acquire with an unknown outcome may hold the key until its answer + TTL …
        let mut h = H::new();
        h.invoke_acquire(1, "a", 0, 100, true)
            .ev(1, "k", "a", 50, EventKind::Info { op: Op::Acquire })
            .refused(2, "b", 140, 141);
        assert!(h.check().ok());
        // … and one with no outcome at all (its process died) forever.
        let mut h = H::new();
        h.invoke_acquire(1, "a", 0, 100, true)
            .refused(2, "b", 10_000, 10_001);
        assert!(h.check().ok());
    }

    #[test]
    fn a_waiting_acquire_that_gave_up_may_have_held_the_key() {
        // B waited and answered no, but may have been handed the key at A's release and given it
        // back by its answer: C's refusal while B waited proves nothing …
        let waited = |immediate: bool, refused_at: Micros| {
            let mut h = H::new();
            h.acquire(1, "a", 0, 2, 1000, Some(1))
                .invoke_acquire(2, "b", 5, 100, immediate)
                .op(1, "a", Op::Release, 50, 52, true)
                .ev(2, "k", "b", 60, EventKind::Fail { op: Op::Acquire })
                .refused(3, "c", refused_at, refused_at + 1);
            h.check()
        };
        assert!(waited(false, 55).ok());
        // … but after B's answer the key was free again.
        assert_eq!(
            kinds(&waited(false, 120)),
            vec![ViolationKind::RefusedWhileFree]
        );
        // Had B been one immediate call, its no would be definite.
        assert_eq!(
            kinds(&waited(true, 55)),
            vec![ViolationKind::RefusedWhileFree]
        );
    }

    #[test]
    fn a_non_persistent_restart_turns_its_overlap_into_a_documented_loss() {
        let lost = |persistent: bool| {
            let mut h = H::new();
            h.acquire(1, "a", 0, 2, 10_000, Some(1))
                .restart(100, 200, persistent)
                .acquire(2, "b", 300, 302, 10_000, Some(1));
            h.check()
        };
        let r = lost(false);
        assert!(r.ok(), "{r:?}");
        assert_eq!(r.loss_count, r.losses.len());
        assert_eq!(r.restarts, 1);
        let lost_kinds: Vec<_> = r.losses.iter().map(|v| v.kind).collect();
        assert!(
            lost_kinds.contains(&ViolationKind::MutualExclusion),
            "{r:?}"
        );
        assert!(lost_kinds.contains(&ViolationKind::FenceOrder), "{r:?}");
        // A persistent store should have kept A's lease and its fence counter.
        let r = lost(true);
        assert!(kinds(&r).contains(&ViolationKind::MutualExclusion), "{r:?}");
        assert!(kinds(&r).contains(&ViolationKind::FenceOrder), "{r:?}");
        assert!(r.losses.is_empty());
    }

    #[test]
    fn an_outcome_without_an_invocation_is_malformed() {
        let mut h = H::new();
        h.ev(
            1,
            "k",
            "a",
            5,
            EventKind::Ok {
                op: Op::Release,
                fence: None,
            },
        );
        assert_eq!(kinds(&h.check()), vec![ViolationKind::Malformed]);
    }

    #[test]
    fn reports_are_capped_but_counted() {
        let mut h = H::new();
        for n in 0..20 {
            h.op(1, &format!("s{n}"), Op::Release, n * 10, n * 10 + 1, true);
        }
        let r = check(
            &h.0,
            &CheckOptions {
                max_reported: 3,
                ..CheckOptions::default()
            },
        );
        assert_eq!((r.violations.len(), r.violation_count), (3, 20));
    }

    #[test]
    fn keys_are_checked_separately() {
        let mut h = H::new();
        h.acquire(1, "a", 0, 2, 1000, Some(1));
        h.0.push(Event {
            client: 2,
            key: "other".into(),
            owner: "b".into(),
            at: Stamp::around(10 * MS, 0),
            kind: EventKind::Invoke {
                op: Op::Acquire,
                ttl_ms: 1000,
                immediate: true,
            },
        });
        h.0.push(Event {
            client: 2,
            key: "other".into(),
            owner: "b".into(),
            at: Stamp::around(12 * MS, 0),
            kind: EventKind::Ok {
                op: Op::Acquire,
                fence: Some(1),
            },
        });
        assert!(h.check().ok());
    }
}
