// Public types of keel-lock. Hand-written (not generated) because they are the contract:
// `run()`'s tuple result and the LockStore seam need generics the generator cannot express.

/** How long to wait for a held lock, and how often to retry. */
export interface AcquireOptions {
  /** Total time to keep trying, in ms (0 to 2^31 - 1). Default 0: try once, don't wait. */
  timeout?: number;
  /** Pause between attempts, in ms (0 to 2^31 - 1). Default 50. */
  retryDelay?: number;
}

/**
 * What a store's `acquire` answers when it grants the lock and keeps fences: the acquisition's
 * fencing token, a whole number from 1 to 2^53 - 1 (`Number.MAX_SAFE_INTEGER`), strictly greater
 * than every fence the store handed out before for that key.
 */
export interface Grant {
  fence: number;
}

/** What `run()` hands `fn`: facts about this hold. */
export interface LockContext {
  /**
   * This hold's fencing token, or `null` when the store keeps no fences. Pass it to the
   * protected resource, which refuses writes carrying a lower fence than it has seen.
   */
  readonly fence: number | null;
}

/**
 * Where lock rows live. `acquire` must be an atomic set-if-absent (an expired row counts as
 * absent); `release` and `extend` must act only when `owner` matches. Each method may answer a
 * value or a promise of one. A store that can't do both isn't a lock — check yours with
 * `checkLockStore` from `keel-lock/testing`. Any answer outside these types is a `TypeError`
 * naming the method.
 */
export interface LockStore {
  /**
   * `false` when the key is held; when granted, `{ fence }` (a store that keeps fences) or
   * `true` (one that does not: its locks have `fence === null`).
   */
  acquire(key: string, owner: string, ttlMs: number): boolean | Grant | Promise<boolean | Grant>;
  release(key: string, owner: string): boolean | Promise<boolean>;
  extend(key: string, owner: string, ttlMs: number): boolean | Promise<boolean>;
  isLocked(key: string): boolean | Promise<boolean>;
  /** ms until `key` expires (0 to 2^31 - 1), or `null` when nobody holds it. */
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
  /**
   * The current hold's fencing token: strictly greater than every fence handed out before for
   * this key. `null` when this handle holds nothing, or when its store keeps no fences.
   */
  readonly fence: number | null;
  /**
   * Acquire, run `fn(context)`, always release (in a `finally`). `fn` never runs if the lock
   * is held. `context.fence` is this hold's fencing token.
   */
  run<T>(fn: (context: LockContext) => T, options?: AcquireOptions): Promise<RunResult<T>>;
  /** `run()` that never waits. */
  runImmediately<T>(fn: (context: LockContext) => T): Promise<RunResult<T>>;
  /** Take the lock; with `{ timeout }`, keep trying until then. */
  acquire(options?: AcquireOptions): Promise<boolean>;
  /** Free the lock if this handle still owns it; `false` (never a throw) otherwise. */
  release(): Promise<boolean>;
  /** Reset expiry to `ttlMs` (default: the lock's TTL) from now. Rejects with `LockNotHeldError` if lost. */
  extend(ttlMs?: number): Promise<void>;
  /** Key, TTL, owner token and fence as a string for `restoreLock()`. Throws `LockNotHeldError` if not held. */
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
  /** `{ fence }` when acquired (one counter per store), `false` when held. */
  acquire(key: string, owner: string, ttlMs: number): Grant | false;
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
