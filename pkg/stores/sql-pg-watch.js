// keel-lock/sql: watch(key, onChange) on PostgreSQL — pushed changes of a key's exclusive holder.
// The reports are made in SQL (sql/postgres-functions.js: the lock table's triggers call
// <table>_watch_report when a statement changes the holder of a key whose lock row says someone
// watches it); this side registers the store's watches in the database (a lease per key,
// renewed), listens on the watch channel (the store's one LISTEN connection, which
// sql-pg-waiting.js keeps) and hands each report to the key's watchers.

import { argumentChecks, IDLE_CLOSE_MS, MAX_TTL_MS } from "./args.js";
import { toFence } from "./sql-drivers.js";

const check = argumentChecks("databaseLockStore");

/**
 * How long a store's watch of a key lasts in the database unless renewed, in ms: the statements
 * of a watcher that died stop reporting (and paying for NOTIFY) at most this long after its last
 * renewal.
 */
export const WATCH_LEASE_MS = 30_000;
/** A watching store renews its leases three times per lease. */
const RENEW_EVERY_MS = WATCH_LEASE_MS / 3;
/** The pause between attempts to listen again after the LISTEN connection was lost. */
const RELISTEN_EVERY_MS = 500;

// A watcher id for the watchers table: random, so two stores (or processes) never share one.
function watcherId() {
  const bytes = crypto.getRandomValues(new Uint8Array(12));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * Watching on PostgreSQL, for pgWaiting, which owns the LISTEN connection and passes:
 *   listen()          resolves once the connection LISTENs on the watch channel; rejects if
 *                     there is none to be had
 *   quiet()           the last watch stopped: the channel is no longer needed
 *   poolEnded()       whether the user has ended their pool
 *   databaseClosed()  the user ended their pool: fail every wait, stop every watch
 *   isPool            whether the user's handle is a pool, which is ended without an event
 *                     and waits for the connection the store holds — so the store looks
 *
 * Per key, one row in the watchers table for the whole store, however many watches it has of
 * the key; a change is delivered to each of them.
 */
export function pgWatching(sql, io, hooks) {
  const id = watcherId();
  const keys = new Map(); // key -> { key, entries: Set, registered }
  let count = 0; // watches not stopped
  // Registrations, renewals and their ends run one at a time, in the order asked for: a renewal
  // never brings back a key whose watch ended after the renewal was asked for.
  let serial = Promise.resolve();
  const inTurn = (fn) => {
    const run = serial.then(fn);
    serial = run.catch(() => {});
    return run;
  };
  let renewTimer = null;
  let endedTimer = null;
  let relistening = null;
  let lostAgain = false;

  // Each watch gets its own copy; an exception of onChange is not the store's to handle: it
  // surfaces as an uncaught exception, as one thrown by an event listener does.
  function deliver(state, change) {
    for (const entry of [...state.entries]) {
      if (entry.stopped) continue;
      try {
        entry.onChange(change === null ? null : { ...change });
      } catch (error) {
        queueMicrotask(() => {
          throw error;
        });
      }
    }
  }

  const everyKey = (change) => {
    for (const state of keys.values()) deliver(state, change);
  };

  // Brings the database in line with the key's watches: registered while it has any.
  function reconcile(state) {
    return inTurn(async () => {
      if (state.entries.size > 0 && !state.registered) {
        await io.row(sql.watch, [[state.key], id, WATCH_LEASE_MS]);
        state.registered = true;
      } else if (state.entries.size === 0 && state.registered) {
        state.registered = false; // if the statement fails, the lease lapses by itself
        await io.row(sql.unwatch, [state.key, id]);
      }
    }).finally(() => {
      if (state.entries.size === 0 && !state.registered && keys.get(state.key) === state) keys.delete(state.key);
    });
  }

  // One statement renews every key this store watches. A key whose lease had lapsed (the
  // database was out of reach for a lease) or whose row lost it may have had changes go
  // unreported: its watchers look again.
  function renew() {
    return inTurn(async () => {
      const registered = [...keys.values()].filter((state) => state.registered).map((state) => state.key);
      if (registered.length === 0) return;
      const row = await io.row(sql.watch, [registered, id, WATCH_LEASE_MS]);
      for (const key of Array.isArray(row?.lapsed) ? row.lapsed : []) {
        const state = keys.get(key);
        if (state) deliver(state, null);
      }
    });
  }

  function startTimers() {
    if (renewTimer === null) {
      renewTimer = setInterval(() => renew().catch(() => {}), RENEW_EVERY_MS);
      renewTimer.unref?.();
    }
    // A pool says nothing when it is ended, and waits for the connection the store holds: so
    // the store looks, often enough that the process ends promptly after `pool.end()`.
    if (endedTimer === null && hooks.isPool) {
      endedTimer = setInterval(() => {
        if (hooks.poolEnded()) hooks.databaseClosed();
      }, IDLE_CLOSE_MS);
      endedTimer.unref?.();
    }
  }

  function stopTimers() {
    clearInterval(renewTimer);
    clearInterval(endedTimer);
    renewTimer = null;
    endedTimer = null;
  }

  function stop(entry) {
    if (entry.stopping) return entry.stopping;
    entry.stopped = true;
    if (entry.state.entries.delete(entry)) count--;
    entry.stopping = reconcile(entry.state)
      .catch(() => {})
      .then(() => {
        if (count === 0) {
          stopTimers();
          hooks.quiet();
        }
      });
    return entry.stopping;
  }

  // The LISTEN connection was lost: listen again (the renewals keep the leases meanwhile), then
  // every watch looks again — reports sent while nobody listened are gone.
  function lost() {
    if (count === 0) return;
    if (relistening) {
      lostAgain = true;
      return;
    }
    relistening = (async () => {
      for (;;) {
        if (count === 0) return;
        if (hooks.poolEnded()) return hooks.databaseClosed();
        try {
          await hooks.listen();
          break;
        } catch {
          await new Promise((resolve) => setTimeout(resolve, RELISTEN_EVERY_MS));
        }
      }
      await renew().catch(() => {});
      everyKey(null);
    })().finally(() => {
      relistening = null;
      if (lostAgain) {
        lostAgain = false;
        lost();
      }
    });
  }

  // The user ended their pool or client: each watch is told to look again (where it will find
  // the database closed) and ends; its lease lapses in the database.
  function closed() {
    everyKey(null);
    for (const state of keys.values()) {
      for (const entry of state.entries) {
        entry.stopped = true;
        entry.stopping = Promise.resolve();
      }
      state.entries.clear();
      state.registered = false;
    }
    keys.clear();
    count = 0;
    stopTimers();
  }

  // A notification on the watch channel: JSON [key, ended fence or null, granted fence or null,
  // the grant's metadata, its ms left]; [key] or [""]: that key's, or every key's, watchers look
  // again (see sql/postgres-functions.js, watch_report).
  function onNotification(payload) {
    let report;
    try {
      report = JSON.parse(payload);
    } catch {
      return;
    }
    if (!Array.isArray(report) || typeof report[0] !== "string") return;
    const [key, ended, granted, metadata, remainingMs] = report;
    if (key === "") return everyKey(null);
    const state = keys.get(key);
    if (!state) return;
    const changes = [];
    try {
      if (ended !== null && ended !== undefined) changes.push({ fence: toFence(ended), held: false });
      if (granted !== null && granted !== undefined) {
        const ms = Math.floor(Number(remainingMs));
        changes.push({
          fence: toFence(granted),
          held: true,
          metadata: typeof metadata === "string" ? metadata : null,
          remainingMs: Number.isFinite(ms) ? Math.min(Math.max(ms, 0), MAX_TTL_MS) : 0,
        });
      }
    } catch {
      changes.length = 0; // a fence out of range: the report cannot be trusted
    }
    if (changes.length === 0) return deliver(state, null);
    for (const change of changes) deliver(state, change);
  }

  return {
    onNotification,
    lost,
    closed,
    /** Whether any watch is on (the LISTEN connection is needed for it). */
    get active() {
      return count > 0;
    },
    /** Every watch stops, as by its stop(). */
    async stopAll() {
      const entries = [];
      for (const state of keys.values()) entries.push(...state.entries);
      await Promise.all(entries.map(stop));
    },
    /**
     * Reports every change of `key`'s exclusive holder that a store operation makes, in commit
     * order, until the answered stop() is called: `{ fence, held: true, metadata, remainingMs }`
     * for a grant, `{ fence, held: false }` for an end, null for "look again". Resolves once
     * the LISTEN is live and the key registered.
     */
    async watch(key, onChange) {
      check.key(key);
      if (typeof onChange !== "function") {
        throw new TypeError(`databaseLockStore: onChange must be a function, got ${onChange === null ? "null" : typeof onChange}`);
      }
      await hooks.listen();
      let state = keys.get(key);
      if (!state) keys.set(key, (state = { key, entries: new Set(), registered: false }));
      const entry = { state, onChange, stopped: false, stopping: null };
      state.entries.add(entry);
      count++;
      startTimers();
      try {
        await reconcile(state);
      } catch (error) {
        await stop(entry);
        throw error;
      }
      return () => stop(entry);
    },
  };
}
