// keel-lock/etcd: waiting without polling — acquireOrWait, acquireSharedOrWait and withdraw, on
// etcd's own queue recipe. How it works: stores/README.md, "Waiting without polling (etcd)".
//
// Each waiter writes a key under the lock's queue prefix, P+K+"/q/"+<its lease ID>, attached to
// the lease it will hold the key with, and watches (POST /v3/watch, a stream of one JSON message
// per line) the queue key created just before its own (by create revision) — or, first in line,
// the lock key. So a release wakes only the next waiter; and when the waiter before takes the key
// (its queue key deleted as the lock key is created, in one revision) the one behind learns it
// is first in line from the same stream, with no request. Per waiter:
//
//   attempt   lease grant + one transaction:
//               If(create_revision(P+K) == 0 && create_revision(every P+K/q/*) == 0
//                  && create_revision(every P+K/s/*) == 0)
//               Then(take the key, as acquire does)
//               Else(put P+K/q/<lease> owner with the lease; the newest two queue keys)
//             The queue key's create_revision is the waiter's place in line.
//   take      on the lock key's deletion (or a look), one transaction:
//               If(create_revision(P+K) == 0 && every queue key was created at or after ours
//                  && ours still exists)
//               Then(put P+K owner and P+K/m with the lease; delete ours)
//               Else(the lock key; the queue key created just before ours; ours)
//             Granted: a keep-alive of the lease, so the hold's TTL runs from the hand-over (and
//             the lease is seen live after the wait: a put with a lapsed lease is refused too).
//   waiting   a keep-alive of the lease every third of its TTL.
//   leaving   (timeout, withdraw, place lost) the lease revoked: etcd deletes the queue key.
//
// A plain acquire answers false while anyone queues (etcd.js): a newcomer never overtakes.

import { MAX_TTL_MS } from "./args.js";
import { b64, int64, NOT_FOUND, rangeEndOf } from "./etcd-client.js";
import { NEVER } from "./etcd-shared.js";

/** Default interval of a waiter's safety-net look, in ms (the store option `safetyNetMs`). */
export const DEFAULT_WAIT_LOOK_MS = 5_000;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// An error a later look may not meet: no endpoint answered (etcd sent no code), an endpoint
// answered unavailable, or a write's reply was lost.
const transient = (error) =>
  error?.name === "EtcdStoreError" && (error.outcomeUnknown || (error.etcdCode === null && (error.status === null || error.status >= 500)));

export function etcdWaiting({ shared, who, client, names, check, checkMetadata, leaseSeconds, grant, revoke, holdPuts, grantedTtl, acquire, release, toFence, safetyNetMs }) {
  const call = (path, body, opts) => client.call(path, body, opts);
  const waits = new Map(); // lock name → Map(owner → wait)

  function checkWait(key, owner, ttlMs, waitMs, pollMs, metadata) {
    check.key(key);
    check.owner(owner);
    check.ttl(ttlMs);
    if (!Number.isInteger(waitMs) || waitMs < 0 || waitMs > MAX_TTL_MS) {
      throw new RangeError(`${who}: waitMs must be a whole number of ms in 0..${MAX_TTL_MS}, got ${waitMs}`);
    }
    if (!Number.isInteger(pollMs) || pollMs < 1 || pollMs > MAX_TTL_MS) {
      throw new RangeError(`${who}: pollMs must be a whole number of ms in 1..${MAX_TTL_MS}, got ${pollMs}`);
    }
    return checkMetadata(who, metadata);
  }

  // What a waiter not first in line, or blocked, watches: the queue key just before its own;
  // else the lock key while it is held; else the shared holds while any is live.
  //
  // Behind another waiter, one watch over [P+K, that waiter's queue key] (puts included): when
  // its queue key's deletion comes in the same revision as the lock key's creation, that waiter
  // took the key and this one is first in line — it goes on watching the same stream for the
  // lock key's deletion, without a look in between. (Other names in the range are passed over.)
  function watchTarget(key, before, lockHeld, sharedCount) {
    const lock = b64(names(key).lock);
    if (before) return { range: { key: lock, range_end: btoa(atob(before) + "\0") }, before, lock };
    if (lockHeld) return { range: { key: lock, filters: ["NOPUT"] } };
    if (sharedCount > 0) return { range: { ...shared.sharedRange(key), filters: ["NOPUT"] } };
    return null;
  }

  // Is the wait over for this message's `events`? Changes `target` when the waiter before took
  // the key (it then waits for the lock key's deletion).
  function over(target, events) {
    if (!target.before) return events.length > 0;
    const gone = events.find((e) => e.type === "DELETE" && e.kv?.key === target.before);
    if (target.head) return events.some((e) => e.type === "DELETE" && e.kv?.key === target.lock);
    if (!gone) return false;
    const took = events.some((e) => (e.type ?? "PUT") === "PUT" && e.kv?.key === target.lock && e.kv.version === "1" && e.kv.mod_revision === gone.kv.mod_revision);
    if (!took) return true; // it left (or lapsed): look
    target.head = true;
    return events.some((e) => e.type === "DELETE" && e.kv?.key === target.lock && Number(e.kv.mod_revision) > Number(gone.kv.mod_revision));
  }

  const queueRangeOf = (key) => ({ key: b64(names(key).queue), range_end: b64(rangeEndOf(names(key).queue)) });
  const nobodyQueued = (key) => ({ ...queueRangeOf(key), target: "CREATE", result: "EQUAL", create_revision: "0" });
  const noShared = (key) => ({ ...shared.sharedRange(key), target: "CREATE", result: "EQUAL", create_revision: "0" });

  // The first attempt: take the key (or the share), or join its queue. `share`: { weight, limit,
  // state } for a shared hold (state: the key's state read just before), null for the lock.
  // { fence } | { rev, watch, at } (queued).
  async function attempt(key, owner, meta, lease, share) {
    const { lock, queue } = names(key);
    const mine = queue + lease;
    let compare;
    let success;
    if (share === null) {
      compare = [{ key: b64(lock), target: "CREATE", result: "EQUAL", create_revision: "0" }, nobodyQueued(key), noShared(key)];
      success = holdPuts(key, owner, meta, lease);
    } else if (share.state.waiting === 0 && shared.judge(share.state, owner, share.weight, share.limit) === "fits") {
      const txn = shared.sharedTxn(key, owner, share.state, share.weight, share.limit, meta, lease);
      compare = [...txn.compare, nobodyQueued(key)];
      success = [txn.put];
    } else {
      compare = [NEVER(b64(lock))];
      success = [];
    }
    const body = {
      compare,
      success,
      failure: [
        { request_put: { key: b64(mine), value: b64(owner), lease } },
        { request_range: { key: b64(lock), keys_only: true } },
        { request_range: { ...queueRangeOf(key), keys_only: true, sort_target: "CREATE", sort_order: "DESCEND", limit: "2" } },
        { request_range: { ...shared.sharedRange(key), count_only: true } },
      ],
    };
    const reply = await call("/v3/kv/txn", body, { write: true });
    const revision = toFence(reply.header?.revision, "the transaction's revision");
    if (reply.succeeded === true) return { fence: revision };
    // Ours is the newest queue key (created by this transaction); the one after it in the
    // answer was created just before it.
    const [held, newest, live] = rangeAnswers(reply, [1, 2, 3]);
    const before = (newest.kvs ?? []).find((kv) => kv.key !== b64(mine));
    return { rev: revision, watch: watchTarget(key, before?.key, (held.kvs ?? []).length > 0, int64(live.count, "a range's count")), at: revision };
  }

  // A take: { fence } | { watch, at } (still waiting) | { lost: true } (our place is gone).
  async function take(key, owner, meta, lease, rev, share) {
    const { lock, queue } = names(key);
    const mine = b64(queue + lease);
    const notBefore = { ...queueRangeOf(key), target: "CREATE", result: "GREATER", create_revision: String(rev - 1) };
    const stillThere = { key: mine, target: "CREATE", result: "EQUAL", create_revision: String(rev) };
    const earlierRange = { ...queueRangeOf(key), keys_only: true, max_create_revision: String(rev - 1), sort_target: "CREATE", sort_order: "DESCEND", limit: "1" };
    let body;
    if (share === null) {
      body = {
        compare: [{ key: b64(lock), target: "CREATE", result: "EQUAL", create_revision: "0" }, noShared(key), notBefore, stillThere],
        success: [...holdPuts(key, owner, meta, lease), { request_delete_range: { key: mine } }],
        failure: [
          { request_range: { key: b64(lock), keys_only: true } },
          { request_range: earlierRange },
          { request_range: { key: mine, count_only: true } },
          { request_range: { ...shared.sharedRange(key), count_only: true } },
        ],
      };
    } else {
      // A share: read the state (with our place), judge, and write only if nothing changed.
      const state = await shared.readState(key, [earlierRange, { key: mine, count_only: true }]);
      const [earlier, ours] = state.extra;
      if (int64(ours.count, "a range's count") === 0) return { lost: true };
      const before = earlier.kvs?.[0]?.key;
      const verdict = shared.judge(state, owner, share.weight, share.limit);
      if (typeof verdict === "object") return { lost: true }; // held under another limit now
      if (before || verdict === "busy") return { watch: watchTarget(key, before, state.hold !== null, state.shared.length), at: state.revision };
      const txn = shared.sharedTxn(key, owner, state, share.weight, share.limit, meta, lease);
      body = { compare: [...txn.compare, notBefore, stillThere], success: [txn.put, { request_delete_range: { key: mine } }] };
    }
    let reply;
    try {
      reply = await call("/v3/kv/txn", body, { write: true });
    } catch (error) {
      // A put with a lapsed lease: the place is gone with it.
      if (error.etcdCode === NOT_FOUND) return { lost: true };
      if (!error.outcomeUnknown) throw error;
      const state = await shared.readState(key);
      const hold = share === null ? state.hold : state.shared.find((h) => h.owner === owner);
      if (hold && hold.owner === owner && hold.lease === lease) return { fence: hold.fence };
      return { watch: null, at: 0 }; // look again
    }
    const revision = toFence(reply.header?.revision, "the transaction's revision");
    if (reply.succeeded === true) return { fence: revision };
    if (share !== null) return { watch: null, at: revision }; // changed since the read: look again
    const [held, before, ours, live] = rangeAnswers(reply, [0, 1, 2, 3]);
    if (int64(ours.count, "a range's count") === 0) return { lost: true };
    return { watch: watchTarget(key, before.kvs?.[0]?.key, (held.kvs ?? []).length > 0, int64(live.count, "a range's count")), at: revision };
  }

  // Resolves once the watch of `target` (watchTarget's) from revision `from` says the wait may be
  // over (over()), the stream ends or fails, `ms` pass, or `stop` aborts.
  async function deletion(target, from, ms, stop) {
    const controller = new AbortController();
    const end = () => controller.abort();
    const timer = setTimeout(end, ms);
    stop.addEventListener("abort", end, { once: true });
    try {
      if (stop.aborted) return;
      const response = await client.open("/v3/watch", { create_request: { ...target.range, start_revision: String(from) } }, controller.signal);
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        buffer += decoder.decode(value, { stream: true });
        let newline;
        while ((newline = buffer.indexOf("\n")) >= 0) {
          const line = buffer.slice(0, newline).trim();
          buffer = buffer.slice(newline + 1);
          if (line === "") continue;
          let message;
          try {
            message = JSON.parse(line);
          } catch {
            return; // not etcd's: look again
          }
          const result = message.result ?? {};
          if (message.error || result.canceled) return;
          if (Array.isArray(result.events) && over(target, result.events)) return;
        }
        if (buffer.length > 1 << 20) return;
      }
    } catch {
      // unreachable, cut, or ended by us: the caller looks again (after a pause if it failed)
      if (!controller.signal.aborted) await sleep(Math.min(ms, 200));
    } finally {
      clearTimeout(timer);
      stop.removeEventListener("abort", end);
      controller.abort();
    }
  }

  async function acquireOrWait(key, owner, ttlMs, waitMs, pollMs, metadata) {
    const meta = checkWait(key, owner, ttlMs, waitMs, pollMs, metadata);
    if (waitMs === 0) {
      const got = await acquire(key, owner, ttlMs, metadata);
      return got && { fence: got.fence, waitedMs: 0 };
    }
    return queueFor(key, owner, ttlMs, waitMs, pollMs, meta, null, () => acquire(key, owner, ttlMs, metadata));
  }

  async function acquireSharedOrWait(key, owner, ttlMs, weight, limit, waitMs, pollMs, metadata) {
    const meta = checkWait(key, owner, ttlMs, waitMs, pollMs, metadata);
    shared.checkShare(weight, limit);
    const now = () => shared.acquireShared(key, owner, ttlMs, weight, limit, metadata);
    if (waitMs === 0) {
      const got = await now();
      return got && "fence" in got ? { fence: got.fence, waitedMs: 0 } : got;
    }
    const state = await shared.readState(key);
    const verdict = shared.judge(state, owner, weight, limit);
    if (typeof verdict === "object") return verdict; // { heldLimit }
    return queueFor(key, owner, ttlMs, waitMs, pollMs, meta, { weight, limit, state }, now);
  }

  // Takes the key (or the share) at once or joins the queue and waits. `retry`: the plain
  // attempt, for when joining's outcome is unknown and it did not apply. The wait is known to
  // withdraw() from the start, so one that comes before the queue key is written still leaves.
  function queueFor(key, owner, ttlMs, waitMs, pollMs, meta, share, retry) {
    const { lock } = names(key);
    const started = Date.now();
    const lookMs = Math.max(pollMs, safetyNetMs);
    const stop = new AbortController();
    const wait = { stop, withdrawn: false, done: null };
    let mine = waits.get(lock);
    if (!mine) waits.set(lock, (mine = new Map()));
    mine.set(owner, wait);
    const timer = setTimeout(() => stop.abort(), waitMs);
    let keepAlive = null;
    let lease = null; // ours while it may carry our queue key or hold

    const run = async () => {
      lease = await grant(leaseSeconds(ttlMs));
      let next;
      try {
        next = await attempt(key, owner, meta, lease, share);
      } catch (error) {
        if (!error.outcomeUnknown) throw error;
        // It may have applied: ours (this owner, this lease) is a grant; else leave (revoking the
        // lease deletes a queue key it may have written) and answer as a plain attempt would.
        const state = await shared.readState(key);
        const hold = share === null ? state.hold : state.shared.find((h) => h.owner === owner);
        if (hold && hold.owner === owner && hold.lease === lease) return { fence: hold.fence, waitedMs: 0 };
        await revoke(lease);
        lease = null;
        const got = await retry();
        if (got && "fence" in got && wait.withdrawn) {
          await release(key, owner);
          return false;
        }
        return got && "fence" in got ? { fence: got.fence, waitedMs: Date.now() - started } : got;
      }
      if ("fence" in next) return { fence: next.fence, waitedMs: 0 };
      // Queued. The lease lives through the wait: a keep-alive every third of its TTL.
      const rev = next.rev;
      const granted = grantedTtl.get(lease) ?? leaseSeconds(1);
      const current = lease;
      keepAlive = setInterval(() => {
        call("/v3/lease/keepalive", { ID: current })
          .then((reply) => {
            // The lease lapsed: the place is lost.
            if (int64((reply.result ?? reply).TTL, "a kept-alive lease's TTL") <= 0) stop.abort();
          })
          .catch(() => {});
      }, Math.max(250, Math.floor((granted * 1000) / 3)));
      for (let pauseMs = 100; ; ) {
        if (stop.signal.aborted) return false;
        if (next.watch !== null) await deletion(next.watch, next.at + 1, lookMs, stop.signal);
        if (stop.signal.aborted) return false;
        try {
          next = await take(key, owner, meta, lease, rev, share);
          pauseMs = 100;
        } catch (error) {
          // No endpoint answered, or a leader change cut the reply short: look again while the
          // wait lasts (the compares make a second take harmless). Anything else ends the wait.
          if (!transient(error)) throw error;
          await sleep(pauseMs);
          pauseMs = Math.min(lookMs, pauseMs * 2);
          next = { watch: null, at: 0 };
          continue;
        }
        if (next.lost) return false;
        if ("fence" in next) {
          // The TTL runs from here: a keep-alive, which also shows the lease (and so the hold) live.
          const sent = Date.now();
          const reply = await call("/v3/lease/keepalive", { ID: lease });
          if (int64((reply.result ?? reply).TTL, "a kept-alive lease's TTL") <= 0) return false;
          return { fence: next.fence, waitedMs: Math.max(0, sent - started) };
        }
      }
    };
    const finish = async (answer) => {
      clearTimeout(timer);
      clearInterval(keepAlive);
      if (mine.get(owner) === wait) mine.delete(owner);
      if (mine.size === 0 && waits.get(lock) === mine) waits.delete(lock);
      if (lease !== null && (answer === false || wait.withdrawn)) {
        // Leaving: revoking the lease deletes our queue key (and a hold taken as we withdrew:
        // the hold is on the same lease).
        await revoke(lease).catch(() => {});
        return false;
      }
      return wait.withdrawn ? false : answer;
    };
    wait.done = run().then(finish, async (error) => {
      await finish(false);
      throw error;
    });
    return wait.done;
  }

  /** Leaves the queue for `key`, or releases the key if it was already handed over. */
  async function withdraw(key, owner) {
    check.key(key);
    check.owner(owner);
    const wait = waits.get(names(key).lock)?.get(owner);
    if (!wait) return release(key, owner);
    wait.withdrawn = true;
    wait.stop.abort();
    await wait.done.catch(() => {});
    return true;
  }

  return { acquireOrWait, acquireSharedOrWait, withdraw };
}

// The range responses at `indexes` of a transaction's answer.
function rangeAnswers(reply, indexes) {
  const responses = Array.isArray(reply.responses) ? reply.responses : [];
  return indexes.map((i) => responses[i]?.response_range ?? {});
}
