// keel-lock/testing: the LockStore conformance kit.
import type { CheckOptions, LockStore, PropertyResult } from "./index.js";

export type { CheckOptions, PropertyResult };

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
