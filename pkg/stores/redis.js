// keel-lock/redis — a LockStore backed by Redis.
//
// No runtime dependencies: you hand it a connected client of your choice and it adapts to that
// client's API. Supported clients:
//
//   ioredis        new Redis(...)                      set(k, v, "PX", ttl, "NX"), evalsha(sha, n, ...keys, ...args)
//   node-redis     createClient(...) (v4, v5)          set(k, v, { PX, NX }), evalSha(sha, { keys, arguments })
//   @upstash/redis new Redis({ url, token })  (REST)   set(k, v, { px, nx }), evalsha(sha, keys, args)
//
// How each operation maps onto Redis (one round trip each on the happy path):
//
//   acquire        SET <prefix+key> <owner> PX <ttl> NX      atomic set-if-absent; Redis drops expired keys
//   release        EVALSHA <release script>                  compare owner, then DEL — atomically
//   extend         EVALSHA <extend script>                   compare owner, then PEXPIRE — atomically
//   isLocked       EXISTS
//   remainingTime  PTTL                                      -2 (no key) / -1 (no expiry) / 0 → null
//
// Expiry is decided by Redis's clock alone; the caller's clock is never consulted.
//
// Scripts: their SHA-1 digests are constants in this file (a test recomputes them from the script
// text), so no SCRIPT LOAD round trip is ever needed. When Redis answers NOSCRIPT (its script cache
// is empty after a restart, a failover or SCRIPT FLUSH) the store sends the same call as EVAL with
// the full script text, which also puts the script back in the cache for the next EVALSHA.
//
// Caveat: a lock in a single Redis is as durable as that Redis. Asynchronous replication means a
// failover can lose a freshly acquired lock; where a second holder would do damage, also use a
// fencing token checked by the resource being protected.

import { argumentChecks } from "./args.js";

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

/** SHA-1 of RELEASE_SCRIPT, the name Redis caches it under (checked by the tests). */
export const RELEASE_SHA = "2eba89dfc16f347ef9ce2d9f0e625614dc8fe64c";
/** SHA-1 of EXTEND_SCRIPT, the name Redis caches it under (checked by the tests). */
export const EXTEND_SHA = "564bbbf4ede2e356999019b3c2ee0c69b5802941";

const CLIENT_TYPES = ["ioredis", "node-redis", "upstash"];


function fn(client, name) {
  return typeof client[name] === "function";
}

/**
 * Works out which client API `client` speaks.
 * node-redis has camel-cased `evalSha`; @upstash/redis has `evalsha` taking arrays plus `scriptLoad`;
 * ioredis has `evalsha` taking a key count and no `scriptLoad`.
 */
export function detectRedisClient(client) {
  if (client === null || (typeof client !== "object" && typeof client !== "function")) return null;
  if (fn(client, "evalSha") && fn(client, "set")) return "node-redis";
  if (fn(client, "evalsha") && fn(client, "scriptLoad") && fn(client, "set")) return "upstash";
  if (fn(client, "evalsha") && fn(client, "set")) return "ioredis";
  return null;
}

// Each adapter exposes the same five primitives; every one is a single Redis command.
function adapter(client, type) {
  switch (type) {
    case "ioredis":
      return {
        setNx: (key, value, ttl) => client.set(key, value, "PX", ttl, "NX"),
        evalsha: (sha, key, args) => client.evalsha(sha, 1, key, ...args),
        eval: (script, key, args) => client.eval(script, 1, key, ...args),
        exists: (key) => client.exists(key),
        pttl: (key) => client.pttl(key),
      };
    case "node-redis":
      return {
        setNx: (key, value, ttl) => client.set(key, value, { PX: ttl, NX: true }),
        evalsha: (sha, key, args) => client.evalSha(sha, { keys: [key], arguments: args }),
        eval: (script, key, args) => client.eval(script, { keys: [key], arguments: args }),
        exists: (key) => client.exists(key),
        pttl: (key) => (fn(client, "pTTL") ? client.pTTL(key) : client.PTTL(key)),
      };
    case "upstash":
      return {
        setNx: (key, value, ttl) => client.set(key, value, { px: ttl, nx: true }),
        evalsha: (sha, key, args) => client.evalsha(sha, [key], args),
        eval: (script, key, args) => client.eval(script, [key], args),
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

const check = argumentChecks("redisLockStore");

/**
 * A keel-lock LockStore over Redis.
 *
 * @param {object} client a connected ioredis, node-redis (v4+) or @upstash/redis client
 * @param {{ prefix?: string, clientType?: "ioredis" | "node-redis" | "upstash" }} [options]
 *   `prefix` is prepended to every lock key (default: none);
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

  // EVALSHA first (one round trip); on NOSCRIPT, EVAL the text (one more, and it re-caches the script).
  async function runScript(sha, script, key, args) {
    try {
      return await redis.evalsha(sha, key, args);
    } catch (error) {
      if (!isNoScript(error)) throw error;
      return await redis.eval(script, key, args);
    }
  }

  return {
    prefix,
    clientType,

    async acquire(key, owner, ttlMs) {
      check.key(key);
      check.owner(owner);
      check.ttl(ttlMs);
      const reply = await redis.setNx(prefix + key, owner, ttlMs);
      return reply != null && String(reply) === "OK";
    },

    async release(key, owner) {
      check.key(key);
      check.owner(owner);
      const reply = await runScript(RELEASE_SHA, RELEASE_SCRIPT, prefix + key, [owner]);
      return Number(reply) === 1;
    },

    async extend(key, owner, ttlMs) {
      check.key(key);
      check.owner(owner);
      check.ttl(ttlMs);
      const reply = await runScript(EXTEND_SHA, EXTEND_SCRIPT, prefix + key, [owner, String(ttlMs)]);
      return Number(reply) === 1;
    },

    async isLocked(key) {
      check.key(key);
      return Number(await redis.exists(prefix + key)) > 0;
    },

    async remainingTime(key) {
      check.key(key);
      const ms = Number(await redis.pttl(prefix + key));
      return Number.isFinite(ms) && ms > 0 ? ms : null;
    },
  };
}

export default redisLockStore;
