// keel-lock/etcd — a LockStore on etcd (3.4 or later), reached through etcd's v3 JSON gateway with
// plain fetch, so the same store runs in Node, Deno, Bun and Workers. No runtime dependencies.
//
// Layout, for lock key K under prefix P (default "keel-lock/"), K written with `%` → `%25` and
// `/` → `%2F` (one-to-one, so the names below never meet another key's):
//   P + K          the owner token, attached to the hold's own lease
//   P + K + "/m"   the hold's metadata (only when it has some), attached to the same lease
// Every hold has a lease of its own, granted by etcd, so etcd's clock decides expiry: when the
// lease runs out etcd deletes both keys.
//
//   P + K + "/q/" + lease   a waiter's place in line (etcd-waiting.js), on the waiter's lease
//   P + K + "/s/" + owner   a shared hold (etcd-shared.js), on its own lease
//
//   acquire   lease grant (ceil(ttlMs / 1000) s) + one transaction:
//               If(create_revision(P+K) == 0 && create_revision(every P+K/q/*) == 0)
//               Then(put P+K owner, [put P+K/m metadata], with the lease)
//             (the second compare: nobody queues, so a newcomer never passes a waiter)
//             The fence is the revision of that put (= the key's create_revision): etcd's cluster-wide
//             revision, strictly increasing across every key, holder, restart and leader change.
//             Refused: the unused lease is revoked.
//   release   If(value(P+K) == owner) Then(delete P+K, delete P+K/m); then the lease is revoked
//             (not awaited: it only frees the lease before its TTL would).
//   extend    read the hold (one read-only transaction); when its lease was granted the TTL this
//             extend asks for, one keep-alive of that lease; else a new lease and
//             If(value == owner && lease == old lease) Then(put both keys again with the new lease),
//             then the old lease is revoked.
//   isLocked  range P+K (count only). remainingTime / inspect: the hold, then its lease's time-to-live.
//   forceRelease  read the hold and revoke its lease (which deletes its keys, whoever holds it).
//
// Outcome unknown (a write transaction whose reply was lost, see etcd-client.js) is never resent
// blindly: acquire reads the key back — held by this owner with this call's lease: granted;
// otherwise it revokes that lease (a put with a revoked lease cannot apply, and revoking deletes
// one that did) and tries once more with a new lease. release and extend read back and resend
// only while the key still shows the state their transaction compares (its compare guards it).
//
// The parts: etcd-client.js (the gateway, failover, auth, base64); etcd-waiting.js
// (acquireOrWait, acquireSharedOrWait and withdraw: the queue and its watches); etcd-shared.js
// (acquireShared, and the reads over both kinds of hold); etcd-many.js (acquireMany);
// etcd-watch.js (watch: holder changes pushed by an etcd watch).

import { argumentChecks, MAX_FENCE, MAX_TTL_MS } from "./args.js";
import { checkMetadata } from "./metadata.js";
import { b64, checkEndpoints, etcdClient, EtcdStoreError, int64, NOT_FOUND, rangeEndOf, unb64 } from "./etcd-client.js";
import { DEFAULT_WAIT_LOOK_MS, etcdWaiting } from "./etcd-waiting.js";
import { etcdShared } from "./etcd-shared.js";
import { etcdMany } from "./etcd-many.js";
import { etcdWatching } from "./etcd-watch.js";

export { EtcdStoreError };

const WHO = "etcdLockStore";
const check = argumentChecks(WHO);

/** Default prefix of every name the store writes. */
export const DEFAULT_PREFIX = "keel-lock/";
/** Default bound of one request to one endpoint, in ms (a call retries for at most three of them). */
export const DEFAULT_TIMEOUT_MS = 2_000;

/** The lease TTL, in whole seconds, asked for a hold of `ttlMs`: rounded up, at least 1. */
export function leaseSeconds(ttlMs) {
  return Math.max(1, Math.ceil(ttlMs / 1000));
}

/** The names the store uses for `key` under `prefix`: { lock, metadata, queue, shared }. */
export function etcdLockKeys(key, prefix = DEFAULT_PREFIX) {
  const lock = prefix + key.replace(/%/g, "%25").replace(/\//g, "%2F");
  return { lock, metadata: `${lock}/m`, queue: `${lock}/q/`, shared: `${lock}/s/` };
}

function checkOptions(options) {
  if (options === null || typeof options !== "object" || Array.isArray(options)) {
    throw new TypeError(`${WHO}: options must be an object ({ endpoints, auth?, prefix?, fetch?, timeoutMs?, safetyNetMs? })`);
  }
  const endpoints = checkEndpoints(WHO, options.endpoints);
  const prefix = options.prefix === undefined ? DEFAULT_PREFIX : options.prefix;
  if (typeof prefix !== "string") throw new TypeError(`${WHO}: prefix must be a string, got ${typeof prefix}`);
  let auth = null;
  if (options.auth !== undefined) {
    const a = options.auth;
    if (a === null || typeof a !== "object" || typeof a.username !== "string" || a.username.length === 0 || typeof a.password !== "string") {
      throw new TypeError(`${WHO}: auth must be { username: non-empty string, password: string }`);
    }
    auth = { username: a.username, password: a.password };
  }
  if (options.fetch !== undefined && typeof options.fetch !== "function") {
    throw new TypeError(`${WHO}: fetch must be a function (the fetch API), got ${typeof options.fetch}`);
  }
  const timeoutMs = options.timeoutMs === undefined ? DEFAULT_TIMEOUT_MS : options.timeoutMs;
  if (!Number.isInteger(timeoutMs) || timeoutMs < 1 || timeoutMs > MAX_TTL_MS) {
    throw new RangeError(`${WHO}: timeoutMs must be a whole number of ms in 1..${MAX_TTL_MS}, got ${timeoutMs}`);
  }
  const safetyNetMs = options.safetyNetMs === undefined ? DEFAULT_WAIT_LOOK_MS : options.safetyNetMs;
  if (!Number.isInteger(safetyNetMs) || safetyNetMs < 1 || safetyNetMs > MAX_TTL_MS) {
    throw new RangeError(`${WHO}: safetyNetMs must be a whole number of ms in 1..${MAX_TTL_MS}, got ${safetyNetMs}`);
  }
  return { endpoints, prefix, auth, fetch: options.fetch, timeoutMs, safetyNetMs };
}

/**
 * A keel-lock LockStore on etcd.
 *
 * @param {{ endpoints: string | string[], auth?: { username: string, password: string },
 *           prefix?: string, fetch?: typeof fetch, timeoutMs?: number }} options
 */
export function etcdLockStore(options) {
  const { endpoints, prefix, auth, fetch, timeoutMs, safetyNetMs } = checkOptions(options);
  const client = etcdClient({ who: WHO, endpoints, auth, fetch, timeoutMs });
  const call = (path, body, opts) => client.call(path, body, opts);
  const names = (key) => etcdLockKeys(key, prefix);

  // What etcd granted per lease this store asked for (a lease's TTL never changes), so an extend
  // need not ask; and the least TTL etcd has granted when asked for less (its minimum).
  const grantedTtl = new Map();
  let minimumTtl = 0;
  const remember = (lease, ttl) => {
    if (grantedTtl.size >= 10_000) grantedTtl.clear();
    grantedTtl.set(lease, ttl);
  };

  async function grant(seconds) {
    const reply = await call("/v3/lease/grant", { TTL: seconds });
    if (typeof reply.ID !== "string" || !/^\d+$/.test(reply.ID) || reply.ID === "0") {
      throw new EtcdStoreError(`etcd answered a lease grant without a lease ID (${JSON.stringify(reply.ID)})`);
    }
    const ttl = int64(reply.TTL, "a granted lease's TTL");
    if (ttl > seconds) minimumTtl = Math.max(minimumTtl, ttl);
    remember(reply.ID, ttl);
    return reply.ID;
  }

  // Revokes `lease`: true when etcd revoked it, false when it was gone already.
  async function revoke(lease) {
    grantedTtl.delete(lease);
    try {
      await call("/v3/lease/revoke", { ID: lease });
      return true;
    } catch (error) {
      if (error.etcdCode === NOT_FOUND) return false;
      throw error;
    }
  }

  // A revoke nobody waits for: it only frees a lease before its TTL would.
  const revokeLater = (lease) => {
    revoke(lease).catch(() => {});
  };

  // Shared holds, and the one read of a key's whole state (etcd-shared.js).
  const shared = etcdShared({ who: WHO, call, names, check, checkMetadata, leaseSeconds, grant, revoke, revokeLater, toFence });

  // The live hold of `key` (the lock key's) in one read: { owner, lease, fence, metadata } or null.
  async function readHold(key) {
    const { lock, metadata } = names(key);
    const reply = await call("/v3/kv/txn", { success: [{ request_range: { key: b64(lock) } }, { request_range: { key: b64(metadata) } }] });
    const [held, meta] = txnRanges(reply, 2);
    return held ? holdOf(held, meta) : null;
  }

  function holdOf(held, meta) {
    return {
      owner: unb64(held.value ?? ""),
      lease: held.lease ?? "0",
      fence: toFence(held.create_revision, "the lock key's create_revision"),
      metadata: meta ? unb64(meta.value ?? "") : null,
    };
  }

  // The seconds left of `lease` (whole, rounded down by etcd), or null when it is gone.
  async function timeToLive(lease) {
    const reply = await call("/v3/lease/timetolive", { ID: lease });
    const ttl = int64(reply.TTL, "a lease's time to live", { signed: true });
    if (ttl < 0) return null;
    if (reply.grantedTTL !== undefined) remember(lease, int64(reply.grantedTTL, "a lease's granted TTL"));
    return ttl;
  }

  function holdPuts(key, owner, metadata, lease) {
    const { lock, metadata: metaName } = names(key);
    const puts = [{ request_put: { key: b64(lock), value: b64(owner), lease } }];
    if (metadata !== null) puts.push({ request_put: { key: b64(metaName), value: b64(metadata), lease } });
    return puts;
  }

  async function acquire(key, owner, ttlMs, metadata) {
    check.key(key);
    check.owner(owner);
    check.ttl(ttlMs);
    const meta = checkMetadata(WHO, metadata);
    const { lock, queue } = names(key);
    for (let attempt = 0; ; attempt++) {
      const lease = await grant(leaseSeconds(ttlMs));
      let reply;
      try {
        reply = await call(
          "/v3/kv/txn",
          {
            compare: [
              { key: b64(lock), target: "CREATE", result: "EQUAL", create_revision: "0" },
              // Nobody queues: a newcomer never overtakes a waiter. No shared hold is live.
              { key: b64(queue), range_end: b64(rangeEndOf(queue)), target: "CREATE", result: "EQUAL", create_revision: "0" },
              { ...shared.sharedRange(key), target: "CREATE", result: "EQUAL", create_revision: "0" },
            ],
            success: holdPuts(key, owner, meta, lease),
          },
          { write: true },
        );
      } catch (error) {
        if (!error.outcomeUnknown) {
          revokeLater(lease);
          throw error;
        }
        // It may have applied: look. Ours (this owner, this call's lease): granted.
        const hold = await readHold(key);
        if (hold && hold.owner === owner && hold.lease === lease) return { fence: hold.fence };
        // Not (yet) ours: revoking the lease makes sure it never will be, then try once more.
        await revoke(lease);
        if (attempt >= 1) throw error;
        continue;
      }
      if (reply.succeeded === true) return { fence: toFence(reply.header?.revision, "the acquiring transaction's revision") };
      revokeLater(lease);
      return false;
    }
  }

  async function release(key, owner) {
    check.key(key);
    check.owner(owner);
    const { lock, metadata } = names(key);
    const body = {
      compare: [{ key: b64(lock), target: "VALUE", result: "EQUAL", value: b64(owner) }],
      success: [{ request_delete_range: { key: b64(lock), prev_kv: true } }, { request_delete_range: { key: b64(metadata) } }],
      // Not the lock's holder: this owner's shared hold, if it has one.
      failure: [{ request_delete_range: { key: b64(shared.sharedName(key, owner)), prev_kv: true } }],
    };
    for (let attempt = 0; ; attempt++) {
      let reply;
      try {
        reply = await call("/v3/kv/txn", body, { write: true });
      } catch (error) {
        if (!error.outcomeUnknown || attempt >= 1) throw error;
        // Still this owner's: send it again (the owner compare guards it). Gone: we cannot tell
        // our delete from its expiry, and answer false (the hold was not shown to be live).
        if (await ownHold(key, owner)) continue;
        return false;
      }
      const prev = reply.responses?.[0]?.response_delete_range?.prev_kvs?.[0];
      if (prev === undefined) return false;
      if (prev?.lease && prev.lease !== "0") revokeLater(prev.lease);
      return true;
    }
  }

  async function extend(key, owner, ttlMs) {
    check.key(key);
    check.owner(owner);
    check.ttl(ttlMs);
    const hold = await ownHold(key, owner);
    if (hold === null) return false;
    const seconds = leaseSeconds(ttlMs);
    let granted = grantedTtl.get(hold.lease);
    if (granted === undefined) {
      // Asked once per lease this store did not grant itself.
      const left = await timeToLive(hold.lease);
      if (left === null) return false;
      granted = grantedTtl.get(hold.lease);
    }
    if (granted === Math.max(seconds, minimumTtl)) {
      // The lease already has this TTL: one keep-alive. The lease is this hold's alone, so while
      // it lives the hold does (every way a hold ends deletes its key and revokes its lease).
      const reply = await call("/v3/lease/keepalive", { ID: hold.lease });
      return int64((reply.result ?? reply).TTL, "a kept-alive lease's TTL") > 0;
    }
    // Another TTL: a new lease, and the hold moved onto it if it is still this owner's on the old one.
    const lease = await grant(seconds);
    const { lock } = names(key);
    const mine = b64(shared.sharedName(key, owner));
    const body = hold.value === undefined
      ? {
          compare: [
            { key: b64(lock), target: "VALUE", result: "EQUAL", value: b64(owner) },
            { key: b64(lock), target: "LEASE", result: "EQUAL", lease: hold.lease },
          ],
          success: holdPuts(key, owner, hold.metadata, lease),
        }
      : {
          compare: [
            { key: mine, target: "CREATE", result: "EQUAL", create_revision: String(hold.fence) },
            { key: mine, target: "LEASE", result: "EQUAL", lease: hold.lease },
          ],
          success: [{ request_put: { key: mine, value: hold.value, lease } }],
        };
    for (let attempt = 0; ; attempt++) {
      let reply;
      try {
        reply = await call("/v3/kv/txn", body, { write: true });
      } catch (error) {
        if (!error.outcomeUnknown) {
          revokeLater(lease);
          throw error;
        }
        const now = await ownHold(key, owner);
        if (now?.lease === lease) break;
        if (now?.lease === hold.lease && attempt < 1) continue;
        await revoke(lease);
        if (now?.lease === hold.lease) throw error;
        return false;
      }
      if (reply.succeeded !== true) {
        revokeLater(lease);
        return false;
      }
      break;
    }
    revokeLater(hold.lease);
    return true;
  }

  // Reads over both kinds of hold (etcd-shared.js).
  const { ownHold, isLocked, remainingTime, inspect, forceRelease } = shared.reads({ timeToLive });

  const { acquireMany } = etcdMany({ who: WHO, call, names, shared, leaseSeconds, grant, revoke, revokeLater, holdPuts, readHold, toFence });

  const { watch } = etcdWatching({ client, names, check, toFence });

  const waitingFor = etcdWaiting({
    shared,
    who: WHO,
    client,
    names,
    check,
    checkMetadata,
    leaseSeconds,
    grant,
    revoke,
    holdPuts,
    grantedTtl,
    acquire,
    release,
    toFence,
    safetyNetMs,
  });

  return {
    acquire,
    acquireOrWait: waitingFor.acquireOrWait,
    acquireShared: shared.acquireShared,
    acquireMany,
    watch,
    acquireSharedOrWait: waitingFor.acquireSharedOrWait,
    withdraw: waitingFor.withdraw,
    release,
    extend,
    isLocked,
    remainingTime,
    inspect,
    forceRelease,
    /** The names used for `key`: { lock, metadata, queue }. */
    keys: names,
    prefix,
    endpoints: client.endpoints,
  };
}

function toFence(value, what) {
  const fence = int64(value, what);
  if (fence < 1 || fence > MAX_FENCE) {
    throw new EtcdStoreError(`etcd answered ${what} ${value}: outside 1..${MAX_FENCE}, so it cannot be a fence`);
  }
  return fence;
}

// The key-values of the first `count` range responses of a read-only transaction, one per range
// (null for an absent key).
function txnRanges(reply, count) {
  const responses = reply.responses;
  if (reply.succeeded !== true || !Array.isArray(responses) || responses.length !== count) {
    throw new EtcdStoreError(`etcd answered a read-only transaction of ${count} ranges with ${JSON.stringify(reply).slice(0, 200)}`);
  }
  return responses.map((r) => {
    const kvs = r?.response_range?.kvs;
    return Array.isArray(kvs) && kvs.length > 0 ? kvs[0] : null;
  });
}
