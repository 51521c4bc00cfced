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
  /** Short TTL used by the expiry properties, ms. Default 150. */
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
