// keel-lock/testing: the LockStore conformance kit.
import type { LockStore } from "./index.js";

/** One conformance property's outcome. */
export interface PropertyResult {
  property: string;
  /** `false`: the store broke the property (`message` says how). */
  ok: boolean;
  /**
   * `false`: the property does not apply to this store — a finding, not a failure (`message`
   * says why; e.g. a store without fences).
   */
  applicable: boolean;
  message: string | null;
}

/** Options for `checkLockStore`. */
export interface CheckOptions {
  /** Prefix for every key the check touches. Default "keel-lock-conformance:". */
  keyPrefix?: string;
  /**
   * Short TTL used by the expiry properties, ms. Default 150. An owner's extend must reach a lock
   * with this TTL while it is live: a try in which that extend was refused after the whole short
   * TTL passed, with the key no longer held, is repeated (three tries), then reported as too slow
   * to judge.
   */
  shortTtlMs?: number;
  /** Extra wait past that TTL before the key must be free, ms. Default 100. */
  settleMs?: number;
  /** Concurrent acquirers racing for one key. Default 50. */
  contenders?: number;
}

/** A property the store broke. */
export interface PropertyFailure extends PropertyResult {
  ok: false;
  message: string;
}

/** Rejection of `checkLockStore`: every property the store broke, with what was observed. */
export declare class LockStoreConformanceError extends Error {
  constructor(failures: PropertyFailure[], results: PropertyResult[]);
  readonly name: "LockStoreConformanceError";
  /** The failed properties. */
  readonly failures: PropertyFailure[];
  /** Every property's outcome, passed ones included. */
  readonly results: PropertyResult[];
}

/**
 * Run the LockStore contract (the Rust core's conformance properties) against `store`.
 * Resolves one result per property when every property holds; rejects with a
 * `LockStoreConformanceError` naming each one that failed.
 */
export declare function checkLockStore(store: LockStore, options?: CheckOptions): Promise<PropertyResult[]>;

/** Like `checkLockStore`, but resolves every property's result without rejecting on failures. */
export declare function lockStoreResults(store: LockStore, options?: CheckOptions): Promise<PropertyResult[]>;

/**
 * One recorded event of a history (see `checkHistory`). Times are ms on a clock every recorder
 * shares. Across Node processes on one machine, stamp with `process.hrtime` (offset from one anchor
 * the processes agree on), not `performance.timeOrigin + performance.now()`: each process derives
 * its `timeOrigin` from two clock reads at start, and one preempted between them stays milliseconds
 * off — enough for the checker to see overlaps that never happened.
 */
export interface HistoryEvent {
  /** Who recorded it (a process or task number). */
  client?: number;
  /** The lock's key (empty for `restart`, which concerns every key). */
  key?: string;
  /** The hold it concerns: a label unique per acquisition; a stranger's release uses its own. */
  owner?: string;
  /**
   * `invoke`, then one of `ok` (granted / released / extended), `fail` (the store said no) or
   * `info` (unknown: an error, a timeout); `enter`/`exit` of the critical section; `expired`
   * (the holder learned it lost the lease); `write` to a fenced resource (`fence`, `accepted`);
   * `restart` of the store (`persistent`: it claims to keep its state).
   */
  type: "invoke" | "ok" | "fail" | "info" | "enter" | "exit" | "expired" | "write" | "restart";
  /** For invoke/ok/fail/info. Default "acquire". */
  op?: "acquire" | "release" | "extend";
  /** The event certainly happened at or after this time (ms). */
  t0: number;
  /** … and at or before this one (default `t0`). */
  t1?: number;
  /** `invoke` of acquire/extend: the TTL requested. */
  ttlMs?: number;
  /** `invoke` of acquire: a single store call, not a wait. */
  immediate?: boolean;
  /**
   * `invoke` of acquire: a shared hold — `limit` permits on the key, `weight` of them taken
   * (default 1), as a semaphore's; `shared: true` without a limit is a read lock. Without
   * either the acquisition is exclusive (a lock, a write lock).
   */
  weight?: number;
  limit?: number;
  shared?: boolean;
  /** `ok` of acquire: the grant's fence; `write`: the fence the write carried. */
  fence?: number | null;
  /** `write`: whether the resource accepted it. */
  accepted?: boolean;
  /** `restart`: the store claims durability across restarts. */
  persistent?: boolean;
}

/** A property a history broke, with the indexes of the events that prove it. */
export interface HistoryViolation {
  kind:
    | "mutual_exclusion"
    | "over_limit"
    | "limit_mismatch"
    | "fence_order"
    | "stale_fence_accepted"
    | "non_owner_succeeded"
    | "refused_while_free"
    | "malformed_history";
  key: string;
  message: string;
  events: number[];
}

/** The checker's verdict. */
export interface HistoryReport {
  /** No violations. */
  ok: boolean;
  /** Invocations in the history. */
  operations: number;
  /** Every violation (the list is capped at `maxReported`). */
  violationCount: number;
  violations: HistoryViolation[];
  /** Overlaps, fence regressions and stale writes explained by a non-persistent store restart: documented losses, not violations. */
  lossCount: number;
  /** The losses (the list is capped at `maxReported` per kind). */
  losses: HistoryViolation[];
  /** Store restarts in the history. */
  restarts: number;
}

/** Options for `checkHistory`. */
export interface HistoryCheckOptions {
  /** How far a store's expiry may be off from grant + TTL on the shared clock, ms. Default 5. */
  leaseToleranceMs?: number;
  /** Violations listed at most. Default 100. */
  maxReported?: number;
}

/**
 * Check a recorded history: two certainly valid leases at once, fences not strictly increasing
 * in grant order, a stale fenced write accepted, a release/extend succeeding for a non-owner, an
 * immediate acquire refused while the key was certainly free. Only what every placement of the
 * events within their `[t0, t1]` intervals proves is flagged.
 */
export declare function checkHistory(history: HistoryEvent[], options?: HistoryCheckOptions): HistoryReport;

/** Options for `checkLockStoreUnderLoad`. */
export interface LoadOptions extends HistoryCheckOptions {
  /** Concurrent clients, each with a store from `makeStore(i)`. Default 8. */
  clients?: number;
  /** Keys they contend for. Default 2. */
  keys?: number;
  /** How long to run, ms. Default 3000. */
  durationMs?: number;
  /** Seed of the clients' choices (their timing is the machine's). Default 1. */
  seed?: number;
  /** TTL of every acquisition, ms. Default 200. */
  ttlMs?: number;
  /** Longest time a holder stays inside, ms (rare holders overstay the TTL on purpose). Default 8. */
  holdMs?: number;
  /** Stop after this many store calls. Default 1000000. */
  maxOperations?: number;
  /** Prefix of every key. Default "keel-lock-load:<seed>:<time>:". */
  keyPrefix?: string;
  /** Also resolve the recorded history. */
  keepHistory?: boolean;
}

/** `checkLockStoreUnderLoad`'s verdict. */
export interface LoadReport extends HistoryReport {
  /** Acquisitions granted. */
  grants: number;
  /** The recorded history, with `keepHistory`. */
  history?: HistoryEvent[];
}

/**
 * Run many concurrent clients against stores from `makeStore` for `durationMs`, record what
 * they saw, and check the history. Resolves the verdict (`ok: false` with the violations when
 * the store broke a property); rejects only for unusable arguments or a `makeStore` that throws.
 */
export declare function checkLockStoreUnderLoad(
  makeStore: (client: number) => LockStore | Promise<LockStore>,
  options?: LoadOptions,
): Promise<LoadReport>;
