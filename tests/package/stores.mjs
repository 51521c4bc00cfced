// Stores the suite runs against: the built-in memory store, and a store written in JS and
// plugged in through setLockStore (the seam the Redis/database stores use).
import { MemoryLockStore } from "keel-lock";

/**
 * A correct LockStore in plain JS: a Map, async methods, expiry by Date.now(). `rows` (key →
 * { owner, expiresAt }) may be shared with a store built on this one.
 */
export function mapLockStore(rows = new Map()) {
  const live = (key) => {
    const row = rows.get(key);
    if (row && row.expiresAt > Date.now()) return row;
    rows.delete(key);
    return undefined;
  };
  return {
    async acquire(key, owner, ttlMs) {
      await null; // answer asynchronously, like a real network store
      if (live(key)) return false;
      rows.set(key, { owner, expiresAt: Date.now() + ttlMs });
      return true;
    },
    async release(key, owner) {
      await null;
      if (live(key)?.owner !== owner) return false;
      rows.delete(key);
      return true;
    },
    async extend(key, owner, ttlMs) {
      await null;
      const row = live(key);
      if (row?.owner !== owner) return false;
      row.expiresAt = Date.now() + ttlMs;
      return true;
    },
    async isLocked(key) {
      return live(key) !== undefined;
    },
    async remainingTime(key) {
      const row = live(key);
      return row ? row.expiresAt - Date.now() : null;
    },
  };
}

/** Wraps a store and records every call, to observe what the core asks of it. */
export function recording(inner) {
  const calls = [];
  const wrap = (name) => (...args) => {
    calls.push({ name, args });
    return inner[name](...args);
  };
  return {
    calls,
    store: {
      acquire: wrap("acquire"),
      release: wrap("release"),
      extend: wrap("extend"),
      isLocked: wrap("isLocked"),
      remainingTime: wrap("remainingTime"),
    },
  };
}

export const STORES = {
  memory: () => new MemoryLockStore(),
  "js (Map, async)": () => mapLockStore(),
};
