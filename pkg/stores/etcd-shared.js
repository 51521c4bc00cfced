// keel-lock/etcd: shared holds (semaphore permits, read locks) — acquireShared, and the one read
// of a key's whole state that release, extend, isLocked, remainingTime, inspect and forceRelease
// build on. How it works: stores/README.md, "Shared holds (etcd)".
//
// A shared hold of `owner` is the key P+K+"/s/"+owner (owner written with `%` → `%25` and `/` →
// `%2F`), whose value is {"w": weight, "l": limit, "m": metadata or null}, on a lease of its own;
// its fence is that key's create_revision. A transaction cannot add up weights, so a shared
// acquire reads the key's state (the lock key, every shared hold, the queue's size) at revision
// R, decides, and writes only if nothing it read has changed:
//   If(create_revision(P+K) == 0 && mod_revision(every P+K/s/*) < R + 1 && create_revision(ours)
//      == 0 && create_revision(every P+K/q/*) == 0) Then(put ours with the lease)
// A hold added meanwhile has a newer mod_revision and fails the compare (one that ended can only
// have made room), and the store reads again.

import { b64, EtcdStoreError, int64, rangeEndOf, unb64 } from "./etcd-client.js";

const MAX_LIMIT = 4_294_967_295;
const encode = (text) => text.replace(/%/g, "%25").replace(/\//g, "%2F");
const decode = (text) => text.replace(/%2F/g, "/").replace(/%25/g, "%");

/** The compare that never holds (a key's version is never below 0): "go to Else". */
export const NEVER = (key) => ({ key, target: "VERSION", result: "LESS", version: "0" });

export function etcdShared({ who, call, names, check, checkMetadata, leaseSeconds, grant, revoke, revokeLater, toFence }) {
  const sharedRange = (key) => {
    const { shared } = names(key);
    return { key: b64(shared), range_end: b64(rangeEndOf(shared)) };
  };
  const sharedName = (key, owner) => names(key).shared + encode(owner);

  function checkShare(weight, limit) {
    if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LIMIT) {
      throw new RangeError(`${who}: limit must be a whole number in 1..${MAX_LIMIT}, got ${limit}`);
    }
    if (!Number.isInteger(weight) || weight < 1 || weight > limit) {
      throw new RangeError(`${who}: weight must be a whole number in 1..limit (${limit}), got ${weight}`);
    }
  }

  // The key's whole state in one read: { revision, hold (the exclusive one) | null, shared:
  // [{ owner, weight, limit, metadata, fence, lease }] in fence order, waiting }. `extra`: more
  // ranges, answered as `extra` (their range responses).
  async function readState(key, extra = []) {
    const { lock, metadata, queue } = names(key);
    const success = [
      { request_range: { key: b64(lock) } },
      { request_range: { key: b64(metadata) } },
      { request_range: { ...sharedRange(key), sort_target: "CREATE", sort_order: "ASCEND" } },
      { request_range: { key: b64(queue), range_end: b64(rangeEndOf(queue)), count_only: true } },
      ...extra.map((range) => ({ request_range: range })),
    ];
    const reply = await call("/v3/kv/txn", { success });
    const responses = reply.responses;
    if (reply.succeeded !== true || !Array.isArray(responses) || responses.length !== success.length) {
      throw new EtcdStoreError(`etcd answered a read of ${success.length} ranges with ${JSON.stringify(reply).slice(0, 200)}`);
    }
    const kvs = (i) => responses[i]?.response_range?.kvs ?? [];
    const [held] = kvs(0);
    const [meta] = kvs(1);
    const prefix = names(key).shared;
    return {
      revision: toFence(reply.header?.revision, "a read's revision"),
      hold: held
        ? {
            owner: unb64(held.value ?? ""),
            lease: held.lease ?? "0",
            fence: toFence(held.create_revision, "the lock key's create_revision"),
            metadata: meta ? unb64(meta.value ?? "") : null,
          }
        : null,
      shared: kvs(2).map((kv) => {
        let value;
        try {
          value = JSON.parse(unb64(kv.value ?? ""));
        } catch {
          value = null;
        }
        if (!value || !Number.isInteger(value.w) || !Number.isInteger(value.l)) {
          throw new EtcdStoreError(`the shared hold ${JSON.stringify(unb64(kv.key))} holds no weight and limit`);
        }
        return {
          owner: decode(unb64(kv.key).slice(prefix.length)),
          weight: value.w,
          limit: value.l,
          metadata: typeof value.m === "string" ? value.m : null,
          fence: toFence(kv.create_revision, "a shared hold's create_revision"),
          lease: kv.lease ?? "0",
          value: kv.value,
        };
      }),
      waiting: int64(responses[3]?.response_range?.count, "a range's count"),
      extra: extra.map((_, i) => responses[4 + i]?.response_range ?? {}),
    };
  }

  // Would `owner`'s share fit now? "fits" | "busy" | { heldLimit }.
  function judge(state, owner, weight, limit) {
    if (state.hold) return "busy";
    const other = state.shared.find((s) => s.limit !== limit);
    if (other) return { heldLimit: other.limit };
    if (state.shared.some((s) => s.owner === owner)) return "busy";
    const used = state.shared.reduce((n, s) => n + s.weight, 0);
    return used + weight <= limit ? "fits" : "busy";
  }

  // The compares under which a share judged at `state` still fits, and the put that takes it.
  function sharedTxn(key, owner, state, weight, limit, meta, lease) {
    const { lock } = names(key);
    const mine = b64(sharedName(key, owner));
    return {
      compare: [
        { key: b64(lock), target: "CREATE", result: "EQUAL", create_revision: "0" },
        { ...sharedRange(key), target: "MOD", result: "LESS", mod_revision: String(state.revision + 1) },
        { key: mine, target: "CREATE", result: "EQUAL", create_revision: "0" },
      ],
      put: { request_put: { key: mine, value: b64(JSON.stringify({ w: weight, l: limit, m: meta })), lease } },
    };
  }

  async function acquireShared(key, owner, ttlMs, weight, limit, metadata) {
    check.key(key);
    check.owner(owner);
    check.ttl(ttlMs);
    checkShare(weight, limit);
    const meta = checkMetadata(who, metadata);
    const { queue } = names(key);
    for (let attempt = 0; attempt < 10; attempt++) {
      const state = await readState(key);
      const verdict = judge(state, owner, weight, limit);
      if (verdict !== "fits") return verdict === "busy" ? false : verdict;
      if (state.waiting > 0) return false;
      const lease = await grant(leaseSeconds(ttlMs));
      const { compare, put } = sharedTxn(key, owner, state, weight, limit, meta, lease);
      compare.push({ key: b64(queue), range_end: b64(rangeEndOf(queue)), target: "CREATE", result: "EQUAL", create_revision: "0" });
      let reply;
      try {
        reply = await call("/v3/kv/txn", { compare, success: [put] }, { write: true });
      } catch (error) {
        if (!error.outcomeUnknown) {
          revokeLater(lease);
          throw error;
        }
        const now = await readState(key);
        const ours = now.shared.find((s) => s.owner === owner);
        if (ours && ours.lease === lease) return { fence: ours.fence };
        await revoke(lease);
        continue;
      }
      if (reply.succeeded === true) return { fence: toFence(reply.header?.revision, "the acquiring transaction's revision") };
      revokeLater(lease); // the state changed since the read: read again
    }
    return false;
  }

  // The calls that read both kinds of hold; `timeToLive(lease)`: its whole seconds left, or null.
  function reads({ timeToLive }) {
    // `owner`'s hold of `key`, either kind: { lease, fence, metadata, value? } (value: a shared
    // hold's, as etcd keeps it), or null.
    async function ownHold(key, owner) {
      const { lock, metadata } = names(key);
      const reply = await call("/v3/kv/txn", {
        success: [
          { request_range: { key: b64(lock) } },
          { request_range: { key: b64(metadata) } },
          { request_range: { key: b64(sharedName(key, owner)) } },
        ],
      });
      const [held, meta, mine] = [0, 1, 2].map((i) => reply.responses?.[i]?.response_range?.kvs?.[0] ?? null);
      if (held && unb64(held.value ?? "") === owner) {
        const fence = toFence(held.create_revision, "the lock key's create_revision");
        return { owner, lease: held.lease ?? "0", fence, metadata: meta ? unb64(meta.value ?? "") : null };
      }
      if (!mine) return null;
      return { owner, lease: mine.lease ?? "0", fence: toFence(mine.create_revision, "a shared hold's create_revision"), value: mine.value };
    }

    // Every live hold of `key` (the lock's, or the shared ones) in fence order, with ms left.
    async function liveHolds(state) {
      const holds = state.hold ? [state.hold] : state.shared;
      const left = await Promise.all(holds.map((h) => timeToLive(h.lease)));
      return holds.flatMap((h, i) => (left[i] === null ? [] : [{ metadata: h.metadata, fence: h.fence, remainingMs: left[i] * 1000 }]));
    }

    async function isLocked(key) {
      check.key(key);
      const { lock } = names(key);
      const reply = await call("/v3/kv/txn", {
        success: [{ request_range: { key: b64(lock), count_only: true } }, { request_range: { ...sharedRange(key), count_only: true } }],
      });
      return (reply.responses ?? []).some((r) => int64(r?.response_range?.count, "a range's count") > 0);
    }

    async function remainingTime(key) {
      check.key(key);
      const holds = await liveHolds(await readState(key));
      return holds.length === 0 ? null : Math.max(...holds.map((h) => h.remainingMs));
    }

    async function inspect(key) {
      check.key(key);
      const state = await readState(key);
      return { holders: await liveHolds(state), waiting: state.waiting };
    }

    async function forceRelease(key) {
      check.key(key);
      let freed = false;
      const seen = new Set();
      // Revoking a holder's lease deletes its keys. A hold that moved onto a new lease meanwhile
      // (an extend with another TTL) is looked at again.
      for (let attempt = 0; attempt < 4; attempt++) {
        const state = await readState(key);
        const holds = (state.hold ? [state.hold] : state.shared).filter((h) => !seen.has(h.lease));
        if (holds.length === 0) return freed;
        for (const h of holds) seen.add(h.lease);
        const revoked = await Promise.all(holds.map((h) => revoke(h.lease)));
        if (revoked.some(Boolean)) freed = true;
      }
      return freed;
    }

    return { ownHold, isLocked, remainingTime, inspect, forceRelease };
  }

  return { acquireShared, readState, judge, sharedTxn, sharedRange, sharedName, checkShare, reads };
}
