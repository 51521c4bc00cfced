// When could the hold COMMAND runs under end at the latest-known-safe moment? The store that
// keel-lock is given is this wrapper around the real one (the LockStore seam is public): it
// passes every call through and notes, for each key, when the request that granted or extended
// a hold was sent. The store starts the hold's TTL when it receives the request — no earlier —
// so `sent + ttl` is never later than the hold's end in the store. A grant after a wait in the
// store's queue starts its TTL at the hand-over, at least `waitedMs` after the request was sent.

const GRANTING = new Set(["acquire", "acquireShared", "acquireOrWait", "acquireSharedOrWait"]);

/** `{ store, deadline(key), onChange(key, fn) }`: the wrapped store and what it has noted. */
export function trackDeadlines(store) {
  const deadlines = new Map();
  const listeners = new Map();
  const note = (key, deadline) => {
    deadlines.set(key, deadline);
    listeners.get(key)?.(deadline);
  };
  const wrapped = new Proxy(store, {
    get(target, property, receiver) {
      const value = Reflect.get(target, property, receiver);
      if (typeof value !== "function") return value;
      if (GRANTING.has(property)) {
        return async function (key, owner, ttlMs, ...rest) {
          const sent = performance.now();
          const grant = await value.call(target, key, owner, ttlMs, ...rest);
          // A grant is `true` or carries a fence; `false` and `{ heldLimit }` are refusals.
          if (grant === true || (grant && typeof grant === "object" && "fence" in grant)) {
            note(key, sent + (Number(grant.waitedMs) || 0) + ttlMs);
          }
          return grant;
        };
      }
      if (property === "extend") {
        return async function (key, owner, ttlMs, ...rest) {
          const sent = performance.now();
          const extended = await value.call(target, key, owner, ttlMs, ...rest);
          if (extended === true) note(key, sent + ttlMs);
          return extended;
        };
      }
      return value.bind(target);
    },
  });
  return {
    store: wrapped,
    deadline: (key) => deadlines.get(key) ?? null,
    onChange(key, fn) {
      if (fn) listeners.set(key, fn);
      else listeners.delete(key);
    },
  };
}
