// keel-lock/sql: waiting without polling on PostgreSQL — acquireOrWait, acquireSharedOrWait,
// withdraw, watch and close, the methods a pg store adds. The queue and the hand-over are SQL
// (sql/postgres.js, sql/postgres-functions.js); this side keeps the LISTEN connection, the timers
// and the pending calls (the watches: sql-pg-watch.js).

import { argumentChecks, idleCloser, LockStoreClosedError, unrefTimer } from "./args.js";
import { toFence, truthy } from "./sql-drivers.js";
import { pgWatching } from "./sql-pg-watch.js";

const check = argumentChecks("databaseLockStore");

/** Longest wait acquireOrWait accepts, in ms (the core's limit for `timeout`). */
const MAX_WAIT_MS = 2_147_483_647;

// A pg.Pool (its own pool of connections: one is checked out to LISTEN) or a single client.
const isPgPool = (db) => typeof db.connect === "function" && typeof db.totalCount === "number";

/**
 * Waiting without polling on PostgreSQL: acquireOrWait / withdraw / close for databaseLockStore.
 *
 * The queue is the waiters table, exclusive and shared waiters in one FIFO; the hand-over
 * happens in SQL (statements.release, .acquire, .tick, and the shared holds' functions). This side only waits: each pending call is an entry in `waiting` (by key, then owner),
 * woken by NOTIFY on one LISTEN connection per store. A grant's notification carries its fence
 * and waited ms, so a waiter granted by someone's release costs no statement of its own. Timers:
 *   - per call: its deadline (then `leave`), and the safety net every max(pollMs, safetyNetMs)
 *     (`tick`), in case a notification is lost (listener connection dropped, a releaser on a
 *     version that does not notify);
 *   - per key: the holder's expiry, learned from the enqueue, a tick or a grant notification;
 *     when it passes, one `tick` hands the key to the oldest waiter (a crashed holder never
 *     releases).
 * The LISTEN connection is the store's own only when it came from a pool (or options.listen):
 * then it is given back a moment (IDLE_CLOSE_MS) after the last wait left and the last watch
 * stopped, so `pool.end()` is never kept waiting for it by an idle store. It LISTENs on the
 * waiters' channel while anyone waits and on the watch channel while anyone watches. When the
 * user ends their pool or client, waits still queued fail with LockStoreClosedError (a single
 * client's "end" event at once; a pool, which has no such event, at the wait's next safety-net
 * look, or within IDLE_CLOSE_MS while the store watches) and watches end.
 */
export function pgWaiting(db, sql, io, options, safetyNetMs, release, checkShare, metadataOf) {
  const waiting = new Map(); // key -> Map(owner -> entry)
  const expiryTimers = new Map(); // key -> { at, timer }
  let listener = null; // { client, own: boolean, dead: boolean, channels: Map, listen(channel), unlisten(channel), close() }
  // Gives the LISTEN connection back once no wait and no watch is left.
  const idle = idleCloser(() => waiting.size === 0 && !watching.active, () => stopListening().catch(() => {}));
  const pool = isPgPool(db);
  // A pg Pool says it is ending (or ended) once end() was called; a Client says nothing, but
  // emits "end", which the listener follows.
  const poolEnded = () => pool && (db.ending === true || db.ended === true);

  const entriesOf = (key) => waiting.get(key);

  function forget(entry) {
    clearTimeout(entry.deadlineTimer);
    clearTimeout(entry.pollTimer);
    const entries = waiting.get(entry.key);
    if (entries?.get(entry.owner) === entry) {
      entries.delete(entry.owner);
      if (entries.size === 0) {
        waiting.delete(entry.key);
        const expiry = expiryTimers.get(entry.key);
        if (expiry) clearTimeout(expiry.timer);
        expiryTimers.delete(entry.key);
        if (waiting.size === 0 && !watching.active && listener?.own) idle.arm();
      }
    }
  }

  async function stopListening() {
    idle.cancel();
    const closing = listener ?? (opening ? await opening.catch(() => null) : null);
    listener = null;
    if (closing && !closing.dead) await closing.close();
    else if (closing) await closing.close().catch(() => {});
  }

  // The user ended the pool or client: every wait fails now (its queue row lapses at its
  // deadline, or a key handed to it meanwhile at its TTL, as a crashed caller's would) and the
  // listener is given back, so that the pool can finish ending.
  function databaseClosed() {
    for (const entries of [...waiting.values()]) {
      for (const entry of [...entries.values()]) {
        fail(entry, new LockStoreClosedError(`databaseLockStore: the ${pool ? "pool" : "client"} was ended while waiting for ${JSON.stringify(entry.key)}`));
      }
    }
    watching.closed();
    stopListening().catch(() => {});
  }

  function settle(entry, answer) {
    if (entry.state === "done") return;
    entry.state = "done";
    forget(entry);
    entry.resolve(answer);
  }

  function fail(entry, error) {
    if (entry.state === "done") return;
    entry.state = "done";
    forget(entry);
    entry.reject(error);
  }

  const grantOf = (fence, waitedMs) => ({ fence: toFence(fence), waitedMs: Math.max(0, Number(waitedMs) || 0) });

  // Look again at `key` when its holder's TTL has passed (ms from now, as the database said).
  function expireAfter(key, ms) {
    if (!waiting.has(key) || ms === null || ms === undefined) return;
    const delay = Math.max(0, Math.ceil(Number(ms))) + 1;
    const at = Date.now() + delay;
    const existing = expiryTimers.get(key);
    if (existing && existing.at <= at) return;
    if (existing) clearTimeout(existing.timer);
    const timer = unrefTimer(() => {
      expiryTimers.delete(key);
      tick(key, null).catch(() => {});
    }, delay);
    expiryTimers.set(key, { at, timer });
  }

  // One tick statement: hands `key` to the front waiters that fit, and settles what it learns.
  // With an owner, also answers that waiter's own state.
  async function tick(key, owner) {
    const r = (await io.row(sql.tick, [key, owner]))?.r;
    if (!r) return;
    const entries = entriesOf(key);
    const grants = Array.isArray(r.grants) ? r.grants : [];
    for (const [grantee, fence, waitedMs] of grants) {
      const granted = entries?.get(grantee);
      if (granted?.state === "waiting") settle(granted, grantOf(fence, waitedMs));
    }
    if (owner !== null) {
      const entry = entries?.get(owner);
      if (entry?.state === "waiting" && !grants.some(([grantee]) => grantee === owner)) {
        const me = r.me;
        if (me === null || me === undefined) settle(entry, false); // withdrawn or swept elsewhere
        else if (truthy(me.granted)) settle(entry, truthy(me.grant_live) ? grantOf(me.fence, me.waited_ms) : false);
      }
    }
    if (r.remaining !== null && r.remaining !== undefined) expireAfter(key, r.remaining);
  }

  function onNotification(message) {
    if (message.channel === sql.watchChannel) return watching.onNotification(message.payload);
    if (message.channel !== sql.wakeChannel) return; // the user's own, on a client they gave us
    let payload;
    try {
      payload = JSON.parse(message.payload);
    } catch {
      return;
    }
    if (!Array.isArray(payload)) return;
    const [key, owner, fence, waitedMs, ttlMs] = payload;
    if (key === "") {
      // Payload too long to name the key: every waiter of this store looks again.
      for (const entries of waiting.values()) {
        for (const entry of entries.values()) if (entry.state === "waiting") tick(entry.key, entry.owner).catch(() => {});
      }
      return;
    }
    const entries = entriesOf(key);
    if (!entries) return;
    if (owner === null) {
      tick(key, null).catch(() => {}); // freed without a visible waiter: hand it over from here
      return;
    }
    const entry = entries.get(owner);
    if (entry?.state === "waiting") {
      try {
        settle(entry, grantOf(fence, waitedMs));
      } catch (error) {
        fail(entry, error);
      }
    }
    expireAfter(key, ttlMs);
  }

  // The store's LISTEN connection, made on first use (state.listen then LISTENs on a channel):
  // options.listen() if given, else a connection checked out of the pool, else the single client.
  async function openListener() {
    let client;
    let own;
    if (typeof options.listen === "function") {
      client = await options.listen();
      own = true;
    } else if (isPgPool(db)) {
      client = await db.connect();
      own = true;
    } else if (typeof db.on === "function") {
      client = db;
      own = false;
    } else {
      return null; // nothing to LISTEN on: the safety-net poll does all the work
    }
    // The channels LISTENed on: channel -> the LISTEN statement's promise.
    const state = { client, own, dead: false, channels: new Map() };
    const onError = () => markDead();
    const markDead = () => {
      if (state.dead) return;
      if (listener === state) listener = null;
      // A connection of the pool's goes back to it (destroyed), or the pool would wait for it
      // when ended. The user's client keeps its "end" listener, which tells of its end.
      // A late error of the dying connection then finds a listener still.
      if (own) {
        client.on("error", () => {});
        state.close().catch(() => {});
      } else client.removeListener?.("notification", onNotification);
      state.dead = true;
      // Notifications may have been lost: every waiter looks now, and the watches once the store
      // listens again.
      for (const entries of waiting.values()) {
        for (const entry of entries.values()) if (entry.state === "waiting") tick(entry.key, entry.owner).catch(() => {});
      }
      watching.lost();
    };
    client.on("notification", onNotification);
    client.on("error", onError);
    // The user's own client ended: nothing can reach the database for these waits any more.
    const onEnd = own ? markDead : () => (markDead(), databaseClosed());
    client.on("end", onEnd);
    state.listen = (channel) => {
      let listening = state.channels.get(channel);
      if (!listening) {
        listening = client.query(sql.listen(channel));
        state.channels.set(channel, listening);
        listening.catch(() => {
          if (state.channels.get(channel) === listening) state.channels.delete(channel);
        });
      }
      return listening;
    };
    state.unlisten = (channel) => {
      if (!state.channels.delete(channel) || state.dead) return;
      client.query(sql.unlisten(channel)).catch(() => {});
    };
    state.close = async () => {
      if (state.closed) return;
      state.closed = true;
      state.dead = true;
      client.removeListener?.("notification", onNotification);
      client.removeListener?.("end", onEnd);
      if (own) {
        if (typeof client.release === "function") client.release(true); // destroyed: the pool never hands out a LISTENing connection
        else await client.end?.();
        client.removeListener?.("error", onError);
      } else {
        for (const channel of state.channels.keys()) await client.query(sql.unlisten(channel)).catch(() => {});
        client.removeListener?.("error", onError);
      }
    };
    return state;
  }

  // Resolves once the store's connection LISTENs on `channel` (the waiters' by default), opening
  // it if needed; answers false when there is nothing to LISTEN on.
  let opening = null;
  async function ensureListener(channel = sql.wakeChannel) {
    idle.cancel();
    if (poolEnded()) throw new LockStoreClosedError("databaseLockStore: the pool was ended");
    if (!listener || listener.dead) {
      if (!opening) {
        opening = openListener().finally(() => {
          opening = null;
        });
      }
      const opened = await opening;
      if (opened && (!listener || listener.dead) && !opened.dead) listener = opened;
    }
    if (!listener) return false;
    const state = listener;
    try {
      await state.listen(channel);
    } catch (error) {
      // The connection is of no use: the next caller opens another.
      if (listener === state && state.own) {
        listener = null;
        await state.close().catch(() => {});
      }
      throw error;
    }
    return true;
  }

  const watching = pgWatching(sql, io, {
    async listen() {
      if (!(await ensureListener(sql.watchChannel))) {
        throw new TypeError("databaseLockStore: watch needs a connection to LISTEN on — a pg Pool or Client, or options.listen");
      }
    },
    quiet() {
      if (!listener || listener.dead) return;
      if (waiting.size === 0 && listener.own) idle.arm();
      else listener.unlisten(sql.watchChannel);
    },
    poolEnded,
    databaseClosed,
    isPool: pool,
  });

  function schedulePoll(entry) {
    entry.pollTimer = setTimeout(async () => {
      if (entry.state !== "waiting") return;
      if (poolEnded()) return databaseClosed();
      await ensureListener().catch(() => {});
      await tick(entry.key, entry.owner).catch(() => {});
      if (entry.state === "waiting") schedulePoll(entry);
    }, entry.lookEveryMs);
  }

  async function leave(entry) {
    if (entry.state !== "waiting") return;
    // While the enqueue is in flight there is no row to leave yet, and the row it then writes
    // could be handed the key after the caller was answered no: leave once it has answered.
    if (entry.enqueuing) {
      entry.leaveWhenEnqueued = true;
      return;
    }
    if (poolEnded()) return databaseClosed();
    entry.state = "leaving";
    clearTimeout(entry.pollTimer);
    try {
      const row = await io.row(sql.leave, [entry.key, entry.owner]);
      const granted = row !== null && truthy(row.granted);
      entry.state = "waiting"; // so that settle() below is the one that finishes it
      settle(entry, granted && !entry.withdrawn ? grantOf(row.fence, row.waited_ms) : false);
    } catch (error) {
      entry.state = "waiting";
      fail(entry, error);
    }
  }

  // acquireOrWait and acquireSharedOrWait: `share` is null, or { weight, limit }; `metadata`
  // (checked; null: none) travels with the waiter's row and becomes its hold's.
  async function takeOrWait(key, owner, ttlMs, share, waitMs, pollMs, metadata) {
    if (!Number.isInteger(waitMs) || waitMs < 0 || waitMs > MAX_WAIT_MS) {
      throw new RangeError(`databaseLockStore: waitMs must be a whole number of ms in 0..${MAX_WAIT_MS}, got ${waitMs}`);
    }
    if (!Number.isInteger(pollMs) || pollMs < 1 || pollMs > MAX_WAIT_MS) {
      throw new RangeError(`databaseLockStore: pollMs must be a whole number of ms in 1..${MAX_WAIT_MS}, got ${pollMs}`);
    }
    if (entriesOf(key)?.has(owner)) {
      throw new Error(`databaseLockStore: ${owner} is already waiting for this key`);
    }
    // Listening before joining the queue, so no grant's notification can come too early.
    await ensureListener();
    let entry;
    const answer = new Promise((resolve, reject) => {
      entry = { key, owner, lookEveryMs: Math.max(pollMs, safetyNetMs), state: "waiting", withdrawn: false, resolve, reject };
    });
    // The deadline timer can settle (or fail) `answer` while the enqueue below is still in
    // flight, before the caller holds `answer`: marked handled so that an early failure is not
    // an unhandled rejection (the caller still sees it when it awaits).
    answer.catch(() => {});
    let entries = waiting.get(key);
    if (!entries) waiting.set(key, (entries = new Map()));
    entries.set(owner, entry);
    entry.deadlineTimer = setTimeout(() => leave(entry), waitMs);
    entry.enqueuing = true;
    let row;
    try {
      row = share === null
        ? await io.row(sql.enqueue, [key, owner, ttlMs, waitMs, metadata])
        : (await io.row(sql.acquireSharedWait, [key, owner, ttlMs, share.weight, share.limit, metadata, waitMs]))?.r;
    } catch (error) {
      entry.enqueuing = false;
      // Whether or not the enqueue committed, the caller neither holds nor waits afterwards.
      await release(key, owner).catch(() => {});
      fail(entry, error);
      return answer;
    }
    entry.enqueuing = false;
    if (entry.withdrawn) {
      // Withdrawn while the enqueue was in flight (its release may have come first): whatever
      // the enqueue made goes too.
      await release(key, owner).catch(() => {});
      return answer;
    }
    if (row?.fence !== null && row?.fence !== undefined) {
      try {
        settle(entry, grantOf(row.fence, 0));
      } catch (error) {
        await release(key, owner).catch(() => {});
        fail(entry, error);
      }
      return answer;
    }
    // A limit mismatch is answered at once, never queued; so is a shared request that could
    // not queue (its owner already holds the key).
    if (row?.held_limit !== null && row?.held_limit !== undefined) {
      settle(entry, { heldLimit: Number(row.held_limit) });
      return answer;
    }
    if (share !== null && row?.queued === false) {
      settle(entry, false);
      return answer;
    }
    if (entry.state === "waiting") {
      if (entry.leaveWhenEnqueued) {
        leave(entry);
        return answer;
      }
      schedulePoll(entry);
      const remaining = row?.remaining === null || row?.remaining === undefined ? null : Number(row.remaining);
      // No holder, or an expired one: nobody is going to release — hand over now.
      if (remaining === null || remaining <= 0) tick(key, owner).catch(() => {});
      else expireAfter(key, remaining);
    }
    return answer;
  }

  return {
    /**
     * Takes the key, or queues for it and waits up to waitMs for the store to hand it over.
     * Answers { fence, waitedMs } or false (the wait is spent and the caller is not queued).
     * `metadata` (optional) is the hold's, whether taken now or handed over later.
     */
    async acquireOrWait(key, owner, ttlMs, waitMs, pollMs, metadata) {
      check.key(key);
      check.owner(owner);
      check.ttl(ttlMs);
      const checked = metadataOf(metadata);
      return takeOrWait(key, owner, ttlMs, null, waitMs, pollMs, checked);
    },

    /**
     * acquireShared, or the back of the key's one queue (exclusive and shared waiters alike)
     * for up to waitMs. Answers { fence, waitedMs }, false (the wait is spent, no longer
     * queued), or { heldLimit } at once when the live holds are under another limit.
     */
    async acquireSharedOrWait(key, owner, ttlMs, weight, limit, waitMs, pollMs, metadata) {
      check.key(key);
      check.owner(owner);
      check.ttl(ttlMs);
      checkShare(weight, limit);
      const checked = metadataOf(metadata);
      return takeOrWait(key, owner, ttlMs, { weight, limit }, waitMs, pollMs, checked);
    },

    /**
     * `owner` stops waiting for `key`: it leaves the queue, a grant it got is released (and handed
     * to the next waiter), and its pending acquireOrWait answers false.
     */
    async withdraw(key, owner) {
      check.key(key);
      check.owner(owner);
      const entry = entriesOf(key)?.get(owner);
      if (entry) {
        entry.withdrawn = true;
        if (entry.state === "waiting") {
          entry.state = "withdrawing";
          clearTimeout(entry.pollTimer);
          clearTimeout(entry.deadlineTimer);
        }
      }
      try {
        await release(key, owner);
      } finally {
        if (entry && entry.state === "withdrawing") {
          entry.state = "waiting";
          settle(entry, false);
        }
      }
    },

    /**
     * Stops waiting: pending acquireOrWait calls leave their queues (answering a grant they got
     * before leaving, else false) and the LISTEN connection is closed (a pool's connection is
     * destroyed, a single client only stops listening). The store stays usable; a later
     * acquireOrWait listens again.
     */
    async close() {
      const pending = [];
      for (const entries of waiting.values()) for (const entry of entries.values()) pending.push(leave(entry));
      await Promise.all(pending);
      await watching.stopAll();
      await stopListening();
    },

    /**
     * Pushes every change of `key`'s exclusive holder that a store operation makes, in commit
     * order: a grant as `{ fence, held: true, metadata, remainingMs }`, an end (release,
     * forceRelease, withdraw of a handed key) as `{ fence, held: false }`, and null when reports
     * may have been missed (the LISTEN connection was lost): look again. Expiry, extend and
     * shared holds are not reported; no report carries an owner. Resolves, once the LISTEN is
     * live and the key is registered, to stop(), which ends the reports at once and unregisters
     * the key (resolving when done; idempotent).
     */
    watch(key, onChange) {
      return watching.watch(key, onChange);
    },

    /** How many acquireOrWait calls of this store are waiting, and whether it is listening. */
    get waitingCount() {
      let count = 0;
      for (const entries of waiting.values()) count += entries.size;
      return count;
    },
    get listening() {
      return listener !== null && !listener.dead;
    },
    /** The LISTEN connection's client, if any (for tests and diagnostics). */
    get listenClient() {
      return listener?.client ?? null;
    },
  };
}
