//! Leader election (`campaign` / `observe`) on a key: leaders' fences in the order leadership
//! was granted, and each observer's reports in fence order. That no two leaders lead at once is
//! the key's exclusion (`checks.rs`), named for leaders when both holds are campaigns.

use std::collections::{HashMap, HashSet};

use super::events::*;
use super::leases::*;
use super::report::*;

impl Checker<'_> {
    /// A campaign waits for its turn, so its invocation usually comes before the answer of the
    /// leader it follows, and the invocation order `fence_order` reads proves nothing. Exclusion
    /// gives the order instead: a leader that certainly led from its answer on was granted after
    /// every leader answered before that answer (granted earlier, it would have been leading
    /// when they were granted). So its fence must be greater than theirs. Leases `fence_order`
    /// already flagged are not reported again.
    pub(super) fn leader_order(&mut self, key: &str, h: &KeyHistory, flagged: &[usize]) {
        let flagged: HashSet<usize> = flagged.iter().copied().collect();
        let mut leaders: Vec<(&Lease, u64)> = h
            .leases
            .iter()
            .filter(|l| l.campaign && l.granted && l.outcome.is_some())
            .filter(|l| l.holding == Holding::Exclusive)
            .filter_map(|l| l.fence.map(|f| (l, f)))
            .collect();
        leaders.sort_by_key(|(l, _)| l.valid_from);
        // Prefix maxima of the fences, by answer.
        let mut best: Vec<(Micros, u64, usize)> = Vec::with_capacity(leaders.len());
        for (n, &(l, f)) in leaders.iter().enumerate() {
            let prev = best.last().copied();
            best.push(match prev {
                Some((_, bf, bn)) if bf >= f => (l.valid_from, bf, bn),
                _ => (l.valid_from, f, n),
            });
        }
        for &(lease, fence) in &leaders {
            if lease.valid_from >= lease.valid_until || flagged.contains(&lease.invoke) {
                continue;
            }
            let before = best.partition_point(|&(answered, _, _)| answered < lease.valid_from);
            if before == 0 {
                continue;
            }
            let (_, top, n) = best[before - 1];
            if top <= fence {
                continue;
            }
            let earlier = leaders[n].0;
            let message = format!(
                "leader {} was granted after leader {} (answered by {}) but has the lower fence: \
                 leaders' fences must increase in the order leadership was granted",
                self.describe(lease),
                self.describe(earlier),
                earlier.valid_from
            );
            let mut events = vec![earlier.invoke, lease.invoke];
            events.extend(earlier.outcome);
            events.extend(lease.outcome);
            let window = (self.at(earlier.invoke).earliest, lease.valid_from);
            self.violate_or_loss(ViolationKind::LeaderOrder, key, message, events, window);
        }
    }

    /// Each observer is told every leader at most once and in fence order: a fence no greater
    /// than one it was told before is a report out of order (a leader that went away may be
    /// followed by "nobody leads", which carries no fence).
    pub(super) fn observe_order(&mut self, key: &str, h: &KeyHistory) {
        // The last fence each observer was told, and the report that told it.
        let mut last: HashMap<&str, (u64, usize)> = HashMap::new();
        let mut order = h.observed.clone();
        order.sort_by_key(|&i| (self.at(i).earliest, self.at(i).latest, i));
        for i in order {
            let e = &self.history[i];
            let EventKind::LeaderObserved { fence: Some(fence) } = e.kind else {
                continue;
            };
            match last.get(e.owner.as_str()) {
                Some(&(before, j)) if before >= fence => {
                    let message = format!(
                        "observer {} was told the leader with fence {fence} after the one with \
                         fence {before}: leaders are reported once each, in fence order",
                        e.owner
                    );
                    let window = (self.at(j).earliest, self.at(i).latest);
                    self.violate_or_loss(
                        ViolationKind::ObserveOrder,
                        key,
                        message,
                        vec![j, i],
                        window,
                    );
                }
                _ => {
                    last.insert(e.owner.as_str(), (fence, i));
                }
            }
        }
    }
}
