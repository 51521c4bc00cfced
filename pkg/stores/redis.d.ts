import type { Grant, HolderInfo, InspectAnswer, LockStore, WaitedGrant, WatchReport } from "../index.js";

/** The client APIs `redisLockStore` adapts to. */
export type RedisClientType =
  | "ioredis"
  | "ioredis-cluster"
  | "node-redis"
  | "node-redis-cluster"
  | "upstash"
  | "glide"
  | "glide-cluster";

export interface RedisLockStoreOptions {
  /** Put in front of every key name, e.g. "lock:" → `lock:{invoice:42}`. Default: none. */
  prefix?: string;
  /** Skip client detection (for wrapped or proxied clients). */
  clientType?: RedisClientType;
  /**
   * A queued wait is looked at no more often than this, nor than the caller's `pollMs`, in case
   * its hand-over message was lost (whole ms, default 1000). Hand-overs arrive by pub/sub; this
   * is only the safety net.
   */
  safetyNetMs?: number;
  /**
   * A key with a hash tag of its own (the text between its first `{` and the first `}` after
   * that, not empty) is stored under that tag, `<prefix>{<tag>}{<key>}`, so keys sharing a tag
   * share a cluster slot and `acquireMany` takes them in one script on a cluster. Default false:
   * every key is its own tag. Every store sharing locks must use the same setting.
   */
  hashTags?: boolean;
  /**
   * After every grant — `acquire`, `acquireMany`, `acquireShared`, `acquireOrWait` and
   * `acquireSharedOrWait` taken at once or handed over — and every `extend`, send `WAIT replicas
   * timeoutMs` on the connection that made the write, to the node serving the key, and answer
   * only once `replicas` replicas acknowledged it. Otherwise a grant is released and the call
   * rejects with {@link LockNotReplicatedError}; an extend rejects and the hold keeps the expiry
   * it had. Narrows the writes a failover can lose; does not close the window (a failover may
   * promote a replica that had not acknowledged). Not with @upstash/redis (a TypeError): WAIT
   * needs a connection. Both whole numbers, `replicas` ≥ 1, `timeoutMs` in 1..2^31 − 1.
   * Default: off.
   */
  waitForReplicas?: { replicas: number; timeoutMs: number };
}

/** The Redis key names for one lock key; both carry the same hash tag, so one cluster slot. */
export interface RedisLockKeys {
  /** `<prefix>{<key>}`: the owner token (followed by NUL and the hold's metadata, if any), with the lock's TTL. */
  readonly lock: string;
  /** `<prefix>{<key>}:fence`: the fence counter, never expires. */
  readonly fence: string;
}

/** A grant after waiting: the fence and the whole ms the caller waited in the queue (≥ 0, by Redis's clock). */
export type RedisWaitedGrant = Grant & WaitedGrant & { fence: number };

/**
 * A LockStore over Redis. Every method answers a promise and costs one round trip
 * (a script call: one more after that Redis lost its script cache).
 */
/** One live hold of a key, as `inspect` answers it: never its owner token. */
export type RedisHolderInfo = HolderInfo;

/** Who holds a key and how many wait for it: `inspect`'s answer; Redis always counts its waiters. */
export interface RedisLockInfo extends InspectAnswer {
  /** Waiters queued for the key whose deadline has not passed. */
  waiting: number;
}

/** A shared acquire refused because the key is held under another limit (never queued). */
export interface RedisHeldLimit {
  /** The limit the key's live shared holds were taken under. */
  heldLimit: number;
}

export type RedisLockStore = Omit<
  LockStore,
  "acquire" | "acquireOrWait" | "withdraw" | "forceRelease" | "acquireShared" | "acquireSharedOrWait" | "acquireMany" | "inspect" | "watch"
> & {
  /**
   * One script, atomically: if the key is free, take it and answer `{ fence }` from the key's
   * counter; if someone holds it, answer `false`. The fence (1..2^53 − 1) is greater than every
   * fence handed out before for this key — across holders, processes, expiry and release — as
   * long as Redis keeps the counter (see the README on persistence, failover and eviction).
   * Rejects (and takes no lock) if the counter is not a positive integer or is exhausted.
   * `metadata` (at most 1024 bytes of UTF-8; longer is a RangeError) is kept with the hold, in
   * the same script, until it is released, expires or is force-released; `inspect` shows it.
   */
  acquire(key: string, owner: string, ttlMs: number, metadata?: string): Promise<false | Grant>;
  /**
   * Several keys in one script, atomically: when `acquire` would grant every key now (free or
   * expired, no live shared hold, no caller queued for it), `keys[i]` goes to `owners[i]` and the
   * answer is one `{ fence }` per key, in order, from each key's own counter; otherwise nothing
   * changes and the answer is `false`. `null`, with no request sent, on a cluster when the keys'
   * names are in different hash slots (see `hashTags`). 1 to 64 distinct keys sorted by code
   * point, distinct owners; rejects as `acquire` does if a key's counter cannot give a fence.
   * `metadata`, if given, holds one entry per key: that key's hold's metadata, or undefined.
   */
  acquireMany(
    keys: readonly string[],
    owners: readonly string[],
    ttlMs: number,
    metadata?: readonly (string | undefined)[],
  ): Promise<false | null | Grant[]>;
  /**
   * A shared hold of `weight` under `limit` (a semaphore's permits; a read lock is weight 1 under
   * 2^32 − 1), one script: `{ fence }` when no exclusive holder, nobody queued, and the weight
   * held plus `weight` is at most `limit`; `false` otherwise; `{ heldLimit }` when the key's
   * shared holds were taken under another limit. Each hold has its own owner, TTL and fence
   * (from the key's one counter); `release`/`extend` act on the owner's hold.
   * Rejects if weight and limit are not whole numbers with 1 ≤ weight ≤ limit ≤ 2^32 − 1.
   * `metadata`: this hold's, as for `acquire`.
   */
  acquireShared(
    key: string,
    owner: string,
    ttlMs: number,
    weight: number,
    limit: number,
    metadata?: string,
  ): Promise<false | Grant | RedisHeldLimit>;
  /**
   * Who holds `key`, in one script (an atomic read that writes nothing): its live holds with
   * their metadata, fence and time left, in fence order, and the number of live waiters. Never
   * answers an owner token.
   */
  inspect(key: string): Promise<RedisLockInfo>;
  /**
   * Frees every hold of `key` (for operators) and answers whether someone held it. Queued
   * waiters are handed the key, as on a release; the old holders' next extend answers false.
   */
  forceRelease(key: string): Promise<boolean>;
  /**
   * Waiting without polling (absent on @upstash/redis, which has no pub/sub: its callers poll).
   * Takes the key if it is free and nobody is queued; otherwise joins the key's FIFO queue in
   * Redis and waits up to `waitMs` for a release (or the holder's expiry) to hand it over,
   * looking again every max(`pollMs`, `safetyNetMs`) in case a message was lost. Answers
   * `{ fence, waitedMs }` (the TTL runs from the grant) or `false` (the wait is spent; no longer
   * queued). The first call that has to queue opens the store's pub/sub connection (a
   * `duplicate()` of the client); it is closed a moment after the last wait ends, and at once
   * when the client is closed — a wait still queued then rejects with `LockStoreClosedError`.
   * `metadata` waits with the caller in the queue and becomes its hold's when it is handed the key.
   */
  acquireOrWait?(key: string, owner: string, ttlMs: number, waitMs: number, pollMs: number, metadata?: string): Promise<false | RedisWaitedGrant>;
  /**
   * `acquireShared`, or join the key's one FIFO queue (behind exclusive and shared waiters alike)
   * and wait up to `waitMs` to be handed the hold — by a release, or when a hold's TTL passes.
   * `{ heldLimit }` answers at once and never queues. Absent on @upstash/redis. `metadata`: as
   * for `acquireOrWait`.
   */
  acquireSharedOrWait?(
    key: string,
    owner: string,
    ttlMs: number,
    weight: number,
    limit: number,
    waitMs: number,
    pollMs: number,
    metadata?: string,
  ): Promise<false | RedisWaitedGrant | RedisHeldLimit>;
  /**
   * Afterwards `owner` neither holds nor waits for `key`: leaves the queue, or releases a key it
   * was handed (to the next waiter); a pending `acquireOrWait` of `owner` answers false.
   */
  withdraw?(key: string, owner: string): Promise<void>;
  /**
   * Pushes the changes of `key`'s exclusive holder (absent on @upstash/redis, which has no
   * pub/sub: `observe` then polls `inspect`). Resolves, once subscribed, to `stop()`; until
   * then, every change a store operation makes is reported once, in the order Redis made it: a
   * grant (acquire, acquireMany, a hand-over to a waiter by a release, a force-release or the
   * look at the holder's expiry) as `{ fence, held: true, metadata, remainingMs }` (the hold's
   * TTL), an end (release, force-release, the withdraw of a key the owner was handed) as
   * `{ fence, held: false }`. Expiry, `extend` and shared holds are not reported; `null` means
   * reports may have been missed (the pub/sub connection dropped and is back, or the store's
   * watch had lapsed in Redis): look again. Never an owner token. While any key is watched the
   * store keeps its pub/sub connection open; closing the client ends every watch. A bad key or
   * an `onChange` that is not a function rejects with a `TypeError`; a closed client with
   * `LockStoreClosedError`. `stop()` may be called again; after it, `onChange` is not called.
   */
  watch?(key: string, onChange: (change: WatchReport | null) => void): Promise<() => Promise<void>>;
  /**
   * Pending `acquireOrWait` calls leave their queues (answering a grant they already got, else
   * false), every watch stops, and the pub/sub connection is closed; a later wait or watch
   * subscribes again. Not needed for a process to exit: closing the client closes the store's
   * connection too.
   */
  close?(): Promise<void>;
  /** The same as `close()`. */
  quit?(): Promise<void>;
  /** How many `acquireOrWait` calls of this store are waiting. */
  readonly waitingCount?: number;
  /** Whether the store's pub/sub connection is open and subscribed. */
  readonly subscribed?: boolean;
  /** The store's pub/sub connection (a duplicate of the client; with GLIDE, a second client), or null while it has none. */
  readonly subscriber?: object | null;
  /** The key prefix in use. */
  readonly prefix: string;
  /** The client API detected (or given). */
  readonly clientType: RedisClientType;
  /** The Redis key names this store uses for `key`. */
  keys(key: string): RedisLockKeys;
};

/**
 * A LockStore over a connected ioredis client or Cluster, node-redis (v4+) client or cluster
 * (`createCluster`), @upstash/redis client, or Valkey GLIDE `GlideClient` / `GlideClusterClient`. Acquire, release and extend are Lua scripts run by
 * EVALSHA (EVAL on NOSCRIPT); expiry is judged by Redis's clock. Except on @upstash/redis the
 * store also waits without polling (`acquireOrWait`, `withdraw`, `close`) and pushes holder
 * changes (`watch`).
 */
export declare function redisLockStore(client: object, options?: RedisLockStoreOptions): RedisLockStore;
export default redisLockStore;

/**
 * The key names for `key` under `prefix` (default ""): `%`, `{` and `}` in either are written
 * `%25`, `%7B`, `%7D`, and the key becomes the hash tag (with `hashTags`, a key's own tag if it
 * has one).
 */
export declare function redisLockKeys(key: string, prefix?: string, options?: { hashTags?: boolean }): RedisLockKeys;

/**
 * A store's wait was cut short because the client (or pool) it was given was closed: the wait
 * leaves nothing behind that outlives its deadline in the server.
 */
export declare class LockStoreClosedError extends Error {
  readonly name: "LockStoreClosedError";
}

/**
 * With `waitForReplicas`: a grant (or extend) that fewer replicas than asked acknowledged within
 * the timeout, or whose WAIT failed (a server that refuses WAIT, a lost connection): the store
 * did not answer it, because a failover could lose it.
 */
export declare class LockNotReplicatedError extends Error {
  readonly name: "LockNotReplicatedError";
  /** The lock key (the first key, for `acquireMany`). */
  readonly key: string;
  /** The store method whose grant or extend was not confirmed. */
  readonly operation: "acquire" | "acquireMany" | "acquireShared" | "acquireOrWait" | "acquireSharedOrWait" | "extend";
  /** Replicas that acknowledged, as WAIT answered; null when no WAIT answered. */
  readonly acknowledged: number | null;
  /** The option's `replicas`. */
  readonly required: number;
  /** For a grant: whether it was given back (false: it lapses at its TTL). Always false for an extend, which keeps its hold. */
  readonly released: boolean;
}

/** Which client API `client` speaks, or null if none of the supported ones. */
export declare function detectRedisClient(client: unknown): RedisClientType | null;

/** The acquire script (set-if-absent with nobody queued, then the next fence from the counter). */
export declare const ACQUIRE_SCRIPT: string;
/** The release script (compare owner, then DEL, or drop the owner's shared hold; hands the key over). */
export declare const RELEASE_SCRIPT: string;
/** The extend script (compare owner, then PEXPIRE, or move the owner's shared hold's expiry). */
export declare const EXTEND_SCRIPT: string;
/** SHA-1 of ACQUIRE_SCRIPT. */
export declare const ACQUIRE_SHA: string;
/** SHA-1 of RELEASE_SCRIPT. */
export declare const RELEASE_SHA: string;
/** The release script asking first as for a shared holder (run for owners the store saw take a shared hold; releases either kind). */
export declare const RELEASE_SHARED_SCRIPT: string;
/** SHA-1 of RELEASE_SHARED_SCRIPT. */
export declare const RELEASE_SHARED_SHA: string;
/** SHA-1 of EXTEND_SCRIPT. */
export declare const EXTEND_SHA: string;
/** The acquire-or-queue script of `acquireOrWait`. */
export declare const ENQUEUE_SCRIPT: string;
/** The store's safety-net look, for several locks at once: which of its waiters were handed their key; hands over a key whose holder expired. */
export declare const CHECK_SCRIPT: string;
/** A waiter leaves the queue (timeout, withdraw), or releases a key it was handed. */
export declare const LEAVE_SCRIPT: string;
/** The shared acquire (or queue) script of `acquireShared` and `acquireSharedOrWait`. */
export declare const ACQUIRE_SHARED_SCRIPT: string;
/** SHA-1 of ACQUIRE_SHARED_SCRIPT. */
export declare const ACQUIRE_SHARED_SHA: string;
/** The script of `acquireMany` (every key of a set, or none). */
export declare const ACQUIRE_MANY_SCRIPT: string;
/** SHA-1 of ACQUIRE_MANY_SCRIPT. */
export declare const ACQUIRE_MANY_SHA: string;
/** The force-release script (DEL whoever holds it, then hand over). */
export declare const FORCE_RELEASE_SCRIPT: string;
/** SHA-1 of ENQUEUE_SCRIPT. */
export declare const ENQUEUE_SHA: string;
/** SHA-1 of CHECK_SCRIPT. */
export declare const CHECK_SHA: string;
/** SHA-1 of LEAVE_SCRIPT. */
export declare const LEAVE_SHA: string;
/** SHA-1 of FORCE_RELEASE_SCRIPT. */
export declare const FORCE_RELEASE_SHA: string;
/** The inspect script (the key's live holds — fence, metadata, time left — and its live waiters; writes nothing). */
export declare const INSPECT_SCRIPT: string;
/** SHA-1 of INSPECT_SCRIPT. */
export declare const INSPECT_SHA: string;
/** The watch script (a store watches a key, renews its watch, or stops; marks the holder so its release is reported). */
export declare const WATCH_SCRIPT: string;
/** SHA-1 of WATCH_SCRIPT. */
export declare const WATCH_SHA: string;
/** The confirm script of `waitForReplicas` after a hand-over (while the owner holds the key, rewrites the fence counter as it is: a write of the waiter's own connection for WAIT to count). */
export declare const CONFIRM_SCRIPT: string;
/** SHA-1 of CONFIRM_SCRIPT. */
export declare const CONFIRM_SHA: string;
