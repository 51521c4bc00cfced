// keel-lock/redis — a LockStore backed by Redis, handing out fencing tokens.
//
// No runtime dependencies: you hand it a connected client of your choice and it adapts to that
// client's API. Supported clients:
//
//   ioredis         new Redis(...)                    evalsha(sha, numkeys, ...keys, ...args)
//   ioredis cluster new Redis.Cluster([...])          the same; routed by the first key's slot
//   node-redis      createClient(...) (v4, v5)        evalSha(sha, { keys, arguments })
//   node-redis      createCluster(...) (v4, v5)       sendCommand(keys[0], false, ["EVALSHA", …])
//   @upstash/redis  new Redis({ url, token })  (REST) evalsha(sha, keys, args)
//
// Key layout. For lock key K under prefix P the store uses two keys, both carrying the hash tag
// {K}, so they live in one Redis Cluster slot whatever K is:
//
//   P{K}          the lock: owner token as value, PX ttl        e.g. lock:{invoice:42}
//   P{K}:fence    the fence counter: an integer, never expires   e.g. lock:{invoice:42}:fence
//
// Inside the braces, and in P, the characters "%", "{" and "}" are written as "%25", "%7B" and
// "%7D". So the first "{" of the name is always the one this store put there, the first "}" after
// it closes the tag, and the tag is never empty: Redis hashes exactly the (escaped) user key. The
// escaping is one-to-one, so distinct (prefix, key) pairs never share a name.
//
// How each operation maps onto Redis (one round trip each on the happy path):
//
//   acquire        EVALSHA <acquire script>    if the lock is absent: INCR the fence counter, SET
//                                              the lock PX ttl, answer the fence — atomically
//   release        EVALSHA <release script>    compare owner, then DEL — atomically
//   extend         EVALSHA <extend script>     compare owner, then PEXPIRE — atomically
//   isLocked       EXISTS
//   remainingTime  PTTL                        -2 (no key) / -1 (no expiry) / 0 → null
//
// Expiry is decided by Redis's clock alone; the caller's clock is never consulted.
//
// Scripts: their SHA-1 digests are constants in this file (a test recomputes them from the script
// text), so no SCRIPT LOAD round trip is ever needed. When Redis answers NOSCRIPT (its script cache
// is empty after a restart, a failover or SCRIPT FLUSH; in a cluster every master has its own
// cache) the store sends the same call as EVAL with the full script text, which also puts the
// script back in that server's cache for the next EVALSHA.
//
// Fences are as durable as the counter key: a Redis that loses writes (failover under
// asynchronous replication, a restart without persistence, eviction under an allkeys-* policy)
// can hand out a fence again.

import { argumentChecks, MAX_FENCE } from "./args.js";

/**
 * If KEYS[1] (the lock) is absent: INCR KEYS[2] (the fence counter), SET KEYS[1] to ARGV[1] with
 * a TTL of ARGV[2] ms, and answer the new counter value (the fence). If it is held, answer 0.
 * A counter that would leave 1..2^53-1 is an error: it is put back as it was and no lock is
 * taken, so every later acquire of the key fails the same way.
 */
export const ACQUIRE_SCRIPT = `-- keel-lock acquire: if KEYS[1] is free, set it to ARGV[1] (the owner) for ARGV[2] ms and
-- answer the next fence from the counter KEYS[2]; answer 0 if KEYS[1] is held
if redis.call("EXISTS", KEYS[1]) == 1 then
  return 0
end
local fence = redis.call("INCR", KEYS[2])
if fence < 1 or fence > ${MAX_FENCE} then
  redis.call("DECR", KEYS[2])
  return redis.error_reply("ERR keel-lock: fence counter " .. KEYS[2] .. " is outside 1..${MAX_FENCE}")
end
redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
return fence
`;

/** Deletes KEYS[1] only while ARGV[1] (the owner token) still holds it. Answers 1 or 0. */
export const RELEASE_SCRIPT = `-- keel-lock release: delete the key only while ARGV[1] still holds it
local holder = redis.call("GET", KEYS[1])
if holder ~= ARGV[1] then
  return 0
end
return redis.call("DEL", KEYS[1])
`;

/** Resets KEYS[1]'s TTL to ARGV[2] ms only while ARGV[1] still holds it. Answers 1 or 0. */
export const EXTEND_SCRIPT = `-- keel-lock extend: reset the key's TTL to ARGV[2] ms only while ARGV[1] still holds it
local holder = redis.call("GET", KEYS[1])
if holder ~= ARGV[1] then
  return 0
end
return redis.call("PEXPIRE", KEYS[1], ARGV[2])
`;

/** SHA-1 of ACQUIRE_SCRIPT, the name Redis caches it under (checked by the tests). */
export const ACQUIRE_SHA = "95cb1fa5cd8e965d5f868493e175dca38044a014";
/** SHA-1 of RELEASE_SCRIPT, the name Redis caches it under (checked by the tests). */
export const RELEASE_SHA = "2eba89dfc16f347ef9ce2d9f0e625614dc8fe64c";
/** SHA-1 of EXTEND_SCRIPT, the name Redis caches it under (checked by the tests). */
export const EXTEND_SHA = "564bbbf4ede2e356999019b3c2ee0c69b5802941";

const CLIENT_TYPES = ["ioredis", "ioredis-cluster", "node-redis", "node-redis-cluster", "upstash"];

function fn(client, name) {
  return typeof client[name] === "function";
}

/**
 * Works out which client API `client` speaks.
 * node-redis has camel-cased `evalSha`; its cluster client also has `getSlotMaster`.
 * @upstash/redis has `evalsha` taking arrays plus `scriptLoad`.
 * ioredis has `evalsha` taking a key count and no `scriptLoad`; its Cluster has `isCluster === true`.
 */
export function detectRedisClient(client) {
  if (client === null || (typeof client !== "object" && typeof client !== "function")) return null;
  if (fn(client, "evalSha") && fn(client, "set")) {
    return fn(client, "getSlotMaster") ? "node-redis-cluster" : "node-redis";
  }
  if (fn(client, "evalsha") && fn(client, "scriptLoad") && fn(client, "set")) return "upstash";
  if (fn(client, "evalsha") && fn(client, "set")) return client.isCluster === true ? "ioredis-cluster" : "ioredis";
  return null;
}

// Each adapter exposes the same four primitives; every one is a single Redis command. `keys` is
// an array whose first element decides the slot (cluster clients route by it).
function adapter(client, type) {
  switch (type) {
    case "ioredis":
    case "ioredis-cluster":
      return {
        evalsha: (sha, keys, args) => client.evalsha(sha, keys.length, ...keys, ...args),
        eval: (script, keys, args) => client.eval(script, keys.length, ...keys, ...args),
        exists: (key) => client.exists(key),
        pttl: (key) => client.pttl(key),
      };
    case "node-redis-cluster":
      // The cluster client's own evalSha does not route by keys[0] in node-redis v4 (its key
      // lookup reads the SHA argument), so scripts go through sendCommand(firstKey, …), which
      // both v4 and v5 route by the key given.
      return {
        evalsha: (sha, keys, args) =>
          client.sendCommand(keys[0], false, ["EVALSHA", sha, String(keys.length), ...keys, ...args]),
        eval: (script, keys, args) =>
          client.sendCommand(keys[0], false, ["EVAL", script, String(keys.length), ...keys, ...args]),
        exists: (key) => client.exists(key),
        pttl: (key) => (fn(client, "pTTL") ? client.pTTL(key) : client.PTTL(key)),
      };
    case "node-redis":
      return {
        evalsha: (sha, keys, args) => client.evalSha(sha, { keys, arguments: args }),
        eval: (script, keys, args) => client.eval(script, { keys, arguments: args }),
        exists: (key) => client.exists(key),
        pttl: (key) => (fn(client, "pTTL") ? client.pTTL(key) : client.PTTL(key)),
      };
    case "upstash":
      return {
        evalsha: (sha, keys, args) => client.evalsha(sha, keys, args),
        eval: (script, keys, args) => client.eval(script, keys, args),
        exists: (key) => client.exists(key),
        pttl: (key) => client.pttl(key),
      };
    default:
      throw new TypeError(`redisLockStore: unknown clientType ${JSON.stringify(type)}`);
  }
}

function isNoScript(error) {
  const text = error && typeof error === "object" ? String(error.message ?? "") : String(error);
  return /NOSCRIPT/i.test(text);
}

// "%" first, so the escapes it introduces are not escaped again.
const escapeName = (text) => text.replace(/%/g, "%25").replace(/\{/g, "%7B").replace(/\}/g, "%7D");

const check = argumentChecks("redisLockStore");

/**
 * The Redis key names the store uses for lock key `key` under `prefix`: `lock` holds the owner
 * token (with the lock's TTL), `fence` the fence counter (no TTL). Both carry the hash tag
 * `{key}` (with `%`, `{`, `}` escaped as `%25`, `%7B`, `%7D`), so they share one cluster slot.
 */
export function redisLockKeys(key, prefix = "") {
  check.key(key);
  if (typeof prefix !== "string") throw new TypeError("redisLockStore: prefix must be a string");
  const lock = `${escapeName(prefix)}{${escapeName(key)}}`;
  return { lock, fence: `${lock}:fence` };
}

function fenceFrom(reply) {
  const value = typeof reply === "number" ? reply : typeof reply === "string" || typeof reply === "bigint" ? Number(reply) : NaN;
  if (value === 0) return false;
  if (!Number.isInteger(value) || value < 1 || value > MAX_FENCE) {
    throw new TypeError(`redisLockStore: acquire script answered ${String(reply)}, expected 0 or a fence in 1..${MAX_FENCE}`);
  }
  return { fence: value };
}

/**
 * A keel-lock LockStore over Redis.
 *
 * @param {object} client a connected ioredis (or ioredis Cluster), node-redis v4+ (createClient
 *   or createCluster) or @upstash/redis client
 * @param {{ prefix?: string, clientType?: "ioredis" | "ioredis-cluster" | "node-redis" | "node-redis-cluster" | "upstash" }} [options]
 *   `prefix` is put in front of every key name (default: none);
 *   `clientType` skips detection when a wrapped client confuses it.
 */
export function redisLockStore(client, options = {}) {
  if (options === null || typeof options !== "object") {
    throw new TypeError("redisLockStore: options must be an object");
  }
  const prefix = options.prefix ?? "";
  if (typeof prefix !== "string") throw new TypeError("redisLockStore: prefix must be a string");
  let clientType = options.clientType;
  if (clientType === undefined) {
    clientType = detectRedisClient(client);
    if (clientType === null) {
      throw new TypeError(
        "redisLockStore: unrecognised client — expected an ioredis, node-redis (v4+) or @upstash/redis client " +
          "(or pass options.clientType)",
      );
    }
  } else if (!CLIENT_TYPES.includes(clientType)) {
    throw new TypeError(`redisLockStore: clientType must be one of ${CLIENT_TYPES.join(", ")}`);
  }
  const redis = adapter(client, clientType);
  const escapedPrefix = escapeName(prefix);
  const lockKey = (key) => `${escapedPrefix}{${escapeName(key)}}`;

  // EVALSHA first (one round trip); on NOSCRIPT, EVAL the text (one more, and it re-caches the script).
  async function runScript(sha, script, keys, args) {
    try {
      return await redis.evalsha(sha, keys, args);
    } catch (error) {
      if (!isNoScript(error)) throw error;
      return await redis.eval(script, keys, args);
    }
  }

  return {
    prefix,
    clientType,

    /** The Redis key names used for `key`: `{ lock, fence }`. */
    keys(key) {
      return redisLockKeys(key, prefix);
    },

    async acquire(key, owner, ttlMs) {
      check.key(key);
      check.owner(owner);
      check.ttl(ttlMs);
      const lock = lockKey(key);
      return fenceFrom(await runScript(ACQUIRE_SHA, ACQUIRE_SCRIPT, [lock, `${lock}:fence`], [owner, String(ttlMs)]));
    },

    async release(key, owner) {
      check.key(key);
      check.owner(owner);
      const reply = await runScript(RELEASE_SHA, RELEASE_SCRIPT, [lockKey(key)], [owner]);
      return Number(reply) === 1;
    },

    async extend(key, owner, ttlMs) {
      check.key(key);
      check.owner(owner);
      check.ttl(ttlMs);
      const reply = await runScript(EXTEND_SHA, EXTEND_SCRIPT, [lockKey(key)], [owner, String(ttlMs)]);
      return Number(reply) === 1;
    },

    async isLocked(key) {
      check.key(key);
      return Number(await redis.exists(lockKey(key))) > 0;
    },

    async remainingTime(key) {
      check.key(key);
      const ms = Number(await redis.pttl(lockKey(key)));
      return Number.isFinite(ms) && ms > 0 ? ms : null;
    },
  };
}

export default redisLockStore;
