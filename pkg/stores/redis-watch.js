// keel-lock/redis: watch(key, onChange) — a key's exclusive holder changes, pushed by pub/sub
// (every client but @upstash/redis, which has none). While a key's watch set names a store
// (WATCH_SCRIPT), the scripts that grant or end an exclusive hold publish it on the key's watch
// channel; this side keeps the store's entry in that set alive, subscribes on the store's one
// pub/sub connection (redis-waiting.js owns it) and hands each report to the key's watchers.
// How it works: stores/README.md, "Watching a key (Redis)".

import { IDLE_CLOSE_MS, LockStoreClosedError, unrefTimer } from "./args.js";
import { WATCH_SCRIPT, WATCH_SHA } from "./redis-scripts.js";

/**
 * How long a store's entry in a key's watch set lasts unless renewed, in ms: a store that dies
 * without stopping leaves the key published on for at most this long.
 */
export const WATCH_LEASE_MS = 30_000;
// How often a watching store renews its entries: two renewals may fail before one lapses.
const RENEW_EVERY_MS = WATCH_LEASE_MS / 3;

/**
 * What a message on a watch channel reports: `+fence ttlMs` (and ` metadata`) a grant, `-fence`
 * an end; null for anything else.
 */
export function watchReport(text) {
  text = String(text);
  const fenceOf = (digits) => (/^[1-9][0-9]{0,15}$/.test(digits) && Number.isSafeInteger(Number(digits)) ? Number(digits) : null);
  if (text[0] === "-") {
    const fence = fenceOf(text.slice(1));
    return fence === null ? null : { fence, held: false };
  }
  if (text[0] !== "+") return null;
  const space = text.indexOf(" ");
  if (space === -1) return null;
  const after = text.indexOf(" ", space + 1);
  const fence = fenceOf(text.slice(1, space));
  const ms = text.slice(space + 1, after === -1 ? undefined : after);
  if (fence === null || !/^[0-9]{1,10}$/.test(ms)) return null;
  return { fence, held: true, metadata: after === -1 ? null : text.slice(after + 1), remainingMs: Number(ms) };
}

/**
 * The store's watch(key, onChange). `pubsub` is the waiting side's connection: `open()` resolves
 * to the subscribed connection (opened if need be), `idle()` lets it close once nothing uses it,
 * `closed()` tells whether the user closed their client, `ended()` closes everything when they
 * did (for a client that says nothing when it closes, a look every IDLE_CLOSE_MS while anything
 * is watched finds it).
 */
export function redisWatching({ lockKeys, runScript, check, pubsub }) {
  // This store's name in every watch set: random, so two stores never share an entry.
  const id = Array.from(crypto.getRandomValues(new Uint8Array(12)), (b) => b.toString(16).padStart(2, "0")).join("");
  const entries = new Map(); // watch name → { names, listeners, ready, subscriber }
  const leaving = new Map(); // watch name → a key's entry still leaving Redis
  let renewTimer = null;
  let closedTimer = null;

  function lookForClose() {
    if (closedTimer !== null || entries.size === 0) return;
    closedTimer = unrefTimer(() => {
      closedTimer = null;
      if (entries.size === 0) return;
      if (pubsub.closed()) pubsub.ended();
      else lookForClose();
    }, IDLE_CLOSE_MS);
  }

  // One report to one watcher: a copy of its own, and an error it throws is its own (thrown
  // again outside the message handler, which it must not break).
  function tell(listener, change) {
    if (!listener.live) return;
    try {
      listener.onChange(change === null ? null : { ...change });
    } catch (error) {
      queueMicrotask(() => {
        throw error;
      });
    }
  }

  function deliver(entry, text) {
    const change = watchReport(text);
    if (change === null) return;
    for (const listener of [...entry.listeners]) tell(listener, change);
  }

  // Subscribed first, then in the watch set: from the script's answer on, every change is
  // published and this connection is there to hear it. A key this store just stopped watching
  // has left Redis before it is watched again.
  async function start(name, entry) {
    await leaving.get(name);
    const subscriber = await pubsub.open();
    entry.subscriber = subscriber;
    await subscriber.listen(name, (text) => deliver(entry, text));
    await runScript(WATCH_SHA, WATCH_SCRIPT, entry.names.watch, [id, String(WATCH_LEASE_MS)]);
  }

  // Renews every live entry; one whose time had passed (a renewal failed for a whole lease) may
  // have missed changes: its watchers are told to look again.
  function renewSoon() {
    if (renewTimer !== null || entries.size === 0) return;
    renewTimer = unrefTimer(() => {
      renewTimer = null;
      for (const entry of entries.values()) {
        if (!entry.live) continue;
        runScript(WATCH_SHA, WATCH_SCRIPT, entry.names.watch, [id, String(WATCH_LEASE_MS)]).then(
          (reply) => {
            if (Number(reply) !== 1) for (const listener of [...entry.listeners]) tell(listener, null);
          },
          () => {}, // the next renewal tries again
        );
      }
      renewSoon();
    }, RENEW_EVERY_MS);
  }

  // Drops `listener`; the last one of a key takes the store's entry out of Redis.
  function drop(name, entry, listener) {
    listener.live = false;
    if (!entry.listeners.delete(listener) || entry.listeners.size > 0) return Promise.resolve();
    if (entries.get(name) === entry) entries.delete(name);
    if (entries.size === 0) {
      clearTimeout(renewTimer);
      renewTimer = null;
    }
    entry.live = false;
    const left = (async () => {
      try {
        await entry.ready;
      } catch {
        // never in the set: there is nothing more to leave than the subscription, if made
      }
      await Promise.allSettled([
        entry.subscriber?.unlisten(name),
        pubsub.closed() ? null : runScript(WATCH_SHA, WATCH_SCRIPT, entry.names.watch, [id, "0"]),
      ]);
    })();
    leaving.set(name, left);
    return left.finally(() => {
      if (leaving.get(name) === left) leaving.delete(name);
      pubsub.idle();
    });
  }

  return {
    /** Whether anything is watched (or about to be): the pub/sub connection stays open. */
    get active() {
      return entries.size > 0;
    },

    /**
     * Reports every change of `key`'s exclusive holder made by a store operation, once and in
     * Redis's order, to `onChange`: `{ fence, held: true, metadata, remainingMs }` for a grant,
     * `{ fence, held: false }` for an end, `null` when reports may have been missed. Resolves,
     * once subscribed, to `stop()`.
     */
    async watch(key, onChange) {
      check.key(key);
      if (typeof onChange !== "function") {
        throw new TypeError(`redisLockStore.watch: onChange must be a function, got ${onChange === null ? "null" : typeof onChange}`);
      }
      if (pubsub.closed()) throw new LockStoreClosedError("redisLockStore: the Redis client is closed");
      const names = lockKeys(key);
      const name = names.watch[2];
      let entry = entries.get(name);
      if (entry === undefined) {
        entry = { names, listeners: new Set(), ready: null, subscriber: null, live: false };
        entries.set(name, entry);
        entry.ready = start(name, entry);
      }
      const listener = { onChange, live: false };
      entry.listeners.add(listener);
      try {
        await entry.ready;
      } catch (error) {
        drop(name, entry, listener).catch(() => {});
        throw error;
      }
      // Ended meanwhile (the client closed, or the store): nothing will be reported.
      if (!entry.listeners.has(listener)) throw new LockStoreClosedError(`redisLockStore: watching ${JSON.stringify(key)} ended before it began`);
      entry.live = true;
      listener.live = true;
      renewSoon();
      lookForClose();
      let stopped = null;
      return () => (stopped ??= drop(name, entry, listener));
    },

    /**
     * The pub/sub connection came back after a drop: once it is subscribed again, every watcher
     * is told that reports may have been missed.
     */
    async reconnected() {
      if (entries.size === 0) return;
      try {
        await Promise.all([...new Set([...entries.values()].map((entry) => entry.subscriber))].map((s) => s?.barrier()));
      } catch {
        return; // down again: its next "ready" tells
      }
      for (const entry of entries.values()) for (const listener of [...entry.listeners]) tell(listener, null);
    },

    /** The user closed their client: every watch ends here, with nothing sent. */
    end() {
      for (const entry of entries.values()) {
        entry.live = false;
        for (const listener of entry.listeners) listener.live = false;
        entry.listeners.clear();
      }
      entries.clear();
      clearTimeout(renewTimer);
      renewTimer = null;
    },

    /** The store is closed: every watch stops and leaves Redis. */
    async stopAll() {
      const all = [];
      for (const [name, entry] of [...entries]) for (const listener of [...entry.listeners]) all.push(drop(name, entry, listener));
      await Promise.allSettled(all);
    },
  };
}
