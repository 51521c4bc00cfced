// The fault suite's verdict on a history: keel-lock/testing's checkHistory, and on a store whose
// leases may outlive their TTL (etcd: its leader looks for expired leases twice a second, and a
// new leader restarts every lease's countdown; docs/testing.md), a second check of the same
// history with more tolerance for the kinds a lease's upper bound decides — an acquire refused
// while the key was certainly free, an extend or release by an owner whose lease had certainly
// run out. That lateness costs liveness, not safety (a lease still lasts at least its TTL from
// its grant), so overlaps, fences and stale writes keep the checker's default.
import { checkHistory } from "keel-lock/testing";

// etcd: one TTL (the suite's 1 s) after a leader change, and 3 s for the election and the lessor.
export const LIVENESS_SLACK_MS = { etcd: 1_000 + 3_000 };
const UPPER_BOUND_KINDS = new Set(["refused_while_free", "non_owner_succeeded"]);

/**
 * checkHistory, with `store`'s liveness slack (LIVENESS_SLACK_MS) for the kinds a lease's upper
 * bound decides: those come from a second check with that tolerance, every other kind from the
 * checker's default. Lists are capped at `maxReported` per kind, as the checker's own.
 */
export function judge(history, store, { maxReported }) {
  const slack = LIVENESS_SLACK_MS[store];
  if (slack === undefined) return checkHistory(history, { maxReported });
  const all = { maxReported: 1_000_000 };
  const strict = checkHistory(history, all);
  const loose = checkHistory(history, { ...all, leaseToleranceMs: slack });
  const pick = (list, upper) => list.filter((v) => UPPER_BOUND_KINDS.has(v.kind) === upper);
  const cap = (list) => {
    const seen = new Map();
    return list.filter((v) => {
      const n = (seen.get(v.kind) ?? 0) + 1;
      seen.set(v.kind, n);
      return n <= maxReported;
    });
  };
  const violations = [...pick(strict.violations, false), ...pick(loose.violations, true)];
  const losses = [...pick(strict.losses, false), ...pick(loose.losses, true)];
  return {
    ...strict,
    ok: violations.length === 0,
    violationCount: violations.length,
    violations: cap(violations),
    lossCount: losses.length,
    losses: cap(losses),
  };
}

