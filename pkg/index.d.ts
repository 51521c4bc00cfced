// Public types of keel-lock. Hand-written (not generated) because they are the contract:
// `run()`'s tuple result and the LockStore seam need generics the generator cannot express.

/** How long to wait for a held lock, and how often to retry. */
export interface AcquireOptions {
  /** Total time to keep trying, in ms. Default 0: try once, don't wait. */
  timeout?: number;
  /** Pause between attempts, in ms. Default 50. */
  retryDelay?: number;
}

/**
 * Where lock rows live. `acquire` must be an atomic set-if-absent (an expired row counts as
 * absent); `release` and `extend` must act only when `owner` matches. Each method may answer a
 * value or a promise of one. A store that can't do both isn't a lock — check yours with
 * `checkLockStore` from `keel-lock/testing`.
 */
export interface LockStore {
  acquire(key: string, owner: string, ttlMs: number): boolean | Promise<boolean>;
  release(key: string, owner: string): boolean | Promise<boolean>;
  extend(key: string, owner: string, ttlMs: number): boolean | Promise<boolean>;
  isLocked(key: string): boolean | Promise<boolean>;
  /** ms until `key` expires, or `null` when nobody holds it. */
  remainingTime(key: string): number | null | Promise<number | null>;
}

/** What `run()` resolves: `[true, result]`, or `[false, undefined]` when the lock was held. */
export type RunResult<T> = [ran: true, result: Awaited<T>] | [ran: false, result: undefined];

/** A lock on one key. Create with `lock()` or `restoreLock()`. */
export declare class Lock {
  private constructor();
  /** The key. */
  readonly key: string;
  /** The TTL in ms (also the default for `extend()`). */
  readonly ttlMs: number;
  /** Acquire, run `fn`, always release (in a `finally`). `fn` never runs if the lock is held. */
  run<T>(fn: () => T, options?: AcquireOptions): Promise<RunResult<T>>;
  /** `run()` that never waits. */
  runImmediately<T>(fn: () => T): Promise<RunResult<T>>;
  /** Take the lock; with `{ timeout }`, keep trying until then. */
  acquire(options?: AcquireOptions): Promise<boolean>;
  /** Free the lock if this handle still owns it; `false` (never a throw) otherwise. */
  release(): Promise<boolean>;
  /** Reset expiry to `ttlMs` (default: the lock's TTL) from now. Rejects with `LockNotHeldError` if lost. */
  extend(ttlMs?: number): Promise<void>;
  /** Key, TTL and owner token as a string for `restoreLock()`. Throws `LockNotHeldError` if not held. */
  serialize(): string;
  /** Does anyone (not necessarily this handle) hold the key? */
  isLocked(): Promise<boolean>;
  /** Did this handle hold the lock and lose it? Judged conservatively against the local deadline. */
  isExpired(): Promise<boolean>;
  /** ms until the key's expiry, or `null` if unheld. */
  getRemainingTime(): Promise<number | null>;
}

/** The default store: in memory, per isolate. For tests and single-process apps. */
export declare class MemoryLockStore implements LockStore {
  constructor();
  acquire(key: string, owner: string, ttlMs: number): boolean;
  release(key: string, owner: string): boolean;
  extend(key: string, owner: string, ttlMs: number): boolean;
  isLocked(key: string): boolean;
  remainingTime(key: string): number | null;
  /** Rows stored right now, expired rows not yet swept included. */
  readonly size: number;
  /** Delete expired rows now; returns how many went. */
  purgeExpired(): number;
}

/** Thrown by `extend()` (and `serialize()`) when the lock has expired or was never acquired. */
export declare class LockNotHeldError extends Error {
  constructor(key: string, message?: string);
  readonly name: "LockNotHeldError";
  /** The lock's key. */
  readonly key: string;
}

/** A lock on `key`, held for `ttlMs` (default 30_000) once acquired, on the current store. */
export declare function lock(key: string, ttlMs?: number): Lock;
/** Rebuild a lock from `serialize()`, owner token and all, on the current store. */
export declare function restoreLock(serialized: string): Lock;
/** Register the store that `lock()` and `restoreLock()` use from now on. */
export declare function setLockStore(store: LockStore): void;
/** The store `lock()` uses: the very object last passed to `setLockStore`, or the default. */
export declare function getLockStore(): LockStore;

/** One conformance property's outcome. */
export interface PropertyResult {
  property: string;
  ok: boolean;
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
/** Run the LockStore contract's properties against `store`; one result per property. */
export declare function checkLockStore(store: LockStore, options?: CheckOptions): Promise<PropertyResult[]>;
