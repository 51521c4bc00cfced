//! The checker's view of a history: per key, the leases (each acquisition, with when it was
//! certainly and possibly valid) and the other calls, built from the events; and the helpers
//! every check reports through.

use std::collections::HashMap;

use super::events::*;
use super::report::*;

/// One acquisition as the history shows it.
#[derive(Debug, Clone)]
pub(super) struct Lease {
    pub(super) owner: String,
    /// How it shares the key.
    pub(super) holding: Holding,
    pub(super) invoke: usize,
    /// The `Ok` or `Info` outcome; `None`: no outcome at all.
    pub(super) outcome: Option<usize>,
    pub(super) granted: bool,
    /// A waiting acquire that answered no: possibly held only until its answer.
    pub(super) gave_up: bool,
    pub(super) fence: Option<u64>,
    /// Certainly valid over `[valid_from, valid_until]` (granted leases only; may be empty).
    pub(super) valid_from: Micros,
    pub(super) valid_until: Micros,
    /// Possibly valid from `possible_from` until `possible_until`.
    pub(super) possible_from: Micros,
    pub(super) possible_until: Micros,
    /// The section's `Enter`, if any.
    pub(super) entered: Option<usize>,
    /// A campaign for leadership.
    pub(super) campaign: bool,
    /// The all-or-nothing set it is a key of (an index into `Checker::sets`).
    pub(super) set: Option<usize>,
}

pub(super) struct Pending {
    pub(super) op: Op,
    pub(super) invoke: usize,
    pub(super) ttl_us: Micros,
    pub(super) immediate: bool,
    pub(super) holding: Holding,
}

/// A finished operation other than acquire.
pub(super) struct Call {
    pub(super) op: Op,
    pub(super) owner: String,
    pub(super) invoke: usize,
    pub(super) outcome: Option<usize>,
    pub(super) result: Outcome,
    pub(super) ttl_us: Micros,
    pub(super) immediate: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    Ok,
    Fail,
    Unknown,
}

#[derive(Default)]
pub(super) struct KeyHistory {
    pub(super) leases: Vec<Lease>,
    pub(super) calls: Vec<Call>,
    pub(super) writes: Vec<usize>,
    /// Observers' leader reports, in each observer's order.
    pub(super) observed: Vec<usize>,
}

impl KeyHistory {
    /// The longest TTL a lease of this key may have been given, by a grant or an extend: how
    /// long a lease a lossy store brought back may last.
    pub(super) fn longest_ttl(&self) -> Micros {
        self.calls
            .iter()
            .filter(|c| (c.op.acquires() || c.op == Op::Extend) && c.result != Outcome::Fail)
            .map(|c| c.ttl_us)
            .max()
            .unwrap_or(0)
    }
}

/// An all-or-nothing acquisition of several keys: its `AcquireSet` event and, per key, the
/// acquire its owner made there.
pub(super) struct SetCall {
    pub(super) event: usize,
    pub(super) owner: String,
    pub(super) keys: Vec<String>,
    pub(super) members: Vec<Member>,
}

/// One key's acquire within a set, with the store's answer as recorded (before a refusal is
/// read as "possibly held until the answer").
pub(super) struct Member {
    pub(super) key: String,
    pub(super) invoke: usize,
    pub(super) outcome: Option<usize>,
    pub(super) result: Outcome,
}

pub(super) struct Checker<'a> {
    pub(super) history: &'a [Event],
    pub(super) options: &'a CheckOptions,
    pub(super) report: Report,
    /// Restarts: (stamp, persistent).
    pub(super) restarts: Vec<(Stamp, bool)>,
    /// Violations so far, per kind.
    pub(super) reported: HashMap<ViolationKind, usize>,
    /// The history's all-or-nothing sets, and which set each `(key, owner)` acquire belongs to.
    pub(super) sets: Vec<SetCall>,
    pub(super) set_of: HashMap<(String, String), usize>,
}

pub(super) const TTL_US_MAX: Micros = Micros::MAX / 4;

impl Checker<'_> {
    pub(super) fn at(&self, i: usize) -> Stamp {
        self.history[i].at
    }

    pub(super) fn violate(
        &mut self,
        kind: ViolationKind,
        key: &str,
        message: String,
        events: Vec<usize>,
    ) {
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
    pub(super) fn lossy_restart_between(&self, before: Micros, after: Micros) -> Option<Stamp> {
        self.restarts
            .iter()
            .find(|(s, persistent)| !persistent && s.latest >= before && s.earliest <= after)
            .map(|(s, _)| *s)
    }

    /// Reports a broken property, or a documented loss when a non-persistent restart lies
    /// between the two events' instants.
    pub(super) fn violate_or_loss(
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
    pub(super) fn collect(&mut self) -> Vec<(String, KeyHistory)> {
        // Sets first: an acquire learns whether it belongs to one when its outcome comes in.
        for (i, e) in self.history.iter().enumerate() {
            if let EventKind::AcquireSet { keys } = &e.kind {
                let n = self.sets.len();
                for key in keys {
                    self.set_of
                        .entry((key.clone(), e.owner.clone()))
                        .or_insert(n);
                }
                self.sets.push(SetCall {
                    event: i,
                    owner: e.owner.clone(),
                    keys: keys.clone(),
                    members: Vec::new(),
                });
            }
        }
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
                    holding,
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
                        holding: holding.normalized(),
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
                EventKind::LeaderObserved { .. } => {
                    keys.entry(e.key.as_str()).or_default().observed.push(i);
                }
                EventKind::Exit | EventKind::ExpiryObserved | EventKind::AcquireSet { .. } => {}
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
    pub(super) fn finish<'h>(
        &mut self,
        keys: &mut HashMap<&'h str, KeyHistory>,
        lease_of: &mut HashMap<(&'h str, &'h str), usize>,
        e: &'h Event,
        p: Pending,
        outcome: Option<usize>,
        result: Outcome,
        fence: Option<u64>,
    ) {
        let h = keys.entry(e.key.as_str()).or_default();
        let set = if p.op.acquires() {
            self.set_of.get(&(e.key.clone(), e.owner.clone())).copied()
        } else {
            None
        };
        if let Some(s) = set {
            self.sets[s].members.push(Member {
                key: e.key.clone(),
                invoke: p.invoke,
                outcome,
                result,
            });
        }
        // A waiting acquire that answers no may still have been handed the key by the store and
        // have given it back by the time it answered (a hand-over racing its timeout): possibly
        // held while it waited, like an unknown outcome, but no longer than its answer. So may a
        // set's key, even on an immediate call: a set taken one key at a time holds the first
        // keys while it asks for the next, and frees them before it answers no.
        let gave_up = p.op.acquires() && result == Outcome::Fail && (!p.immediate || set.is_some());
        let result = if gave_up { Outcome::Unknown } else { result };
        if p.op.acquires() && result != Outcome::Fail {
            lease_of.insert((e.key.as_str(), e.owner.as_str()), h.leases.len());
            h.leases.push(Lease {
                owner: e.owner.clone(),
                holding: p.holding,
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
                campaign: p.op == Op::Campaign,
                set,
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
    pub(super) fn bound_leases(&self, h: &mut KeyHistory) {
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
                .find(|c| c.op.acquires() && c.invoke == lease.invoke)
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
                .filter(|c| c.invoke > lease.invoke || !c.op.acquires())
            {
                let ci = self.at(c.invoke);
                if ci.earliest < invoke.earliest {
                    continue;
                }
                let done = c.outcome.map_or(Micros::MAX, |o| self.at(o).latest);
                match (c.op, c.result) {
                    // An extend that succeeded proves the hold lasted from its grant until the
                    // extend's TTL (a correct store does not revive an expired hold), so it
                    // prolongs the certain validity — here only while still certain, and for a
                    // campaign, whose wait makes `invoke + ttl` an early bound, from any point.
                    (Op::Extend, Outcome::Ok) => {
                        if ci.earliest <= certain || lease.campaign {
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

    pub(super) fn describe(&self, lease: &Lease) -> String {
        let fence = lease
            .fence
            .map_or("no fence".to_owned(), |f| format!("fence {f}"));
        let shares = match lease.holding {
            Holding::Exclusive if lease.campaign => ", leader".to_owned(),
            Holding::Exclusive => String::new(),
            Holding::Shared { weight: 1, .. } if lease.holding.is_read() => {
                ", read lock".to_owned()
            }
            Holding::Shared { weight, .. } if lease.holding.is_read() => {
                format!(", shared, {weight}")
            }
            Holding::Shared { weight, limit } => format!(", {weight} of {limit} permits"),
        };
        format!(
            "{} ({fence}{shares}, certainly valid [{}, {}]{})",
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
}
