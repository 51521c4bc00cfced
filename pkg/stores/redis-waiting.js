// keel-lock/redis: waiting without polling — acquireOrWait, acquireSharedOrWait, withdraw and
// close, the methods a waiting store adds (every client but @upstash/redis, which has no
// pub/sub), and watch (redis-watch.js), which shares their pub/sub connection. The queue lives
// in Redis (ENQUEUE_SCRIPT, ACQUIRE_SHARED_SCRIPT, CHECK_SCRIPT, LEAVE_SCRIPT); this side keeps
// the pub/sub connection, the timers and the pending calls. How it works: stores/README.md,
// "Waiting without polling", "Shared holds" and "Watching a key".

import { idleCloser, LockStoreClosedError, MAX_TTL_MS } from "./args.js";
import { checkMetadata } from "./metadata.js";
import { clientClosed, openSubscriber } from "./redis-clients.js";
import {
  ACQUIRE_SHARED_SCRIPT,
  ACQUIRE_SHARED_SHA,
  CHECK_SCRIPT,
  CHECK_SHA,
  ENQUEUE_SCRIPT,
  ENQUEUE_SHA,
  fenceFrom,
  LEAVE_SCRIPT,
  LEAVE_SHA,
} from "./redis-scripts.js";
import { redisWatching } from "./redis-watch.js";

// Waiting without polling: acquireOrWait, acquireSharedOrWait, withdraw, close; and watch.
//
// The pub/sub connection is the store's own, so the store keeps it only while it is of use: it
// is opened by the first wait or watch, closed a moment (IDLE_CLOSE_MS) after the last wait left
// and the last watch stopped, and closed at once when the user closes their client (its "end"
// event; clients without one are found closed by the next look). Waits still queued then fail
// with LockStoreClosedError, and watches end. So a script that closes its client exits, with no
// close() of the store.
export function redisWaiting({ client, clientType, channel, lockKeys, runScript, check, checkOwner, store, safetyNetMs, noteShared, replication, releaseExclusive, releaseShared }) {
  const waits = new Map(); // lock name → Map(owner → pending acquireOrWait)
  const expiryTimers = new Map(); // lock name → the timer that looks at the holder's expiry
  let subscriber = null;
  // Closes the subscriber once no wait and no watch is left.
  const idle = idleCloser(() => waits.size === 0 && !watching.active, () => unsubscribe().catch(() => {}));
  const watching = redisWatching({
    lockKeys,
    runScript,
    check,
    pubsub: {
      open() {
        idle.cancel();
        return subscribe().then(() => subscriber);
      },
      idle() {
        if (subscriber && waits.size === 0 && !watching.active) idle.arm();
      },
      closed: () => clientClosed(client, clientType),
      ended: () => clientEnded(),
    },
  });
  // The store's safety-net look: one timer for all its waits, due when the first of them is
  // (each queued wait is looked at least every max(pollMs, safetyNetMs) of its own).
  let lookTimer = null;
  let lookTimerAt = Infinity;
  // A script may only touch keys of one hash slot on a cluster, and each lock's names carry
  // their own hash tag: there a look is one request per lock, on a single Redis one in all.
  const cluster = clientType === "ioredis-cluster" || clientType === "node-redis-cluster" || clientType === "glide-cluster";

  function settle(wait, answer, failed = false) {
    if (wait.settled) return;
    wait.settled = true;
    clearTimeout(wait.deadlineTimer);
    const same = waits.get(wait.lock);
    if (same?.get(wait.owner) === wait) {
      same.delete(wait.owner);
      if (same.size === 0) {
        waits.delete(wait.lock);
        clearTimeout(expiryTimers.get(wait.lock));
        expiryTimers.delete(wait.lock);
        if (waits.size === 0) {
          lookAt(Infinity);
          if (subscriber) idle.arm();
        }
      }
    }
    if (failed) wait.reject(answer);
    else wait.resolve(answer);
  }

  // A grant for `wait`, answered as it is, or with waitForReplicas once the replicas have it (a
  // promise the wait's own follows: the wait leaves the store's books now, so nothing else
  // settles it meanwhile). `handedOver`: another connection's script made the grant.
  function grant(wait, answer, handedOver) {
    if (replication === null) return settle(wait, answer);
    const operation = wait.shared ? "acquireSharedOrWait" : "acquireOrWait";
    const undo = (wait.shared ? releaseShared : releaseExclusive)(wait.names, wait.owner);
    settle(
      wait,
      handedOver
        ? replication.handedOver(operation, wait.key, wait.names, wait.owner, answer, undo)
        : replication.granted(operation, wait.key, wait.names, wait.route, answer, undo),
    );
  }

  // The enqueue's answer for `wait`: {1, fence} took the key; {0, ms until the first hold
  // expires} queued it; {2, limit} (shared: held under another limit) and {-1} (shared: not
  // queued) answer at once.
  function enqueued(wait, reply, waitMs, started, wasSubscribed) {
    if (wait.settled) return;
    if (!Array.isArray(reply)) throw new TypeError(`redisLockStore: the enqueue script answered ${String(reply)}`);
    const state = Number(reply[0]);
    if (state === 1) return grant(wait, { ...fenceFrom(Number(reply[1])), waitedMs: 0 }, false);
    if (state === 2) return settle(wait, { heldLimit: Number(reply[1]) });
    if (state === -1) return settle(wait, false);
    const lock = wait.lock;
    const pttl = Number(reply[1]);
    // 0 is a key in its last millisecond: it is still held, and its expiry is the next look.
    if (pttl >= 0) expiryAt(lock, pttl);
    wait.deadlineTimer = setTimeout(async () => {
      if (wait.settled) return;
      if (clientClosed(client, clientType)) return clientEnded();
      try {
        const answer = await leave(wait, false);
        if (Number(answer[0]) === 1) settleFrom(wait, answer);
        else settle(wait, false);
      } catch (error) {
        settle(wait, error, true);
      }
    }, Math.max(0, waitMs - (Date.now() - started)));
    wait.queued = true;
    wait.nextLook = Date.now() + wait.lookEveryMs;
    lookAt(wait.nextLook);
    if (!wasSubscribed) {
      if (subscriber?.subscribed) look(new Set([lock]));
      else {
        lookOnceSubscribed.add(lock);
        // Without a subscription the safety-net and expiry looks still hand the key over.
        subscribe().catch(() => {});
      }
    }
  }

  const granted = (fence, waited) => ({ ...fenceFrom(Number(fence)), waitedMs: Math.max(0, Math.floor(Number(waited) || 0)) });

  // A {1, fence, waitedMs} (handed the key) or {-1} (no longer queued) answer, for `wait`.
  function settleFrom(wait, reply) {
    const state = Number(reply[0]);
    try {
      if (state === 1) grant(wait, granted(reply[1], reply[2]), true);
      else if (state === -1) settle(wait, false);
    } catch (error) {
      settle(wait, error, true);
    }
  }

  // When the first hold's TTL runs out, this store looks at the key (and so hands it over).
  function expiryAt(lock, ms) {
    clearTimeout(expiryTimers.get(lock));
    const timer = setTimeout(() => {
      expiryTimers.delete(lock);
      look(new Set([lock]));
    }, Math.min(ms + 1, 2_147_483_647));
    expiryTimers.set(lock, timer);
  }

  // Sets the safety-net timer to fire at `at` (Date.now() time) if that is sooner than it
  // would; Infinity stops it.
  function lookAt(at) {
    if (at === Infinity) {
      clearTimeout(lookTimer);
      lookTimer = null;
      lookTimerAt = Infinity;
      return;
    }
    if (lookTimer && lookTimerAt <= at) return;
    clearTimeout(lookTimer);
    lookTimerAt = at;
    lookTimer = setTimeout(() => {
      lookTimer = null;
      lookTimerAt = Infinity;
      look(null);
    }, Math.max(0, at - Date.now()));
  }

  // Sets the safety-net timer to the earliest time a queued wait without a look in flight is due.
  function lookWhenDue() {
    let due = Infinity;
    for (const pending of waits.values()) {
      for (const wait of pending.values()) if (wait.queued && !wait.looking && wait.nextLook < due) due = wait.nextLook;
    }
    lookAt(Infinity);
    lookAt(due);
  }

  // One look at every queued wait of this store with no look in flight — in one request on a
  // single Redis (whatever `locks` asks for), in one request per lock of `locks` (every lock
  // when null) on a cluster. Each wait it covers is next due lookEveryMs from now.
  function look(locks) {
    if (clientClosed(client, clientType)) return clientEnded();
    const now = Date.now();
    const requests = new Map(); // one request → [{ lock, names, covered }]
    for (const [lock, pending] of waits) {
      if (cluster && locks && !locks.has(lock)) continue;
      const covered = [...pending.values()].filter((wait) => wait.queued && !wait.settled && !wait.looking);
      if (covered.length === 0) continue;
      const request = cluster ? lock : "";
      if (!requests.has(request)) requests.set(request, []);
      requests.get(request).push({ lock, names: pending.values().next().value.names, covered });
    }
    for (const group of requests.values()) {
      const keys = [];
      const args = [channel];
      for (const { names, covered } of group) {
        keys.push(...names);
        args.push(String(covered.length));
        for (const wait of covered) {
          args.push(wait.owner);
          wait.looking = true;
          wait.nextLook = now + wait.lookEveryMs;
        }
      }
      const done = () => {
        for (const { covered } of group) for (const wait of covered) wait.looking = false;
      };
      runScript(CHECK_SHA, CHECK_SCRIPT, keys, args).then(
        (reply) => {
          done();
          group.forEach((entry, i) => answered(entry, reply?.[i]));
          lookWhenDue();
        },
        () => {
          done(); // the next look or the deadline decides
          lookWhenDue();
        },
      );
    }
    lookWhenDue();
  }

  // One lock's part of a look's answer: its PTTL, then state, fence, waitedMs per wait covered.
  function answered({ lock, covered }, reply) {
    if (!Array.isArray(reply)) return;
    covered.forEach((wait, i) => {
      if (!wait.settled) settleFrom(wait, reply.slice(1 + 3 * i, 4 + 3 * i));
    });
    const pttl = Number(reply[0]);
    if (pttl >= 0 && waits.has(lock)) expiryAt(lock, pttl);
  }

  function onMessage(text) {
    let lock, owner, fence, waited, ttl;
    try {
      [lock, owner, fence, waited, ttl] = JSON.parse(text);
    } catch {
      return;
    }
    const pending = waits.get(lock);
    if (!pending) return;
    const wait = pending.get(owner);
    if (wait) settleFrom(wait, [1, fence, waited]);
    if (waits.has(lock)) expiryAt(lock, Number(ttl));
  }

  // Messages sent while the connection was down are lost: a look at every waited-for key, and
  // every watcher told to look again.
  function onReconnect() {
    look(null);
    watching.reconnected();
  }

  // Subscribes once per store; a failed attempt is retried by the next waiter. Keys whose
  // waiters queued before the subscription was up are looked at once it is.
  const lookOnceSubscribed = new Set();
  function subscribe() {
    if (!subscriber) {
      const opened = openSubscriber(client, clientType, channel, onMessage, onReconnect);
      subscriber = opened;
      client.on?.("end", clientEnded);
      opened.ready.then(
        () => {
          if (lookOnceSubscribed.size > 0) look(new Set(lookOnceSubscribed));
          lookOnceSubscribed.clear();
        },
        () => {
          if (subscriber === opened) unsubscribe().catch(() => {});
        },
      );
    }
    return subscriber.ready;
  }

  // Closes the pub/sub connection (if any) and stops following the user's client.
  async function unsubscribe() {
    idle.cancel();
    const closing = subscriber;
    subscriber = null;
    if (!closing) return;
    client.removeListener?.("end", clientEnded);
    await closing.ready.catch(() => {});
    await closing.close();
  }

  // The user closed their client: nothing this store sends can reach Redis any more. Every
  // wait fails now (its queue entry lapses at its deadline in Redis, or, handed the key meanwhile,
  // the key at its TTL, as a crashed client's would), and the connection is closed.
  function clientEnded() {
    for (const pending of [...waits.values()]) {
      for (const wait of [...pending.values()]) {
        settle(wait, new LockStoreClosedError(`redisLockStore: the Redis client was closed while waiting for ${JSON.stringify(wait.key)}`), true);
      }
    }
    for (const timer of expiryTimers.values()) clearTimeout(timer);
    expiryTimers.clear();
    lookAt(Infinity);
    watching.end();
    unsubscribe().catch(() => {});
  }

  async function leave(wait, withdrawing) {
    return runScript(LEAVE_SHA, LEAVE_SCRIPT, wait.names, [wait.owner, channel, withdrawing ? "1" : "0"]);
  }

  function checkWait(who, key, owner, ttlMs, waitMs, pollMs, metadata) {
    check.key(key);
    checkOwner(owner);
    check.ttl(ttlMs);
    if (!Number.isInteger(waitMs) || waitMs < 0 || waitMs > MAX_TTL_MS) {
      throw new RangeError(`redisLockStore: waitMs must be a whole number of ms in 0..${MAX_TTL_MS}, got ${waitMs}`);
    }
    if (!Number.isInteger(pollMs) || pollMs < 1 || pollMs > MAX_TTL_MS) {
      throw new RangeError(`redisLockStore: pollMs must be a whole number of ms in 1..${MAX_TTL_MS}, got ${pollMs}`);
    }
    checkMetadata(`redisLockStore.${who}`, metadata);
  }

  // Queues `owner` for `key` through `sha`/`script` (the enqueue or the shared acquire script,
  // `args` after the owner) unless it is answered at once. The caller checked the arguments.
  function queueFor(key, owner, waitMs, pollMs, sha, script, args, shared) {
    const names = lockKeys(key);
    const lock = names[0];
    let pending = waits.get(lock);
    if (pending?.has(owner)) return Promise.reject(new Error(`redisLockStore: ${owner} is already waiting for ${key}`));
    if (clientClosed(client, clientType)) {
      return Promise.reject(new LockStoreClosedError("redisLockStore: the Redis client is closed"));
    }
    idle.cancel();
    const started = Date.now();
    return new Promise((resolve, reject) => {
      const wait = { key, lock, owner, names, shared, route: undefined, lookEveryMs: Math.max(pollMs, safetyNetMs), resolve, reject, settled: false, queued: false, looking: false, nextLook: Infinity, enqueued: null, deadlineTimer: undefined };
      if (pending === undefined) waits.set(lock, (pending = new Map()));
      pending.set(owner, wait);
      // With the subscription up, the hand-over message finds this wait registered. A key
      // whose waiters queued before it was up is looked at once it is: a message may have
      // come first.
      const wasSubscribed = subscriber?.subscribed === true;
      // Where the enqueue goes: a grant it makes at once is waited for there (waitForReplicas).
      if (replication !== null) wait.route = replication.route(names);
      // Settles once the enqueue's answer has been acted on; never rejects.
      wait.enqueued = runScript(sha, script, names, [owner, ...args]).then(
        (reply) => {
          try {
            enqueued(wait, reply, waitMs, started, wasSubscribed);
          } catch (error) {
            settle(wait, error, true);
          }
        },
        (error) => settle(wait, error, true),
      );
    });
  }

  return {
    /**
     * Takes the key if it is free and nobody queues; otherwise joins its FIFO queue and waits up
     * to `waitMs` for a release (or the holders' expiry) to hand it over. Answers
     * `{ fence, waitedMs }` or `false`. `metadata` is kept with the queue entry and becomes the
     * hold's when it is handed the key.
     */
    acquireOrWait(key, owner, ttlMs, waitMs, pollMs, metadata) {
      try {
        checkWait("acquireOrWait", key, owner, ttlMs, waitMs, pollMs, metadata);
      } catch (error) {
        return Promise.reject(error);
      }
      if (waitMs === 0) return store.acquire(key, owner, ttlMs, metadata).then((got) => got && { ...got, waitedMs: 0 });
      const args = [String(ttlMs), String(waitMs), channel];
      if (metadata !== undefined) args.push(metadata);
      return queueFor(key, owner, waitMs, pollMs, ENQUEUE_SHA, ENQUEUE_SCRIPT, args, false);
    },

    /**
     * A shared hold of `weight` under `limit`, taken at once if it fits and nobody queues;
     * otherwise the caller joins the key's one FIFO queue (behind exclusive and shared waiters
     * alike) and waits up to `waitMs` to be handed it. Answers `{ fence, waitedMs }`, `false`,
     * or `{ heldLimit }` at once when the key is held under another limit.
     */
    acquireSharedOrWait(key, owner, ttlMs, weight, limit, waitMs, pollMs, metadata) {
      try {
        checkWait("acquireSharedOrWait", key, owner, ttlMs, waitMs, pollMs, metadata);
      } catch (error) {
        return Promise.reject(error);
      }
      if (waitMs === 0) {
        return store.acquireShared(key, owner, ttlMs, weight, limit, metadata).then((got) => (got && "fence" in got ? { ...got, waitedMs: 0 } : got));
      }
      const args = [String(ttlMs), String(weight), String(limit), String(waitMs), channel];
      if (metadata !== undefined) args.push(metadata);
      return queueFor(key, owner, waitMs, pollMs, ACQUIRE_SHARED_SHA, ACQUIRE_SHARED_SCRIPT, args, true).then((got) => noteShared(owner, got));
    },

    /**
     * Afterwards `owner` neither holds nor waits for `key`: it leaves the queue, or releases a
     * key it was handed (to the next waiter). A pending acquireOrWait of `owner` answers false.
     */
    async withdraw(key, owner) {
      check.key(key);
      checkOwner(owner);
      const names = lockKeys(key);
      const wait = waits.get(names[0])?.get(owner);
      if (wait) {
        settle(wait, false);
        await wait.enqueued; // the leave must reach Redis after the enqueue
      }
      await leave({ names, owner }, true);
    },

    /**
     * Pending acquireOrWait calls leave their queues (answering a grant they already got, else
     * false), every watch stops, and the pub/sub connection is closed. A later acquireOrWait or
     * watch subscribes again.
     */
    async close() {
      const pending = [...waits.values()].flatMap((m) => [...m.values()]);
      await Promise.all(
        pending.map(async (wait) => {
          try {
            await wait.enqueued;
            if (wait.settled) return;
            const answer = await leave(wait, false);
            if (Number(answer[0]) === 1) settleFrom(wait, answer);
            else settle(wait, false);
          } catch (error) {
            settle(wait, error, true);
          }
        }),
      );
      for (const timer of expiryTimers.values()) clearTimeout(timer);
      expiryTimers.clear();
      lookAt(Infinity);
      await watching.stopAll();
      await unsubscribe();
    },

    /**
     * Reports every change of `key`'s exclusive holder made by a store operation to `onChange`,
     * once each and in the order Redis made them; resolves, once subscribed, to `stop()`.
     */
    watch(key, onChange) {
      return watching.watch(key, onChange);
    },

    /** The same as `close()`. */
    quit() {
      return store.close();
    },

    /** How many acquireOrWait calls of this store are waiting. */
    get waitingCount() {
      let n = 0;
      for (const m of waits.values()) n += m.size;
      return n;
    },

    /** Whether the store's pub/sub connection is open and subscribed. */
    get subscribed() {
      return subscriber?.subscribed === true;
    },

    /** The store's pub/sub connection (a duplicate of the client), or null before the first wait. */
    get subscriber() {
      return subscriber?.connection ?? null;
    },
  };
}
