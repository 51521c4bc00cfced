//! Several keys acquired all or nothing (`lock([...keys])`, a store's `acquireMany`): each key
//! is judged as any other by the per-key checks; here, that a set's call, once answered, held
//! every key or none.

use std::collections::HashMap;

use super::events::Micros;
use super::leases::*;
use super::report::*;

impl Checker<'_> {
    /// What a history can show of a set held in part: one call whose keys answered both yes and
    /// no; an owner still holding (releasing or extending) a key of a set its call refused,
    /// after that answer; and a key of a granted set the store refused to release or extend for
    /// the owner while its hold was certainly valid (the store did not hold it for the owner,
    /// whatever it answered for the set).
    pub(super) fn all_or_nothing(&mut self, keys: &[(String, KeyHistory)]) {
        let by_key: HashMap<&str, &KeyHistory> =
            keys.iter().map(|(k, h)| (k.as_str(), h)).collect();
        let sets = std::mem::take(&mut self.sets);
        for set in &sets {
            let named = format!("[{}]", set.keys.join(", "));
            for key in &set.keys {
                if !set.members.iter().any(|m| &m.key == key) {
                    let message = format!(
                        "the set {named} by {} names {key:?}, which its owner never acquired",
                        set.owner
                    );
                    self.violate(ViolationKind::Malformed, key, message, vec![set.event]);
                }
            }
            let granted = set.members.iter().find(|m| m.result == Outcome::Ok);
            let refused = set.members.iter().find(|m| m.result == Outcome::Fail);
            if let (Some(yes), Some(no)) = (granted, refused) {
                let message = format!(
                    "the set {named} by {} was granted {:?} and refused {:?}: a set is granted \
                     every key or none",
                    set.owner, yes.key, no.key
                );
                let mut events = vec![set.event, yes.invoke, no.invoke];
                events.extend(yes.outcome);
                events.extend(no.outcome);
                self.violate(ViolationKind::PartialSet, &no.key, message, events);
            }
            for m in &set.members {
                let Some(h) = by_key.get(m.key.as_str()) else {
                    continue;
                };
                match m.result {
                    Outcome::Fail => self.held_after_refusal(set, &named, m, h),
                    Outcome::Ok => self.refused_while_held(set, &named, m, h),
                    Outcome::Unknown => {}
                }
            }
            self.refused_while_all_free(set, &named, &by_key);
        }
        self.sets = sets;
    }

    /// An immediate set refused while every one of its keys was certainly free: nobody else's
    /// lease on any of them possibly valid from the call's sending to its answer (the set's own
    /// holds while it asked are no reason). What catches a store that never expires, for sets.
    fn refused_while_all_free(
        &mut self,
        set: &SetCall,
        named: &str,
        by_key: &HashMap<&str, &KeyHistory>,
    ) {
        let Some(first) = set.members.first() else {
            return;
        };
        if set.members.len() < set.keys.len() {
            return;
        }
        let mut longest_ttl = 0;
        let mut window = (Micros::MAX, 0);
        for m in &set.members {
            let (Outcome::Fail, Some(outcome)) = (m.result, m.outcome) else {
                return;
            };
            let Some(h) = by_key.get(m.key.as_str()) else {
                return;
            };
            let Some(call) = h.calls.iter().find(|c| c.invoke == m.invoke) else {
                return;
            };
            if !call.immediate {
                return;
            }
            let (from, to) = (self.at(m.invoke).earliest, self.at(outcome).latest);
            let held = h
                .leases
                .iter()
                .any(|l| l.invoke != m.invoke && l.possible_from <= to && l.possible_until >= from);
            if held {
                return;
            }
            longest_ttl = longest_ttl.max(h.longest_ttl());
            window = (window.0.min(from), window.1.max(to));
        }
        let message = format!(
            "the set {named} by {} was refused while every key of it was certainly free",
            set.owner
        );
        let mut events = vec![set.event];
        for m in &set.members {
            events.push(m.invoke);
            events.extend(m.outcome);
        }
        let window = (window.0.saturating_sub(longest_ttl), window.1);
        self.violate_or_loss(
            ViolationKind::RefusedWhileFree,
            &first.key,
            message,
            events,
            window,
        );
    }

    /// A release or extend by the owner that succeeded on a key of its refused set, sent after
    /// the refusal came back: the store still held that key for it.
    fn held_after_refusal(&mut self, set: &SetCall, named: &str, m: &Member, h: &KeyHistory) {
        let Some(answer) = m.outcome else { return };
        let answered = self.at(answer).latest;
        for c in &h.calls {
            if c.owner != set.owner
                || c.op.acquires()
                || c.result != Outcome::Ok
                || self.at(c.invoke).earliest <= answered
            {
                continue;
            }
            let message = format!(
                "{} of {:?} by {} succeeded after its set {named} was refused (answered by \
                 {answered}): a refused set holds none of its keys",
                c.op.name(),
                m.key,
                set.owner
            );
            let mut events = vec![set.event, m.invoke, answer, c.invoke];
            events.extend(c.outcome);
            self.violate(ViolationKind::PartialSet, &m.key, message, events);
        }
    }

    /// A release or extend by the owner that the store refused on a key of its granted set, the
    /// whole call within the hold's certain validity: the key was not held for it.
    fn refused_while_held(&mut self, set: &SetCall, named: &str, m: &Member, h: &KeyHistory) {
        let Some(lease) = h.leases.iter().find(|l| l.invoke == m.invoke) else {
            return;
        };
        if !lease.granted || lease.valid_from >= lease.valid_until {
            return;
        }
        for c in &h.calls {
            if c.owner != set.owner || c.op.acquires() || c.result != Outcome::Fail {
                continue;
            }
            let Some(outcome) = c.outcome else { continue };
            let (sent, done) = (self.at(c.invoke).earliest, self.at(outcome).latest);
            if sent < lease.valid_from || done > lease.valid_until {
                continue;
            }
            let message = format!(
                "the set {named} was granted to {}, but the store refused its {} of {:?} while \
                 that hold was certainly valid ({}): the set was not held whole",
                set.owner,
                c.op.name(),
                m.key,
                self.describe(lease)
            );
            let mut events = vec![set.event, lease.invoke, c.invoke, outcome];
            events.extend(lease.outcome);
            let window = (self.at(lease.invoke).earliest, done);
            self.violate_or_loss(ViolationKind::PartialSet, &m.key, message, events, window);
        }
    }
}
