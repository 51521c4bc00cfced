// Types for the Cloudflare Workers (workerd) build of keel-lock: everything in ../index.d.ts,
// plus the Durable Object lock store.
export * from "../index.js";
import type { Grant, InspectAnswer, LockStore, WaitedGrant, WatchReport } from "../index.js";

/** The slice of a Durable Object namespace binding (`env.LOCKS`) the store uses. */
export interface LockNamespace {
  idFromName(name: string): unknown;
  get(id: any): any;
}

/**
 * A lock store on Durable Objects: each key lives in its own `LockDurableObject`
 * (`idFromName(key)`), one RPC per operation, expiry judged by the object's clock.
 * `setLockStore(new DurableObjectLockStore(env.LOCKS))`. It keeps hold metadata and answers
 * `inspect`, so `run(fn, { metadata })`, `inspect(key)`, `campaign` and `observe` work over it.
 */
export declare class DurableObjectLockStore implements LockStore {
  constructor(namespace: LockNamespace);
  /**
   * Set-if-absent. `metadata` (a string of at most 1 KiB of UTF-8), as every acquiring
   * method's last argument, is kept with the hold until it ends.
   */
  acquire(key: string, owner: string, ttlMs: number, metadata?: string): Promise<Grant | false>;
  /** One RPC that stays open while the call waits in the key's FIFO queue (at most `waitMs`). */
  acquireOrWait(
    key: string,
    owner: string,
    ttlMs: number,
    waitMs: number,
    pollMs?: number,
    metadata?: string,
  ): Promise<WaitedGrant | false>;
  /**
   * A shared hold (semaphore permits, a read lock) of `weight` out of `limit`: a grant, `false`
   * (no room now, or callers queued first), or `{ heldLimit }` when the key's live shared holds
   * have another limit.
   */
  acquireShared(
    key: string,
    owner: string,
    ttlMs: number,
    weight: number,
    limit: number,
    metadata?: string,
  ): Promise<Grant | false | { heldLimit: number }>;
  /** `acquireShared`, or one RPC open while the call waits in the key's one FIFO queue (at most `waitMs`). */
  acquireSharedOrWait(
    key: string,
    owner: string,
    ttlMs: number,
    weight: number,
    limit: number,
    waitMs: number,
    pollMs?: number,
    metadata?: string,
  ): Promise<WaitedGrant | false | { heldLimit: number }>;
  /** Leave the key's queue, or release the key if it was already handed to `owner`. */
  withdraw(key: string, owner: string): Promise<void>;
  release(key: string, owner: string): Promise<boolean>;
  /** Free the key whoever holds it (operators); `true` if someone did. */
  forceRelease(key: string): Promise<boolean>;
  extend(key: string, owner: string, ttlMs: number): Promise<boolean>;
  isLocked(key: string): Promise<boolean>;
  remainingTime(key: string): Promise<number | null>;
  /**
   * Who holds `key` and who waits, read in one turn of its object: the live holds in fence
   * order (each one's metadata, fence and whole ms left by the object's clock) and the calls
   * queued for it. Never an owner token.
   */
  inspect(key: string): Promise<InspectAnswer>;
  /**
   * Pushes `key`'s exclusive holder changes to `onChange`, as its object makes them (a hand-over
   * as the new grant alone); resolves, once subscribed, to the function that stops. An open RPC
   * call per watch keeps the subscription: if the object goes away (a restart), `onChange(null)`
   * says "look again" and the watch subscribes anew. `observe` uses it.
   */
  watch(key: string, onChange: (change: WatchReport | null) => void): Promise<() => Promise<boolean> | undefined>;
}

/** What `snapshot()` reports: storage as it is now, expired rows not yet deleted included. */
export interface LockObjectSnapshot {
  /** The object's clock, ms since the epoch. */
  now: number;
  /** When the cleanup alarm fires, or `null` when none is set. */
  alarm: number | null;
  rows: { key: string; expiresAt: number }[];
  /** Shared holds (semaphore permits, read locks), one per owner. */
  shared: { key: string; expiresAt: number; weight: number; limit: number }[];
  /** `acquireOrWait` and `acquireSharedOrWait` calls queued in this instance (in memory: a restart empties the queue). */
  waiting: number;
}

/**
 * The Durable Object holding lock rows in SQLite storage. Re-export it from your Worker entry
 * (`export { LockDurableObject } from "keel-lock"`) and bind it with a `new_sqlite_classes`
 * migration.
 */
export declare class LockDurableObject {
  constructor(ctx: unknown, env: unknown);
  /** Each acquiring method's optional last argument is the hold's metadata (≤ 1 KiB of UTF-8; `null`: none). */
  acquire(key: string, owner: string, ttlMs: number, metadata?: string | null): Promise<Grant | false>;
  acquireOrWait(key: string, owner: string, ttlMs: number, waitMs: number, metadata?: string | null): Promise<WaitedGrant | false>;
  acquireShared(
    key: string,
    owner: string,
    ttlMs: number,
    weight: number,
    limit: number,
    metadata?: string | null,
  ): Promise<Grant | false | { heldLimit: number }>;
  acquireSharedOrWait(
    key: string,
    owner: string,
    ttlMs: number,
    weight: number,
    limit: number,
    waitMs: number,
    metadata?: string | null,
  ): Promise<WaitedGrant | false | { heldLimit: number }>;
  withdraw(key: string, owner: string): Promise<boolean>;
  release(key: string, owner: string): Promise<boolean>;
  forceRelease(key: string): Promise<boolean>;
  extend(key: string, owner: string, ttlMs: number): Promise<boolean>;
  isLocked(key: string): boolean;
  remainingTime(key: string): number | null;
  /** Who holds `key` and who waits, in one synchronous turn (never an owner token). */
  inspect(key: string): InspectAnswer;
  /**
   * Calls `onChange(seq, report)` for each change of `key`'s exclusive holder, numbered from
   * the answer, until `unwatch(key, id)` or a failed call (`DurableObjectLockStore#watch`).
   */
  watch(key: string, id: string, onChange: (seq: number, change: WatchReport) => unknown): number;
  /** Stays open while watch `id` lasts; resolves when it ends. */
  watching(key: string, id: string): Promise<boolean>;
  /** Ends watch `id` of `key`: `true` when it was live. */
  unwatch(key: string, id: string): boolean;
  /** Diagnostics of the whole object. */
  snapshot(): Promise<LockObjectSnapshot>;
  alarm(): Promise<void>;
}
