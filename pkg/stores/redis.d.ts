import type { LockStore } from "../index.js";

/** The client APIs `redisLockStore` adapts to. */
export type RedisClientType = "ioredis" | "node-redis" | "upstash";

export interface RedisLockStoreOptions {
  /** Prepended to every lock key, e.g. "lock:". Default: none. */
  prefix?: string;
  /** Skip client detection (for wrapped or proxied clients). */
  clientType?: RedisClientType;
}

/**
 * A LockStore over Redis. Every method answers a promise and costs one round trip
 * (release/extend: one more after Redis lost its script cache).
 */
export type RedisLockStore = LockStore & {
  /** The key prefix in use. */
  readonly prefix: string;
  /** The client API detected (or given). */
  readonly clientType: RedisClientType;
};

/**
 * A LockStore over a connected ioredis, node-redis (v4+) or @upstash/redis client.
 * Acquire is `SET key owner PX ttl NX`; release and extend are compare-owner Lua scripts run by
 * EVALSHA (EVAL on NOSCRIPT); expiry is judged by Redis's clock.
 */
export declare function redisLockStore(client: object, options?: RedisLockStoreOptions): RedisLockStore;
export default redisLockStore;

/** Which client API `client` speaks, or null if none of the supported ones. */
export declare function detectRedisClient(client: unknown): RedisClientType | null;

/** The release script (compare owner, then DEL). */
export declare const RELEASE_SCRIPT: string;
/** The extend script (compare owner, then PEXPIRE). */
export declare const EXTEND_SCRIPT: string;
/** SHA-1 of RELEASE_SCRIPT. */
export declare const RELEASE_SHA: string;
/** SHA-1 of EXTEND_SCRIPT. */
export declare const EXTEND_SHA: string;
