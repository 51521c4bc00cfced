// The fault suite's broken stores: a correct store's methods, wrapped to break one guarantee
// each, for the runs that must catch them. Imported by the OS-process clients (lib/stores.js)
// and bundled into the Worker (lock-worker.js), so it imports nothing.

const FOREVER = 2 ** 31 - 1;
// A read lock's limit on the store seam: no limit.
const READ_LIMIT = 4294967295;
// What a store may have: the exclusive calls, the shared holds', the one-step set, and what
// observe reads (watch where the store pushes, inspect where it is polled).
export const STORE_METHODS = [
  "acquire", "release", "extend", "isLocked", "remainingTime", "acquireOrWait", "withdraw", "forceRelease",
  "acquireShared", "acquireSharedOrWait", "acquireMany", "inspect", "watch",
];

/**
 * `store`'s methods, bound, as they are ("correct") or broken by `variant`:
 *   owner-blind    release frees the key whoever holds it (forceRelease)
 *   no-expiry      every lease is taken and extended for 2^31 - 1 ms
 *   fence-reuse    fences counted by this wrapper (other processes and isolates reuse them);
 *                  with `perKeyFences`, per key and forgotten on release (one process's store)
 *   limit-blind    permits taken under a limit one larger than the caller's
 *   writer-shares  a writer taken as one more reader
 *   partial-set    a one-step set that takes its first key only and answers a grant for all
 *   two-leaders    a third of refused (or queued) acquires told they hold the key, at once
 * `methods` are the ones kept (STORE_METHODS by default); `forceRelease` frees a key whoever
 * holds it (the store's own, by default); `random` draws two-leaders' lies.
 */
export function brokenStore(store, variant, { methods = STORE_METHODS, forceRelease, perKeyFences = false, random = Math.random } = {}) {
  const m = {};
  for (const name of methods) if (typeof store[name] === "function") m[name] = store[name].bind(store);
  const freeAnyway = forceRelease ?? m.forceRelease;
  switch (variant) {
    case "correct":
      return m;
    case "owner-blind":
      return { ...m, release: (key) => freeAnyway(key) };
    case "no-expiry":
      return {
        ...m,
        acquire: (key, owner) => m.acquire(key, owner, FOREVER),
        extend: (key, owner) => m.extend(key, owner, FOREVER),
        ...(m.acquireOrWait && {
          acquireOrWait: (key, owner, _ttl, wait, poll) => m.acquireOrWait(key, owner, FOREVER, wait, poll),
        }),
      };
    case "fence-reuse": {
      const { acquireOrWait: _waits, withdraw: _withdraw, ...plain } = m;
      if (perKeyFences) {
        const counts = new Map();
        return {
          ...plain,
          async acquire(key, owner, ttl) {
            const granted = await m.acquire(key, owner, ttl);
            if (!granted) return granted;
            const fence = (counts.get(key) ?? 0) + 1;
            counts.set(key, fence);
            return { fence };
          },
          async release(key, owner) {
            const released = await m.release(key, owner);
            if (released === true) counts.delete(key);
            return released;
          },
        };
      }
      let last = 0;
      return {
        ...plain,
        async acquire(key, owner, ttl) {
          const granted = await m.acquire(key, owner, ttl);
          return granted ? { fence: ++last } : granted;
        },
      };
    }
    case "limit-blind":
      return {
        ...m,
        acquireShared: (key, owner, ttl, permits, limit, ...rest) => m.acquireShared(key, owner, ttl, permits, limit + 1, ...rest),
        ...(m.acquireSharedOrWait && {
          acquireSharedOrWait: (key, owner, ttl, permits, limit, ...rest) => m.acquireSharedOrWait(key, owner, ttl, permits, limit + 1, ...rest),
        }),
      };
    case "writer-shares": {
      // Writers ask again rather than queue: their acquire is a reader's, answered as acquire's.
      const { acquireOrWait: _waits, ...plain } = m;
      return {
        ...plain,
        async acquire(key, owner, ttl) {
          const granted = await m.acquireShared(key, owner, ttl, 1, READ_LIMIT);
          return granted === true || (granted !== null && typeof granted === "object" && typeof granted.fence === "number") ? granted : false;
        },
      };
    }
    case "partial-set":
      // Replaces a store's acquireMany, or gives one to a store that takes sets a key at a
      // time: either way the set is taken in one step, which holds its first key only.
      return {
        ...m,
        async acquireMany(keys, owners, ttl) {
          const first = await m.acquire(keys[0], owners[0], ttl);
          if (!first) return false;
          const fence = typeof first === "object" ? first.fence : undefined;
          return keys.map((_, i) => (fence === undefined ? true : { fence: fence + i }));
        },
      };
    case "two-leaders": {
      const fake = (waited) => (random() < 1 / 3 ? { fence: 1, ...(waited && { waitedMs: 0 }) } : null);
      return {
        ...m,
        async acquire(key, owner, ttl) {
          const granted = await m.acquire(key, owner, ttl);
          return granted || (fake(false) ?? granted);
        },
        ...(m.acquireOrWait && {
          async acquireOrWait(key, owner, ttl, wait, poll) {
            const now = await m.acquire(key, owner, ttl);
            if (now) return now;
            return fake(true) ?? m.acquireOrWait(key, owner, ttl, wait, poll);
          },
        }),
      };
    }
    default:
      throw new Error(`unknown variant ${variant}`);
  }
}
