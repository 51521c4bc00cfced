// Argument checks shared by the stores in this folder (keel-lock/redis, keel-lock/sql). The core
// validates keys, owners and TTLs before it calls a store; these checks guard the stores when a
// user calls them directly, with the same limits the core enforces.

/** Longest TTL accepted, in ms: 2^31 − 1, the largest delay JS timers support. */
export const MAX_TTL_MS = 2_147_483_647;

/** Largest fence a store may hand out: Number.MAX_SAFE_INTEGER (2^53 − 1), exact in JS, SQL and Lua. */
export const MAX_FENCE = Number.MAX_SAFE_INTEGER;

/** Argument checks that name the store (`who`) in their messages. */
export function argumentChecks(who) {
  return {
    key(key) {
      if (typeof key !== "string" || key.length === 0) {
        throw new TypeError(`${who}: key must be a non-empty string, got ${typeof key}`);
      }
    },
    owner(owner) {
      if (typeof owner !== "string" || owner.length === 0) {
        throw new TypeError(`${who}: owner must be a non-empty string, got ${typeof owner}`);
      }
    },
    ttl(ttlMs) {
      if (!Number.isInteger(ttlMs) || ttlMs < 1 || ttlMs > MAX_TTL_MS) {
        throw new RangeError(`${who}: ttlMs must be a whole number of ms in 1..${MAX_TTL_MS}, got ${ttlMs}`);
      }
    },
  };
}
