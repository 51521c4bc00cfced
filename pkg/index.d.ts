// Public types of keel-lock. Hand-written (not generated) because they are the contract:
// `run()`'s tuple result and the LockStore seam need generics the generator cannot express.
/// <reference lib="esnext.disposable" />

/** The slice of an `AbortSignal` keel-lock uses, for projects whose types declare none. */
export interface AbortSignalLike {
  readonly aborted: boolean;
  readonly reason: any;
  addEventListener(type: "abort", listener: () => void, options?: { once?: boolean }): void;
  removeEventListener(type: "abort", listener: () => void): void;
}

/**
 * The runtime's `AbortSignal` where the project's types declare one (DOM, `@types/node`,
 * Workers types), so signals pass straight to `fetch` and friends; `AbortSignalLike` otherwise.
 */
export type LockAbortSignal = typeof globalThis extends { AbortSignal: { prototype: infer S } }
  ? S
  : AbortSignalLike;

/** How long to wait for a held lock, and how often to retry. */
export interface AcquireOptions {
  /** Total time to wait, in ms (0 to 2^31 - 1). Default 0: try once, don't wait. */
  timeout?: number;
  /**
   * Pause between attempts, in ms (0 to 2^31 - 1). Default 50. For a store that hands the lock
   * over to waiters (the memory store, the Durable Object, Redis, Postgres) there are no
   * attempts to pace: it is only the safety-net interval at which a waiter looks again.
   */
  retryDelay?: number;
  /**
   * Stop waiting when this signal aborts: the promise rejects with `signal.reason`, the waiter
   * leaves the store's queue, and nothing stays held. An already-aborted signal rejects without
   * touching the store.
   */
  signal?: LockAbortSignal;
  /**
   * What this hold says about its holder (which host, which job), at most 1 KiB of UTF-8 (a
   * `RangeError` beyond): kept by the store with the hold and shown by `inspect()`. A store
   * that keeps none (no `inspect` method) refuses it with a `TypeError`.
   */
  metadata?: string;
  /**
   * As in the Web Locks API: take the key only if it is free now (keel-lock's default,
   * `timeout` 0; a `TypeError` with any other `timeout`).
   */
  ifAvailable?: boolean;
  /**
   * As in the Web Locks API: free the key whoever holds it (`forceRelease`: the old holder
   * learns at its next extend, its signal aborting), then take it with the other options; a
   * waiter already queued is served first. Keys held alone only: a semaphore or read lock
   * refuses it (`TypeError`), as does `ifAvailable` with it.
   */
  steal?: boolean;
}

/** A store's `inspect(key)` answer. */
export interface InspectAnswer {
  /** The live holds, in fence order. */
  holders: HolderInfo[];
  /** Callers queued for the key, or `null` where the store cannot count them. */
  waiting: number | null;
}

/** One live hold of a key, as `inspect()` shows it (never its owner token). */
export interface HolderInfo {
  /** What the holder said about itself, or `null`. */
  metadata: string | null;
  /** The hold's fence, or `null` from a store without fences. */
  fence: number | null;
  /** Milliseconds until the hold expires. */
  remainingMs: number;
}

/** Who holds a key and who waits, read in one step. */
export interface LockInfo {
  key: string;
  /** Whether anyone holds it. */
  held: boolean;
  /** The live holds, in fence order: one for a lock, one per permit or reader. */
  holders: HolderInfo[];
  /** Callers queued for the key, or `null` where the store cannot count them. */
  waiting: number | null;
}

/** A leader of a key as `observe()` sees it. */
export interface Leader {
  metadata: string | null;
  fence: number | null;
}

/** Auto-extension while a lock is held: extend every `every` ms, for at most `maxHoldMs`. */
export interface AutoExtendOptions {
  /** Extend this often, in ms. Default: a third of the lock's TTL. */
  every?: number;
  /** Stop extending, and abort the hold's signal, once the hold is this old (ms). Default: no cap. */
  maxHoldMs?: number;
}

/** `run()`'s options: waiting, plus keeping the lock alive while `fn` runs. */
export interface RunOptions extends AcquireOptions {
  /** Keep extending the lock while `fn` runs (`true`: every ttl/3, no cap). */
  autoExtend?: boolean | AutoExtendOptions;
}

/** A semaphore's `acquire()`/`hold()` options: waiting, plus how many permits to take. */
export interface PermitOptions {
  /** Permits to take at once, a whole number from 1 to the limit. Default 1. */
  permits?: number;
}

/** `hold()`'s options. */
export interface HoldOptions extends AcquireOptions {
  /** Keep extending the lock until it is released or disposed. */
  autoExtend?: boolean | AutoExtendOptions;
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
  /**
   * Aborted the moment the hold is known or presumed lost — an extend the store refused, the
   * conservative local deadline passing without a successful extend, or `maxHoldMs` — with a
   * `LockNotHeldError` (carrying the key) as its reason. Advisory: `fn` decides what to do;
   * `run()` still releases afterwards. Not aborted when `fn` releases the hold itself.
   */
  readonly signal: LockAbortSignal;
}

/** What `run(fn)` of a multi-key lock passes to `fn`. */
export interface MultiKeyContext {
  /** Always `null`: a resource is guarded by the fence of its own key, in `fences`. */
  readonly fence: null;
  /** Each key's fencing token, or `null` when the store keeps no fences. */
  readonly fences: Readonly<Record<string, number>> | null;
  /** Aborted the moment any key's hold is known or presumed lost (reading it watches every key). */
  readonly signal: LockAbortSignal;
}

/** A lock over several keys (`lock([k1, k2, …])`): the `Lock` interface, over every key. */
export interface MultiKeyLock {
  /** The keys, in the order they are taken (code-point order). */
  readonly keys: readonly string[];
  readonly ttlMs: number;
  /** Always `null`; each key's fence is in `fences`. */
  readonly fence: null;
  readonly limit: null;
  /** Each key's fence while every key is held with one, else `null`. */
  readonly fences: Readonly<Record<string, number>> | null;
  run<T>(fn: (context: MultiKeyContext) => T, options?: RunOptions): Promise<RunResult<T>>;
  runImmediately<T>(fn: (context: MultiKeyContext) => T): Promise<RunResult<T>>;
  /** Takes every key or none: `true` when all are held. */
  acquire(options?: AcquireOptions): Promise<boolean>;
  /** `acquire`, or throws `LockUnavailableError`; with `autoExtend`, keeps every key alive. */
  hold(options?: HoldOptions): Promise<this>;
  /** Frees every key: `true` when every key was still held. */
  release(): Promise<boolean>;
  /** Resets every key's expiry; a key no longer held frees the others and rejects `LockNotHeldError`. */
  extend(ttlMs?: number): Promise<void>;
  autoExtend(options?: AutoExtendOptions): MultiKeyContext;
  stopAutoExtend(): Promise<void>;
  /** While `autoExtend()` runs: aborted when any key's hold is lost. */
  readonly signal: LockAbortSignal | undefined;
  /** Frees every key whoever holds it: `true` when any was held. */
  forceRelease(): Promise<boolean>;
  /** Every key's hold as one string for `restoreLock`, or throws `LockNotHeldError`. */
  serialize(): string;
  /** Whether anyone holds any of the keys. */
  isLocked(): Promise<boolean>;
  /** Whether some key's hold is presumed lost. */
  isExpired(): Promise<boolean>;
  /** Milliseconds until the first held key's expiry, or `null` when none is held. */
  getRemainingTime(): Promise<number | null>;
  [Symbol.asyncDispose](): Promise<void>;
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
  /**
   * Optional: acquire, or join the key's FIFO queue and wait up to `waitMs` for the store to
   * hand the key over (on release, or when the holder's TTL passes). `pollMs` is the caller's
   * `retryDelay`: a store that may miss a notification re-checks no more often than that.
   * `false` once `waitMs` is spent (and no longer queued); a `false` more than `pollMs` before
   * that (the store lost the caller's place) is asked again after `pollMs`, for what is left.
   * A store that has it is waited on instead of polled.
   */
  acquireOrWait?(
    key: string,
    owner: string,
    ttlMs: number,
    waitMs: number,
    pollMs: number,
  ): boolean | Grant | WaitedGrant | Promise<boolean | Grant | WaitedGrant>;
  /**
   * Optional, for semaphores and read locks: atomically, if no exclusive hold is live, the
   * live shared holds are under `limit` (or none is live), their weights plus `weight` fit in
   * it, and nobody is queued for `key`, record `owner`'s hold for `ttlMs` and answer
   * `{ fence }` (from the key's one fence counter). Live holds under another limit answer
   * `{ heldLimit }` (the caller gets `LimitMismatchError`); otherwise `false`. `release` and
   * `extend` then act on that owner's hold alone, and `acquire` must refuse while any shared
   * hold is live. A store without it refuses semaphores and read locks with a `TypeError`.
   */
  acquireShared?(
    key: string,
    owner: string,
    ttlMs: number,
    weight: number,
    limit: number,
  ): boolean | Grant | HeldLimit | Promise<boolean | Grant | HeldLimit>;
  /**
   * Optional: `acquireShared`, or wait up to `waitMs` in the key's one FIFO queue (shared and
   * exclusive waiters alike: a hand-over grants the front waiters while each fits, and stops
   * at the first that does not).
   */
  acquireSharedOrWait?(
    key: string,
    owner: string,
    ttlMs: number,
    weight: number,
    limit: number,
    waitMs: number,
    pollMs: number,
  ): boolean | Grant | WaitedGrant | HeldLimit | Promise<boolean | Grant | WaitedGrant | HeldLimit>;
  /**
   * Optional, for `lock([...keys])`: atomically, if `acquire(keys[i], owners[i], ttlMs)` would
   * grant every key at this instant, grant them all and answer one `acquire` grant per key, in
   * order; otherwise change nothing and answer `false`. `null`: this store cannot take this
   * set in one step (nothing changed; the keys are then taken one at a time). The keys arrive
   * sorted by code point and distinct (at most 64), the owners distinct.
   */
  acquireMany?(
    keys: string[],
    owners: string[],
    ttlMs: number,
  ): false | null | Array<true | Grant> | Promise<false | null | Array<true | Grant>>;
  /**
   * Optional: who holds `key` and who waits, in one atomic read — `{ holders: [{ metadata,
   * fence, remainingMs }], waiting }`, the live holds in fence order, `waiting` `null` where
   * unknown; never an owner token. A store with it keeps hold metadata: the acquiring methods
   * then get `metadata` (a string) as one more argument after their documented ones when the
   * caller gave some (`acquireMany`: an array, one per key), and keep it with the hold.
   */
  inspect?(key: string): InspectAnswer | Promise<InspectAnswer>;
  /**
   * Optional: push `key`'s exclusive holder changes to `onChange` (then `observe` is told
   * rather than polling). Resolves, once subscribed, to a function that stops the reports.
   * Until then, every change a store operation makes is reported once, in the store's order:
   * a grant (acquire or hand-over) as `{ fence, held: true, metadata, remainingMs }`, an end
   * (release, force-release, withdraw) as `{ fence, held: false }` (unsaid when the key went
   * straight to a waiter: the newer grant says it). Expiry, `extend` and
   * shared holds are not reported; `null` means reports may have been missed (look again).
   * Never an owner token.
   */
  watch?(key: string, onChange: (change: WatchReport | null) => void): Promise<() => unknown>;
  /** Optional: leave `key`'s queue; if already handed `key`, release it. */
  withdraw?(key: string, owner: string): unknown;
  /** Optional: free `key` whoever holds it; `true` when someone did. */
  forceRelease?(key: string): boolean | Promise<boolean>;
  release(key: string, owner: string): boolean | Promise<boolean>;
  extend(key: string, owner: string, ttlMs: number): boolean | Promise<boolean>;
  isLocked(key: string): boolean | Promise<boolean>;
  /** ms until `key` expires (0 to 2^31 - 1), or `null` when nobody holds it. */
  remainingTime(key: string): number | null | Promise<number | null>;
}

/** A change of a key's exclusive holder, as `LockStore.watch` reports it. */
export type WatchReport =
  | { fence: number; held: true; metadata: string | null; remainingMs: number }
  | { fence: number; held: false };

/** A grant from `acquireOrWait`: the fence (or `null`) and how long it waited in the store. */
export interface WaitedGrant {
  /** The fence, or `null` from a store without fences (then `waitedMs` is required). */
  fence: number | null;
  /** Whole ms the request waited in the store's queue before the grant (absent: 0). */
  waitedMs?: number;
}

/** `acquireShared`'s answer when the key's live shared holds are under another limit. */
export interface HeldLimit {
  /** The limit the live holds have. */
  heldLimit: number;
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
   * The limit this handle's holds are shared under: a semaphore's, or 2^32 - 1 for a read
   * lock; `null` for a lock (which holds its key alone).
   */
  readonly limit: number | null;
  /**
   * Acquire, run `fn(context)`, always release (in a `finally`). `fn` never runs if the lock
   * is held. `context.fence` is this hold's fencing token.
   */
  run<T>(fn: (context: LockContext) => T, options?: RunOptions): Promise<RunResult<T>>;
  /** `run()` that never waits. */
  runImmediately<T>(fn: (context: LockContext) => T): Promise<RunResult<T>>;
  /** Take the lock; with `{ timeout }`, wait until then. */
  acquire(options?: AcquireOptions): Promise<boolean>;
  /**
   * Acquire or throw `LockUnavailableError`; resolves this lock, for
   * `await using held = await lock(key).hold({ timeout })`.
   */
  hold(options?: HoldOptions): Promise<this>;
  /** Free the lock if this handle still owns it; `false` (never a throw) otherwise. Stops `autoExtend()`. */
  release(): Promise<boolean>;
  /** Releases the lock (for `await using`). */
  [Symbol.asyncDispose](): Promise<void>;
  /**
   * Keep extending the held lock until `release()` or `stopAutoExtend()`; returns the hold's
   * context, whose signal aborts if it is lost. Throws `LockNotHeldError` when nothing is held.
   */
  autoExtend(options?: AutoExtendOptions): LockContext;
  /** Stop `autoExtend()`; resolves once no extend is in flight. */
  stopAutoExtend(): Promise<void>;
  /** The signal of the hold `autoExtend()` keeps alive, or `undefined`. */
  readonly signal: LockAbortSignal | undefined;
  /**
   * Free the key whoever holds it — for operators clearing a stuck lock. Dangerous: the holder
   * is not stopped; it learns at its next extend (its signal aborts then). Rejects when the
   * store cannot force-release.
   */
  forceRelease(): Promise<boolean>;
  /** Reset expiry to `ttlMs` (default: the lock's TTL) from now. Rejects with `LockNotHeldError` if lost or expired. */
  extend(ttlMs?: number): Promise<void>;
  /** Key, TTL, owner token and fence as a string for `restoreLock()`. Throws `LockNotHeldError` if not held or expired. */
  serialize(): string;
  /** Does anyone (not necessarily this handle) hold the key? */
  isLocked(): Promise<boolean>;
  /** Did this handle hold the lock and lose it? Judged conservatively against the local deadline. */
  isExpired(): Promise<boolean>;
  /** ms until the key's expiry, or `null` if unheld. */
  getRemainingTime(): Promise<number | null>;
  /** Who holds the key and who waits (see `inspect()`). */
  inspect(): Promise<LockInfo>;
}

/**
 * A counting semaphore's handle: a `Lock` whose holds are permits. Each hold is its own lease
 * (owner token, TTL, fence); a handle holds one at a time, of `permits` (default 1).
 */
export interface Semaphore extends Lock {
  /** How many permits the key has. */
  readonly limit: number;
  run<T>(fn: (context: LockContext) => T, options?: RunOptions & PermitOptions): Promise<RunResult<T>>;
  acquire(options?: AcquireOptions & PermitOptions): Promise<boolean>;
  hold(options?: HoldOptions & PermitOptions): Promise<this>;
}

/** The default store: in memory, per isolate. For tests and single-process apps. */
export declare class MemoryLockStore implements LockStore {
  constructor();
  /** `{ fence }` when acquired (one counter per store), `false` when held; `metadata` kept with the hold. */
  acquire(key: string, owner: string, ttlMs: number, metadata?: string): Grant | false;
  release(key: string, owner: string): boolean;
  extend(key: string, owner: string, ttlMs: number): boolean;
  isLocked(key: string): boolean;
  remainingTime(key: string): number | null;
  forceRelease(key: string): boolean;
  /** Permits or a read lock: `{ fence }`, `false`, or `{ heldLimit }` (see `LockStore`). */
  acquireShared(
    key: string,
    owner: string,
    ttlMs: number,
    weight: number,
    limit: number,
    metadata?: string,
  ): Grant | HeldLimit | false;
  /** Who holds `key` (with the metadata each hold was taken with) and who waits. */
  inspect(key: string): Promise<InspectAnswer>;
  /** `key`'s exclusive holders as they change, told as each change is made (see `LockStore.watch`). */
  watch(key: string, onChange: (change: WatchReport | null) => void): Promise<() => void>;
  /** Every key to its owner in one turn (`{ fence }` each), or `false` and none. */
  acquireMany(keys: string[], owners: string[], ttlMs: number, metadata?: string[]): Grant[] | false;
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

/** Thrown by `hold()` when the lock could not be acquired (within its timeout). */
export declare class LockUnavailableError extends Error {
  constructor(key: string, message?: string);
  readonly name: "LockUnavailableError";
  /** The lock's key. */
  readonly key: string;
}

/**
 * Rejects a lock call whose store did not answer in time, so the call was abandoned: a call
 * outside a wait gets the lock's TTL (an acquire answered later could only grant an expired
 * hold). Its outcome is unknown; a grant answered later is released. A wait with `timeout`
 * never fails this way: it resolves `false` / `[false, undefined]` when the timeout is spent.
 */
export declare class LockStoreTimeoutError extends Error {
  constructor(key: string, operation: string, afterMs: number, message?: string);
  readonly name: "LockStoreTimeoutError";
  /** The lock's key. */
  readonly key: string;
  /** The store method that went unanswered, e.g. `"release"`. */
  readonly operation: string;
  /** How long it was given, in ms. */
  readonly afterMs: number;
}

/**
 * Rejects an acquire on a key whose live shared holds are under another limit
 * (`semaphore(key, 5)` while holders of `semaphore(key, 3)`, or readers, are live).
 */
export declare class LimitMismatchError extends Error {
  constructor(key: string, heldLimit: number, limit: number);
  readonly name: "LimitMismatchError";
  /** The key. */
  readonly key: string;
  /** The limit of the live holds. */
  readonly heldLimit: number;
  /** The limit asked for. */
  readonly limit: number;
}

/**
 * At most `limit` permits of `key` held at once (default one per caller), each for `ttlMs`
 * (default 30_000), on the current store. FIFO: a waiter is never passed by a later one.
 */
export declare function semaphore(key: string, limit: number, ttlMs?: number): Semaphore;
/** A read lock: shares `key` with other readers; waits for (and behind) writers. */
export declare function readLock(key: string, ttlMs?: number): Lock;
/** A write lock: `key` alone — the same as `lock(key)`. */
export declare function writeLock(key: string, ttlMs?: number): Lock;
/** A lock on `key`, held for `ttlMs` (default 30_000) once acquired, on the current store. */
export declare function lock(key: string, ttlMs?: number): Lock;
/**
 * One lock over several keys (1 to 64, distinct): all held or none. The keys are taken one at a
 * time in code-point order — the same order for every caller, so overlapping sets never
 * deadlock — each within what is left of the timeout; a key refused, a timeout or an abort frees
 * the keys taken so far before the call answers. Losing any key is losing the lock.
 */
export declare function lock(keys: readonly string[], ttlMs?: number): MultiKeyLock;
/**
 * Rebuild a lock from `serialize()`, owner token and all, on the current store; a multi-key
 * lock's string gives a `MultiKeyLock` (`restoreLock<MultiKeyLock>(s)`).
 */
export declare function restoreLock<T extends Lock | MultiKeyLock = Lock>(serialized: string): T;
/** Who holds `key` and who waits, on the current store (which must have `inspect`). */
export declare function inspect(key: string): Promise<LockInfo>;
/**
 * Waits (first come, first served where the store hands over) to lead `key`, runs `fn` while
 * holding it with keep-alive on, and resolves what `fn` resolves. Leadership lost while `fn`
 * runs: `signal` aborts, and the campaign rejects with the loss (a `LockNotHeldError`).
 */
export declare function campaign<T>(
  key: string,
  fn: (leading: { fence: number | null; signal: AbortSignal }) => T | Promise<T>,
  options?: { ttlMs?: number; metadata?: string; signal?: LockAbortSignal },
): Promise<T>;
/**
 * The leaders of `key` as they change (`null` while nobody leads); never an older leader after
 * a newer one. A store with `watch` (the memory store, the Durable Object, Redis with pub/sub, PostgreSQL) pushes
 * every change; elsewhere `inspect()` is read every `intervalMs` (default 1000, at least 10),
 * and a leader that comes and goes between two looks is missed. Ends when `signal` aborts.
 */
export declare function observe(
  key: string,
  options?: { signal?: LockAbortSignal; intervalMs?: number },
): AsyncIterableIterator<Leader | null>;
/** What every lock event carries. */
export interface LockEventBase {
  /** The key, or a set's keys. */
  key: string | string[];
  /** The store's name: its `Symbol.toStringTag` (`RedisLockStore`, `DatabaseLockStore`) or class name (`MemoryLockStore`, `DurableObjectLockStore`); `LockStore` for a plain object. */
  store: string;
}
/** One call of `run`/`runImmediately`/`acquire`/`hold`, from its start (`run`/`acquire`) to its end. */
export interface LockAttemptEvent extends LockEventBase {
  /** Numbers one call's events, for a listener to pair them. */
  attempt: number;
  kind: "lock" | "semaphore" | "read";
}
/**
 * A lock event (`onLockEvent`). A call starts with `run` or `acquire`, may be `granted`, and
 * ends with one of `released` (a run's hold freed; `error` set if `fn` threw), `refused`,
 * `timed-out`, `aborted` or `error` (a store call failed); `lost` tells a loss while held.
 * `release()` and `extend()` of a held lock are told once they settle.
 */
export type LockEvent =
  | (LockAttemptEvent & {
      type: "run" | "acquire";
      timeoutMs: number;
      /**
       * Set by a listener to run the user's `fn` inside its own context (a tracer's active
       * span): `fn` runs as `runInside(() => fn(context))`; a second listener wraps the first's.
       */
      runInside?: (call: () => unknown) => unknown;
    })
  | (LockAttemptEvent & {
      type: "granted";
      fence: number | null;
      waitedMs: number;
      /** How the wait ended: no wait, the store's hand-over, or asking again. */
      via: "immediate" | "hand-over" | "poll";
    })
  | (LockAttemptEvent & { type: "released"; fence: number | null; heldMs: number; error?: unknown })
  | (LockAttemptEvent & { type: "refused" | "timed-out"; waitedMs: number })
  | (LockAttemptEvent & { type: "aborted" | "error"; waitedMs: number; error: unknown })
  | (LockAttemptEvent & { type: "lost"; fence: number | null; reason: unknown })
  | (LockEventBase & { type: "released" | "release-refused" | "extended"; fence: number | null; durationMs: number })
  | (LockEventBase & { type: "lost"; operation: "extend" | "release"; fence: number | null; durationMs: number; reason: unknown })
  | (LockEventBase & { type: "error"; operation: "extend" | "release"; fence: number | null; durationMs: number; error: unknown });
/**
 * Calls `listener` with every lock event from now on (logs, metrics; `keel-lock/otel` is built
 * on it); answers the function that stops. Costs nothing while nobody listens. A listener that
 * throws is reported on the console and changes nothing.
 */
export declare function onLockEvent(listener: (event: LockEvent) => void): () => void;
/** Register the store that `lock()` and `restoreLock()` use from now on. */
export declare function setLockStore(store: LockStore): void;
/** The store `lock()` uses: the very object last passed to `setLockStore`, or the default. */
export declare function getLockStore(): LockStore;
