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

/**
 * `mapLockStore` with `acquireMany`: every key granted in one step, each with a fence from one
 * counter, or none. `calls` counts each method's calls.
 */
export function mapManyStore(rows = new Map()) {
  const inner = mapLockStore(rows);
  let fence = 0;
  const calls = { acquire: 0, acquireMany: 0, release: 0 };
  const free = (key) => {
    const row = rows.get(key);
    return !(row && row.expiresAt > Date.now());
  };
  return {
    ...inner,
    rows,
    calls,
    async acquire(key, owner, ttlMs) {
      calls.acquire++;
      return (await inner.acquire(key, owner, ttlMs)) && { fence: ++fence };
    },
    async acquireMany(keys, owners, ttlMs) {
      calls.acquireMany++;
      await null;
      if (!keys.every(free)) return false;
      return keys.map((key, i) => {
        rows.set(key, { owner: owners[i], expiresAt: Date.now() + ttlMs });
        return { fence: ++fence };
      });
    },
    async release(key, owner) {
      calls.release++;
      return inner.release(key, owner);
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

/**
 * A correct LockStore with shared holds, in plain JS: a Map of key → { limit, holds } beside
 * `mapLockStore`'s exclusive rows, no queue (the core polls it). For the JS seam's shared path.
 */
export function mapSharedStore() {
  const rows = new Map();
  const base = mapLockStore(rows);
  const shared = new Map();
  const liveHolds = (key) => {
    const entry = shared.get(key);
    if (!entry) return undefined;
    entry.holds = entry.holds.filter((h) => h.expiresAt > Date.now());
    if (entry.holds.length === 0) {
      shared.delete(key);
      return undefined;
    }
    return entry;
  };
  const exclusiveLive = (key) => {
    const row = rows.get(key);
    return row !== undefined && row.expiresAt > Date.now();
  };
  let fence = 0;
  return {
    ...base,
    async acquire(key, owner, ttlMs) {
      await null;
      if (liveHolds(key)) return false;
      return (await base.acquire(key, owner, ttlMs)) ? { fence: ++fence } : false;
    },
    async acquireShared(key, owner, ttlMs, weight, limit) {
      await null;
      if (exclusiveLive(key)) return false;
      const entry = liveHolds(key);
      if (entry && entry.limit !== limit) return { heldLimit: entry.limit };
      const used = entry ? entry.holds.reduce((n, h) => n + h.weight, 0) : 0;
      if (used + weight > limit) return false;
      const holds = entry ? entry.holds : [];
      holds.push({ owner, weight, expiresAt: Date.now() + ttlMs });
      shared.set(key, { limit, holds });
      return { fence: ++fence };
    },
    async release(key, owner) {
      await null;
      const entry = liveHolds(key);
      const at = entry ? entry.holds.findIndex((h) => h.owner === owner) : -1;
      if (at < 0) return base.release(key, owner);
      entry.holds.splice(at, 1);
      return true;
    },
    async extend(key, owner, ttlMs) {
      await null;
      const hold = liveHolds(key)?.holds.find((h) => h.owner === owner);
      if (!hold) return base.extend(key, owner, ttlMs);
      hold.expiresAt = Date.now() + ttlMs;
      return true;
    },
    async isLocked(key) {
      return liveHolds(key) !== undefined || (await base.isLocked(key));
    },
    async remainingTime(key) {
      const entry = liveHolds(key);
      if (!entry) return base.remainingTime(key);
      return Math.max(...entry.holds.map((h) => h.expiresAt)) - Date.now();
    },
  };
}

/**
 * A store that keeps hold metadata and answers `inspect`, in plain JS: rows key → { owner,
 * expiresAt, fence, metadata }, one fence counter; `calls` records each acquire's arguments.
 */
export function mapInspectStore() {
  const rows = new Map();
  const inner = mapLockStore(rows);
  let fence = 0;
  const calls = [];
  const live = (key) => {
    const row = rows.get(key);
    return row && row.expiresAt > Date.now() ? row : undefined;
  };
  return {
    ...inner,
    rows,
    calls,
    async acquire(key, owner, ttlMs, ...rest) {
      calls.push([key, owner, ttlMs, ...rest]);
      await null;
      if (live(key)) return false;
      rows.set(key, { owner, expiresAt: Date.now() + ttlMs, fence: ++fence, metadata: rest[0] ?? null });
      return { fence };
    },
    async inspect(key) {
      const row = live(key);
      // The owner goes along too, where no caller may see it: the face must drop it.
      const holders = row ? [{ metadata: row.metadata, fence: row.fence, remainingMs: row.expiresAt - Date.now(), owner: row.owner }] : [];
      return { holders, waiting: null, owner: row?.owner };
    },
  };
}
