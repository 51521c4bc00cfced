// keel-lock/redis — a LockStore backed by Redis, handing out fencing tokens.
//
// No runtime dependencies: you hand it a connected client of your choice (ioredis, ioredis
// Cluster, node-redis v4+ and its cluster client, @upstash/redis, Valkey GLIDE) and it adapts to that client's
// API (redis-clients.js). Every operation is one Lua script (redis-scripts.js), one round trip
// on the happy path; callers that must wait queue in Redis and are woken by pub/sub
// (redis-waiting.js). Expiry is decided by Redis's clock alone. Key layout, scripts, waiting,
// and what a failover can lose: stores/README.md, "keel-lock/redis".
//
// Key names. For lock key K under prefix P every name carries the hash tag {K}, so a lock's
// names share one Redis Cluster slot: P{K} (the owner token, PX ttl), P{K}:fence (the fence
// counter, never expires), and, for waiting and shared holds, P{K}:queue, P{K}:waiters,
// P{K}:grant (while the key is held shared, P{K} is a sorted set of holders and P{K}:grant the
// limit, the weight held and the holders' records), and while a store watches the key, P{K}:watch
// (the watching stores; P{K}:waiters then says so to the other scripts, and its holder changes
// are published on the channel of that name). A hold's metadata is kept beside its owner,
// by the script that grants it: after the owner in P{K} (exclusive), in P{K}:grant (shared), in
// P{K}:waiters while it waits; inspect(key) reads them all in one script. In the braces and in
// P, "%", "{" and "}" are written "%25", "%7B", "%7D": one-to-one, and the tag is never empty.
// With the option hashTags, a key with a hash tag of its own (Redis's rule: the text between its
// first "{" and the first "}" after that, not empty) is named P{tag}{K} instead: the tag decides
// the slot, so keys sharing one can be taken in one script on a cluster (acquireMany); the {K}
// after it keeps the names one-to-one.

import { argumentChecks, checkKeySet, kindOption, LockStoreClosedError, safetyNetOption } from "./args.js";
import { checkMetadata, checkMetadataList } from "./metadata.js";
import { adapter, CLIENT_TYPES, detectRedisClient, isNoScript, keySlot } from "./redis-clients.js";
import {
  ACQUIRE_MANY_SCRIPT,
  ACQUIRE_MANY_SHA,
  ACQUIRE_SCRIPT,
  ACQUIRE_SHA,
  ACQUIRE_SHARED_SCRIPT,
  ACQUIRE_SHARED_SHA,
  CHANNEL,
  CHECK_SCRIPT,
  CHECK_SHA,
  EXTEND_SCRIPT,
  EXTEND_SHA,
  fenceFrom,
  FORCE_RELEASE_SCRIPT,
  FORCE_RELEASE_SHA,
  INSPECT_SCRIPT,
  INSPECT_SHA,
  inspectAnswer,
  isOne,
  manyAnswer,
  RELEASE_SCRIPT,
  RELEASE_SHA,
  RELEASE_SHARED_SCRIPT,
  RELEASE_SHARED_SHA,
  sharedAnswer,
  WATCH_SUFFIX,
} from "./redis-scripts.js";
import { LockNotReplicatedError, replicasOption, replicaWaiter } from "./redis-replicas.js";
import { redisWaiting } from "./redis-waiting.js";

export * from "./redis-scripts.generated.js"; // each script and its SHA-1, which redis.d.ts declares
export { detectRedisClient, LockNotReplicatedError, LockStoreClosedError };

// "%" first, so the escapes it introduces are not escaped again.
const escapeName = (text) => text.replace(/%/g, "%25").replace(/\{/g, "%7B").replace(/\}/g, "%7D");
const NEEDS_ESCAPE = /[%{}]/;
// How many keys' names a store keeps built (see lockKeys).
const NAMES_CACHED = 256;
// How many owners of shared holds a store remembers (see sharedOwners).
const SHARED_OWNERS_KEPT = 4096;

const check = argumentChecks("redisLockStore");

// The hash tag Redis finds in `key` (the text between its first "{" and the first "}" after
// that, if not empty), or null.
function ownHashTag(key) {
  const open = key.indexOf("{");
  if (open === -1) return null;
  const close = key.indexOf("}", open + 1);
  return close > open + 1 ? key.slice(open + 1, close) : null;
}

// The lock name of `key` under the escaped prefix: `P{K}`, or with hashTags and a tag in the key,
// `P{tag}{K}` (K escaped; the tag as it is, so it hashes as the key's own tag does: it holds no
// "}", and the first "}" of the name ends it).
function lockName(escapedPrefix, key, hashTags) {
  const escaped = NEEDS_ESCAPE.test(key) ? escapeName(key) : key;
  if (hashTags) {
    const tag = ownHashTag(key);
    if (tag !== null) return `${escapedPrefix}{${tag}}{${escaped}}`;
  }
  return `${escapedPrefix}{${escaped}}`;
}

function hashTagsOption(options) {
  const hashTags = options?.hashTags ?? false;
  if (typeof hashTags !== "boolean") throw new TypeError("redisLockStore: hashTags must be a boolean");
  return hashTags;
}

/**
 * The Redis key names the store uses for lock key `key` under `prefix`: `lock` holds the owner
 * token (and, after a NUL, the hold's metadata; with the lock's TTL), `fence` the fence counter
 * (no TTL). Both carry the hash tag `{key}` (with `%`, `{`, `}` escaped as `%25`, `%7B`, `%7D`),
 * so they share one cluster slot; with `options.hashTags`, a key with a hash tag of its own
 * carries that tag instead.
 */
export function redisLockKeys(key, prefix = "", options = undefined) {
  check.key(key);
  if (typeof prefix !== "string") throw new TypeError("redisLockStore: prefix must be a string");
  const lock = lockName(escapeName(prefix), key, hashTagsOption(options));
  return { lock, fence: `${lock}:fence` };
}

// acquireMany's arguments (args.js, metadata.js), and owners without NUL, as every owner here.
function checkSet(keys, owners, ttlMs, metadata) {
  checkKeySet("redisLockStore.acquireMany", keys, owners, ttlMs);
  if (owners.some((owner) => owner.includes("\0"))) {
    throw new TypeError("redisLockStore.acquireMany: owner must not contain NUL");
  }
  checkMetadataList("redisLockStore.acquireMany", metadata, keys.length);
}

// An exclusive hold's value in Redis: its owner, and after a NUL its metadata if it has some
// (owners hold no NUL, so the first one after the owner ends it).
const heldValue = (owner, metadata) => (metadata === undefined ? owner : `${owner}\0${metadata}`);

/**
 * A keel-lock LockStore over Redis.
 *
 * @param {object} client a connected ioredis (or ioredis Cluster), node-redis v4+ (createClient
 *   or createCluster), @upstash/redis or Valkey GLIDE (GlideClient, GlideClusterClient) client
 * @param {{ prefix?: string, clientType?: "ioredis" | "ioredis-cluster" | "node-redis" | "node-redis-cluster" | "upstash" | "glide" | "glide-cluster", safetyNetMs?: number, hashTags?: boolean, waitForReplicas?: { replicas: number, timeoutMs: number } }} [options]
 *   `prefix` is put in front of every key name (default: none);
 *   `hashTags`: a key's own `{tag}` decides its cluster slot (default: each key its own slot);
 *   `clientType` skips detection when a wrapped client confuses it;
 *   `safetyNetMs`: a queued wait is looked at no more often than this (nor than the caller's
 *   pollMs), in case its hand-over message was lost (default 1000);
 *   `waitForReplicas`: after every grant and extend, WAIT until `replicas` replicas acknowledged
 *   it (at most `timeoutMs`); a grant they did not acknowledge is released and the call rejects
 *   with LockNotReplicatedError (default: off).
 */
export function redisLockStore(client, options = {}) {
  if (options === null || typeof options !== "object") {
    throw new TypeError("redisLockStore: options must be an object");
  }
  const prefix = options.prefix ?? "";
  if (typeof prefix !== "string") throw new TypeError("redisLockStore: prefix must be a string");
  const safetyNetMs = safetyNetOption("redisLockStore", options.safetyNetMs);
  const hashTags = hashTagsOption(options);
  const waitForReplicas = replicasOption(options.waitForReplicas);
  const clientType = kindOption("redisLockStore", "clientType", options.clientType, CLIENT_TYPES, () => detectRedisClient(client),
    "client — expected an ioredis, node-redis (v4+), @upstash/redis or Valkey GLIDE client");
  const redis = adapter(client, clientType);
  const escapedPrefix = escapeName(prefix);
  const lockKey = (key) => lockName(escapedPrefix, key, hashTags);
  // A script may only touch names of one hash slot on a cluster.
  const cluster = clientType === "ioredis-cluster" || clientType === "node-redis-cluster" || clientType === "glide-cluster";
  // Every name one lock uses, in the order the scripts take them as KEYS (a frozen array; its
  // `take` is the first four, what the acquire script takes, `extend` the lock and grants names,
  // what the extend script takes, and `watch` the lock, waiters and watch set names, what the
  // watch script takes — the watch set's name is also the channel a watched key's holder
  // changes are published on; on a cluster, `slot` is their hash slot). The names of
  // recently used keys are kept, so a release finds those its acquire built; the cache is emptied
  // when it reaches NAMES_CACHED keys.
  const names = new Map();
  const lockKeys = (key) => {
    let all = names.get(key);
    if (all === undefined) {
      const lock = lockKey(key);
      all = [lock, `${lock}:fence`, `${lock}:queue`, `${lock}:waiters`, `${lock}:grant`];
      all.take = Object.freeze(all.slice(0, 4));
      all.extend = Object.freeze([all[0], all[4]]);
      all.watch = Object.freeze([all[0], all[3], `${lock}${WATCH_SUFFIX}`]);
      if (cluster) all.slot = keySlot(lock);
      Object.freeze(all);
      if (names.size >= NAMES_CACHED) names.clear();
      names.set(key, all);
    }
    return all;
  };
  // One channel per prefix: every hand-over under it is published there, key and owner inside.
  const channel = `${escapedPrefix}${CHANNEL}`;

  // EVALSHA first (one round trip); on NOSCRIPT, EVAL the text (one more, and it re-caches the
  // script). `answer`, if given, maps the reply. A plain promise chain rather than an async
  // function: on the happy path it adds one promise to the client's (Promise.resolve hands a
  // native promise back as it is).
  function runScript(sha, script, keys, args, answer) {
    let sent;
    try {
      sent = redis.evalsha(sha, keys, args);
    } catch (error) {
      return Promise.reject(error);
    }
    return Promise.resolve(sent).then(answer, (error) => {
      if (!isNoScript(error)) throw error;
      return Promise.resolve(redis.eval(script, keys, args)).then(answer);
    });
  }

  // Owners this store saw take a shared hold: their release asks the sorted set first
  // (RELEASE_SHARED_SCRIPT), saving the failed GET that tells a shared holder from an exclusive
  // one. Only a hint: both scripts release either kind, so an owner forgotten (the set is
  // emptied when it reaches SHARED_OWNERS_KEPT) or remembered after its hold was lost still
  // releases correctly.
  const sharedOwners = new Set();
  const noteShared = (owner, got) => {
    if (got && "fence" in got) {
      if (sharedOwners.size >= SHARED_OWNERS_KEPT) sharedOwners.clear();
      sharedOwners.add(owner);
    }
    return got;
  };

  // With waitForReplicas: every grant waits for the replicas before it is answered (null: off).
  const replication = replicaWaiter({ client, clientType, option: waitForReplicas, runScript });
  const releaseExclusive = (names, owner) => () => runScript(RELEASE_SHA, RELEASE_SCRIPT, names, [owner]);
  const releaseShared = (names, owner) => () => runScript(RELEASE_SHARED_SHA, RELEASE_SHARED_SCRIPT, names, [owner]);

  const checkOwner = (owner) => {
    check.owner(owner);
    // The store marks a held key's value with a leading NUL while callers queue behind it.
    if (owner.includes("\0")) throw new TypeError("redisLockStore: owner must not contain NUL");
  };

  const store = {
    // The name lock events and keel-lock/otel give this store.
    [Symbol.toStringTag]: "RedisLockStore",
    prefix,
    clientType,

    /** The Redis key names used for `key`: `{ lock, fence }`. */
    keys(key) {
      return redisLockKeys(key, prefix, { hashTags });
    },

    acquire(key, owner, ttlMs, metadata) {
      try {
        check.key(key);
        checkOwner(owner);
        check.ttl(ttlMs);
        checkMetadata("redisLockStore.acquire", metadata);
      } catch (error) {
        return Promise.reject(error);
      }
      const all = lockKeys(key);
      const args = [heldValue(owner, metadata), String(ttlMs)];
      const at = replication?.route(all);
      // -1: the lock is free with callers queued (its holders expired). The check script hands it
      // to the oldest live waiters that fit, dropping those whose deadline passed; a second try
      // then finds it held (false), or free with nobody left queued (taken). Still free with
      // callers queued after the look — the fence counter is at its limit — answers false.
      const got = runScript(ACQUIRE_SHA, ACQUIRE_SCRIPT, all.take, args, (reply) =>
        Number(reply) !== -1
          ? fenceFrom(reply)
          : runScript(CHECK_SHA, CHECK_SCRIPT, all, [channel, "0"]).then(() =>
              runScript(ACQUIRE_SHA, ACQUIRE_SCRIPT, all.take, args, (again) => fenceFrom(Number(again) === -1 ? 0 : again)),
            ),
      );
      if (replication === null) return got;
      return got.then((grant) => grant && replication.granted("acquire", key, all, at, grant, releaseExclusive(all, owner)));
    },

    /**
     * Every key to its owner (keys[i] to owners[i]) in one script when acquire would grant each of
     * them now: one `{ fence }` per key, in order; otherwise nothing changes and the answer is
     * `false`. `null`, with no request sent, on a cluster when the keys' names are in different
     * hash slots (one script cannot touch them). `metadata`, if given, holds one string (or
     * undefined) per key: each hold's metadata.
     */
    acquireMany(keys, owners, ttlMs, metadata) {
      try {
        checkSet(keys, owners, ttlMs, metadata);
      } catch (error) {
        return Promise.reject(error);
      }
      // Each key's lock, counter, queue and waiters names; the TTL, then each key's value.
      const scriptKeys = [];
      const args = [String(ttlMs)];
      let slot;
      for (let i = 0; i < keys.length; i++) {
        const all = lockKeys(keys[i]);
        if (cluster && (slot ??= all.slot) !== all.slot) return Promise.resolve(null);
        scriptKeys.push(all[0], all[1], all[2], all[3]);
        args.push(heldValue(owners[i], metadata?.[i]));
      }
      const got = runScript(ACQUIRE_MANY_SHA, ACQUIRE_MANY_SCRIPT, scriptKeys, args, (reply) => manyAnswer(reply, keys.length));
      if (replication === null) return got;
      // One WAIT covers every key: one script wrote them all, on one connection.
      const first = lockKeys(keys[0]);
      const at = replication.route(first);
      const releaseAll = () => Promise.all(keys.map((key, i) => releaseExclusive(lockKeys(key), owners[i])()));
      return got.then((grants) => grants && replication.granted("acquireMany", keys[0], first, at, grants, releaseAll));
    },

    release(key, owner) {
      try {
        check.key(key);
        checkOwner(owner);
      } catch (error) {
        return Promise.reject(error);
      }
      if (sharedOwners.delete(owner)) return runScript(RELEASE_SHARED_SHA, RELEASE_SHARED_SCRIPT, lockKeys(key), [owner], isOne);
      return runScript(RELEASE_SHA, RELEASE_SCRIPT, lockKeys(key), [owner], isOne);
    },

    async extend(key, owner, ttlMs) {
      check.key(key);
      checkOwner(owner);
      check.ttl(ttlMs);
      const all = lockKeys(key);
      const at = replication?.route(all);
      const reply = await runScript(EXTEND_SHA, EXTEND_SCRIPT, all.extend, [owner, String(ttlMs)]);
      if (Number(reply) !== 1) return false;
      // An extend that is not confirmed leaves the hold as it was before it (nothing to undo).
      if (replication !== null) await replication.granted("extend", key, all, at, true, null);
      return true;
    },

    /**
     * A shared hold of `weight` under `limit` (a semaphore's permits, a read lock): `{ fence }`,
     * `false` (no room, or callers queued), or `{ heldLimit }` (held under another limit). The
     * script checks weight and limit (whole numbers, 1 <= weight <= limit <= 2^32 - 1).
     */
    acquireShared(key, owner, ttlMs, weight, limit, metadata) {
      try {
        check.key(key);
        checkOwner(owner);
        check.ttl(ttlMs);
        checkMetadata("redisLockStore.acquireShared", metadata);
      } catch (error) {
        return Promise.reject(error);
      }
      const args = [owner, String(ttlMs), String(weight), String(limit), "0", channel];
      if (metadata !== undefined) args.push(metadata);
      const all = lockKeys(key);
      const at = replication?.route(all);
      const got = runScript(ACQUIRE_SHARED_SHA, ACQUIRE_SHARED_SCRIPT, all, args, (reply) => noteShared(owner, sharedAnswer(reply)));
      if (replication === null) return got;
      return got.then((grant) =>
        grant && "fence" in grant ? replication.granted("acquireShared", key, all, at, grant, releaseShared(all, owner)) : grant,
      );
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

    /**
     * Who holds `key`, in one script (an atomic read): `{ holders: [{ metadata, fence,
     * remainingMs }], waiting }` — the live holds in fence order (at most one held exclusively;
     * each shared hold its own), `metadata` null for a hold without, `remainingMs` by Redis's
     * clock, `waiting` the live waiters queued for the key. Never an owner token.
     */
    inspect(key) {
      try {
        check.key(key);
      } catch (error) {
        return Promise.reject(error);
      }
      return runScript(INSPECT_SHA, INSPECT_SCRIPT, lockKeys(key), [], inspectAnswer);
    },

    /** Frees every hold of `key` (queued waiters are handed it); true if someone held it. */
    async forceRelease(key) {
      check.key(key);
      return Number(await runScript(FORCE_RELEASE_SHA, FORCE_RELEASE_SCRIPT, lockKeys(key), [channel])) === 1;
    },
  };
  // Upstash's REST API has no pub/sub: its callers keep polling acquire.
  if (clientType !== "upstash") {
    const waiting = redisWaiting({ client, clientType, channel, lockKeys, runScript, check, checkOwner, store, safetyNetMs, noteShared, replication, releaseExclusive, releaseShared });
    Object.defineProperties(store, Object.getOwnPropertyDescriptors(waiting));
  }
  return store;
}

export default redisLockStore;
