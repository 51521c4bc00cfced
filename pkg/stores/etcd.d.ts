import type { Grant, HeldLimit, HolderInfo, InspectAnswer, LockStore, WatchReport } from "../index.js";

/** A grant after waiting: the fence and the ms waited, by this store's clock. */
export interface EtcdWaitedGrant {
  fence: number;
  waitedMs: number;
}

export interface EtcdLockStoreOptions {
  /**
   * The cluster's client URLs, `http://` or `https://` (a path is kept, for a proxy in front of
   * the gateway; no credentials in the URL: use `auth`). One URL or several: a request goes to
   * the current one and moves on to the next when it cannot be reached or answers unavailable.
   */
  endpoints: string | string[];
  /** etcd user and password: a token from `/v3/auth/authenticate`, renewed when etcd refuses it. */
  auth?: { username: string; password: string };
  /** Put in front of every name the store writes. Default "keel-lock/". */
  prefix?: string;
  /** The fetch to call (default: the global `fetch`). */
  fetch?: (input: string, init: RequestInit) => Promise<Response>;
  /** Bound of one request to one endpoint, in whole ms (default 2000); one call keeps trying endpoints for at most three of them. */
  timeoutMs?: number;
  /**
   * A waiter looks again (one transaction) when its watch has told it nothing for
   * `max(pollMs, safetyNetMs)` ms: in case the member serving the watch is cut off. Default 5000.
   */
  safetyNetMs?: number;
}

/** The etcd names for one lock key. */
export interface EtcdLockKeys {
  /** `<prefix><key>` (`%` → `%25`, `/` → `%2F`): the owner token, attached to the hold's lease. */
  lock: string;
  /** `<lock>/m`: the hold's metadata, when it has some, attached to the same lease. */
  metadata: string;
  /** `<lock>/q/`: the queue; each waiter's key is this plus its lease ID, attached to that lease. */
  queue: string;
  /** `<lock>/s/`: the shared holds; each is this plus its owner (`%` → `%25`, `/` → `%2F`), on its own lease. */
  shared: string;
}

/** An error from etcd, or from reaching it; never carries a password or token. */
export declare class EtcdStoreError extends Error {
  readonly name: "EtcdStoreError";
  /** The HTTP status of etcd's answer, if one came. */
  readonly status: number | null;
  /** etcd's gRPC status code (5: not found, 14: unavailable, …), if it sent one. */
  readonly etcdCode: number | null;
  /** The endpoint that answered (or did not). */
  readonly endpoint: string | null;
  /** True when a write's reply was lost: it may or may not have applied. */
  readonly outcomeUnknown: boolean;
}

/** A LockStore on etcd; every method answers a promise. */
export type EtcdLockStore = Omit<LockStore, "acquire" | "inspect" | "forceRelease" | "acquireOrWait" | "withdraw" | "acquireShared" | "acquireSharedOrWait" | "acquireMany" | "watch"> & {
  /**
   * A lease of `ceil(ttlMs / 1000)` seconds (at least etcd's minimum) and one transaction that
   * puts the key only if it does not exist: `{ fence }` (the put's revision, strictly increasing
   * across the whole cluster) or `false` when someone holds it or anyone queues for it.
   */
  acquire(key: string, owner: string, ttlMs: number, metadata?: string): Promise<false | Grant>;
  /**
   * Takes the key, or joins its queue (a key under `<lock>/q/` on the waiter's own lease) and
   * watches the deletion of the waiter just before it (first in line: the lock key's), for up to
   * `waitMs`. `{ fence, waitedMs }`, or `false` when `waitMs` is spent or the place was lost.
   */
  acquireOrWait(key: string, owner: string, ttlMs: number, waitMs: number, pollMs: number, metadata?: string): Promise<false | EtcdWaitedGrant>;
  /**
   * A shared hold of `weight` under `limit` (1 <= weight <= limit <= 2^32 - 1): read the key's
   * state, then one transaction that puts the hold only if nothing read has changed, nobody
   * queues and no lock is held. `{ fence }`, `false`, or `{ heldLimit }` when the live shared
   * holds have another limit.
   */
  acquireShared(key: string, owner: string, ttlMs: number, weight: number, limit: number, metadata?: string): Promise<false | Grant | HeldLimit>;
  /** `acquireShared`, or wait up to `waitMs` in the key's one FIFO queue (locks and shares alike). */
  acquireSharedOrWait(
    key: string,
    owner: string,
    ttlMs: number,
    weight: number,
    limit: number,
    waitMs: number,
    pollMs: number,
    metadata?: string,
  ): Promise<false | EtcdWaitedGrant | HeldLimit>;
  /**
   * Every key in one transaction, all or none, whatever the keys (a lease per key): one grant
   * per key, all with the transaction's revision as fence; `false` when any key is held, queued
   * for or held shared (nothing changes); `null` when the set needs more than 128 operations in
   * one transaction (more than 42 keys, or a cluster with a lower `--max-txn-ops`).
   */
  acquireMany(keys: string[], owners: string[], ttlMs: number, metadata?: (string | undefined)[]): Promise<false | null | Grant[]>;
  /**
   * Resolves, once etcd's watch is created, to stop(): every change of the key's exclusive
   * holder is told in etcd's order — a grant `{ fence, held: true, metadata, remainingMs }`, an
   * end `{ fence, held: false }` (release, force-release, and expiry too) — or `null` when
   * changes may have been missed (etcd compacted the revisions a broken stream would resume
   * from). Not an extend, not shared holds; never an owner token. stop() resolves once every
   * change received before it has been told.
   */
  watch(key: string, onChange: (change: WatchReport | null) => void): Promise<() => Promise<void>>;
  /** Leaves the queue (the pending acquireOrWait answers false), or releases the key if it was handed over. */
  withdraw(key: string, owner: string): Promise<boolean>;
  release(key: string, owner: string): Promise<boolean>;
  extend(key: string, owner: string, ttlMs: number): Promise<boolean>;
  isLocked(key: string): Promise<boolean>;
  /** Whole seconds left of the hold's lease (held shared: the last to expire), in ms (etcd rounds down), or null. */
  remainingTime(key: string): Promise<number | null>;
  /** The live holds (the lock's, or every shared one: metadata, fence, ms left) in fence order, never an owner, and how many queue. */
  inspect(key: string): Promise<InspectAnswer & { holders: HolderInfo[]; waiting: number }>;
  /** Revokes every holder's lease (the lock's or the shared holds'), whoever holds them; true when a hold was ended. */
  forceRelease(key: string): Promise<boolean>;
  /** The names used for `key`. */
  keys(key: string): EtcdLockKeys;
  readonly prefix: string;
  readonly endpoints: readonly string[];
};

/** A LockStore on etcd 3.4 or later, through its v3 JSON gateway. */
export declare function etcdLockStore(options: EtcdLockStoreOptions): EtcdLockStore;

/** The names `etcdLockStore` uses for `key` under `prefix` (default "keel-lock/"). */
export declare function etcdLockKeys(key: string, prefix?: string): EtcdLockKeys;

/** The lease TTL in seconds asked for a hold of `ttlMs`: rounded up, at least 1. */
export declare function leaseSeconds(ttlMs: number): number;

export declare const DEFAULT_PREFIX: "keel-lock/";
export declare const DEFAULT_TIMEOUT_MS: 2000;
