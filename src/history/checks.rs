//! The properties, one function each, run per key over the leases `leases.rs` built.

use std::collections::HashMap;

use super::events::*;
use super::leases::*;
use super::report::*;

impl Checker<'_> {
    pub(super) fn mutual_exclusion(&mut self, key: &str, h: &KeyHistory) {
        if h.leases.iter().any(|l| l.holding != Holding::Exclusive) {
            return self.shared_holds(key, h);
        }
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
                    // Two campaigns: two leaders; else the key's exclusion.
                    let (kind, what) = if prev.campaign && lease.campaign {
                        (
                            ViolationKind::TwoLeaders,
                            "two certainly valid leaders at once",
                        )
                    } else {
                        (
                            ViolationKind::MutualExclusion,
                            "two certainly valid leases at once",
                        )
                    };
                    let message = format!(
                        "{what}: {} and {}",
                        self.describe(prev),
                        self.describe(lease)
                    );
                    let window = (self.at(prev.invoke).earliest, lease.valid_from);
                    self.violate_or_loss(kind, key, message, events, window);
                }
            }
            if longest.is_none_or(|p| lease.valid_until > p.valid_until) {
                longest = Some(lease);
            }
        }
    }

    /// A key with shared holds in its history: at no instant may certainly valid holds break
    /// the key's sharing — an exclusive hold beside any other hold, shared holds naming
    /// different limits, or shared weights adding up to more than their limit. A sweep over the
    /// holds' certain intervals, `[valid_from, valid_until)`, an end before a start at one
    /// instant.
    fn shared_holds(&mut self, key: &str, h: &KeyHistory) {
        let certain: Vec<&Lease> = h
            .leases
            .iter()
            .filter(|l| l.granted && l.valid_from < l.valid_until)
            .collect();
        let mut points: Vec<(Micros, bool, usize)> = Vec::with_capacity(certain.len() * 2);
        for (i, l) in certain.iter().enumerate() {
            points.push((l.valid_from, true, i));
            points.push((l.valid_until, false, i));
        }
        points.sort_by_key(|&(at, start, i)| (at, start, i));
        let mut active: Vec<usize> = Vec::new();
        let mut exclusive = 0usize;
        let mut weight: u128 = 0;
        // Live shared holds per limit they name.
        let mut limits: HashMap<u64, usize> = HashMap::new();
        for (_, start, i) in points {
            let lease = certain[i];
            if !start {
                if let Some(at) = active.iter().position(|&a| a == i) {
                    active.swap_remove(at);
                    match lease.holding {
                        Holding::Exclusive => exclusive -= 1,
                        Holding::Shared { weight: w, limit } => {
                            weight -= u128::from(w);
                            // Counted when it started (it was active): never below one here.
                            if let Some(n) = limits.get_mut(&limit) {
                                *n = n.saturating_sub(1);
                                if *n == 0 {
                                    limits.remove(&limit);
                                }
                            }
                        }
                    }
                }
                continue;
            }
            let broken = match lease.holding {
                Holding::Exclusive => active
                    .first()
                    .map(|&a| (ViolationKind::MutualExclusion, a, "beside".to_owned())),
                Holding::Shared { weight: w, limit } => {
                    let is = |f: fn(&Holding) -> bool| {
                        active.iter().copied().find(|&a| f(&certain[a].holding))
                    };
                    if exclusive > 0 {
                        is(|h| *h == Holding::Exclusive)
                            .map(|a| (ViolationKind::MutualExclusion, a, "beside".to_owned()))
                    } else if limits.keys().any(|&l| l != limit) {
                        active
                            .iter()
                            .copied()
                            .find(|&a| !matches!(certain[a].holding, Holding::Shared { limit: l, .. } if l == limit))
                            .map(|a| (ViolationKind::LimitMismatch, a, format!("under limit {limit} beside")))
                    } else if weight + u128::from(w) > u128::from(limit) {
                        let held = weight + u128::from(w);
                        active.last().map(|&a| {
                            (
                                ViolationKind::OverLimit,
                                a,
                                format!("makes {held} permits of {limit}, with"),
                            )
                        })
                    } else {
                        None
                    }
                }
            };
            if let Some((kind, other, how)) = broken {
                let prev = certain[other];
                let mut events = vec![prev.invoke, lease.invoke];
                events.extend(prev.outcome);
                events.extend(lease.outcome);
                let what = if kind == ViolationKind::MutualExclusion {
                    "an exclusive hold (a lock, a write lock) beside another, both certainly valid"
                } else {
                    "certainly valid holds break the key's sharing"
                };
                let message = format!(
                    "{what}: {} {how} {}",
                    self.describe(lease),
                    self.describe(prev)
                );
                // Too many permits is the sum of every live hold: a store that lost some of
                // them (across a non-persistent restart) explains it, whichever is named.
                let since = if kind == ViolationKind::OverLimit {
                    active
                        .iter()
                        .map(|&a| self.at(certain[a].invoke).earliest)
                        .min()
                        .unwrap_or(Micros::MAX)
                } else {
                    self.at(prev.invoke).earliest
                };
                self.violate_or_loss(kind, key, message, events, (since, lease.valid_from));
            }
            active.push(i);
            match lease.holding {
                Holding::Exclusive => exclusive += 1,
                Holding::Shared { weight: w, limit } => {
                    weight += u128::from(w);
                    *limits.entry(limit).or_default() += 1;
                }
            }
        }
    }

    /// Fences strictly increase in grant order, as invocations and answers show it. Answers the
    /// leases (by their invoke) it found a greater fence granted before, so that the leader rule
    /// does not report them again.
    pub(super) fn fence_order(&mut self, key: &str, h: &KeyHistory) -> Vec<usize> {
        let mut flagged = Vec::new();
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
                flagged.push(lease.invoke);
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
        flagged
    }

    pub(super) fn stale_writes(&mut self, key: &str, h: &KeyHistory) {
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

    pub(super) fn non_owner(&mut self, key: &str, h: &KeyHistory) {
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
            if c.op.acquires() || c.result != Outcome::Ok {
                continue;
            }
            let invoked = self.at(c.invoke).earliest;
            let own = leases_of.get(c.owner.as_str()).and_then(|list| {
                list.iter()
                    .filter(|l| self.at(l.invoke).earliest <= self.at(c.invoke).latest)
                    .max_by_key(|l| l.invoke)
                    .copied()
            });
            // A key of a set its call refused: the all-or-nothing rule judges what follows.
            if own.is_some_and(|l| l.set.is_some() && l.gave_up) {
                continue;
            }
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

    pub(super) fn refused_while_free(&mut self, key: &str, h: &KeyHistory) {
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
        let longest_ttl = h.longest_ttl();
        for c in &h.calls {
            if !c.op.acquires() || c.result != Outcome::Fail || !c.immediate {
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
            // A store that lost writes may have brought back a lease it had released: that
            // lease lasts at most one TTL past the restart.
            let window = (from.saturating_sub(longest_ttl), to);
            self.violate_or_loss(
                ViolationKind::RefusedWhileFree,
                key,
                message,
                events,
                window,
            );
        }
    }
}
