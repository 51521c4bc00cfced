import type { Grant, LockStore } from "../index.js";

/** The client APIs `redisLockStore` adapts to. */
export type RedisClientType = "ioredis" | "ioredis-cluster" | "node-redis" | "node-redis-cluster" | "upstash";

export interface RedisLockStoreOptions {
  /** Put in front of every key name, e.g. "lock:" → `lock:{invoice:42}`. Default: none. */
  prefix?: string;
  /** Skip client detection (for wrapped or proxied clients). */
  clientType?: RedisClientType;
}

/** The Redis key names for one lock key; both carry the same hash tag, so one cluster slot. */
export interface RedisLockKeys {
  /** `<prefix>{<key>}`: the owner token, with the lock's TTL. */
  readonly lock: string;
  /** `<prefix>{<key>}:fence`: the fence counter, never expires. */
  readonly fence: string;
}

/**
 * A LockStore over Redis. Every method answers a promise and costs one round trip
 * (a script call: one more after that Redis lost its script cache).
 */
export type RedisLockStore = Omit<LockStore, "acquire"> & {
  /**
   * One script, atomically: if the key is free, take it and answer `{ fence }` from the key's
   * counter; if someone holds it, answer `false`. The fence (1..2^53 − 1) is greater than every
   * fence handed out before for this key — across holders, processes, expiry and release — as
   * long as Redis keeps the counter (see the README on persistence, failover and eviction).
   * Rejects (and takes no lock) if the counter is not a positive integer or is exhausted.
   */
  acquire(key: string, owner: string, ttlMs: number): Promise<false | Grant>;
  /** The key prefix in use. */
  readonly prefix: string;
  /** The client API detected (or given). */
  readonly clientType: RedisClientType;
  /** The Redis key names this store uses for `key`. */
  keys(key: string): RedisLockKeys;
};

/**
 * A LockStore over a connected ioredis client or Cluster, node-redis (v4+) client or cluster
 * (`createCluster`), or @upstash/redis client. Acquire, release and extend are Lua scripts run by
 * EVALSHA (EVAL on NOSCRIPT); expiry is judged by Redis's clock.
 */
export declare function redisLockStore(client: object, options?: RedisLockStoreOptions): RedisLockStore;
export default redisLockStore;

/**
 * The key names for `key` under `prefix` (default ""): `%`, `{` and `}` in either are written
 * `%25`, `%7B`, `%7D`, and the key becomes the hash tag.
 */
export declare function redisLockKeys(key: string, prefix?: string): RedisLockKeys;

/** Which client API `client` speaks, or null if none of the supported ones. */
export declare function detectRedisClient(client: unknown): RedisClientType | null;

/** The acquire script (set-if-absent, then the next fence from the counter). */
export declare const ACQUIRE_SCRIPT: string;
/** The release script (compare owner, then DEL). */
export declare const RELEASE_SCRIPT: string;
/** The extend script (compare owner, then PEXPIRE). */
export declare const EXTEND_SCRIPT: string;
/** SHA-1 of ACQUIRE_SCRIPT. */
export declare const ACQUIRE_SHA: string;
/** SHA-1 of RELEASE_SCRIPT. */
export declare const RELEASE_SHA: string;
/** SHA-1 of EXTEND_SCRIPT. */
export declare const EXTEND_SHA: string;
