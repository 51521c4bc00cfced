// Argument checks shared by the stores in this folder (keel-lock/redis, keel-lock/sql). The core
// validates keys, owners and TTLs before it calls a store; these checks guard the stores when a
// user calls them directly, with the same limits the core enforces.

import { MAX_KEYS, byCodePoint } from "./key-set.generated.js";

/** Most keys one acquireMany takes (the core's limit for a multi-key lock), and their order. */
export { MAX_KEYS, byCodePoint };

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

/**
 * acquireMany's arguments, as the core sends them (`who` names the method in messages): 1 to
 * MAX_KEYS keys, distinct and sorted by code point, one distinct owner per key, a TTL as
 * acquire takes it. A count out of range is a RangeError, anything else wrong a TypeError.
 */
export function checkKeySet(who, keys, owners, ttlMs) {
  const check = argumentChecks(who);
  if (!Array.isArray(keys)) throw new TypeError(`${who}: keys must be an array, got ${typeof keys}`);
  if (keys.length < 1 || keys.length > MAX_KEYS) {
    throw new RangeError(`${who}: keys must hold 1..${MAX_KEYS} keys, got ${keys.length}`);
  }
  if (!Array.isArray(owners)) throw new TypeError(`${who}: owners must be an array, got ${typeof owners}`);
  if (owners.length !== keys.length) {
    throw new RangeError(`${who}: owners must hold one owner per key (${keys.length}), got ${owners.length}`);
  }
  for (let i = 0; i < keys.length; i++) {
    check.key(keys[i]);
    check.owner(owners[i]);
    if (i > 0 && byCodePoint(keys[i - 1], keys[i]) >= 0) {
      throw new TypeError(
        `${who}: keys must be distinct and sorted by code point; ${JSON.stringify(keys[i])} follows ${JSON.stringify(keys[i - 1])}`,
      );
    }
  }
  if (new Set(owners).size !== owners.length) throw new TypeError(`${who}: owners must be distinct`);
  check.ttl(ttlMs);
}

/**
 * A store's waiting call was cut short because the client or pool it was given was closed
 * (`quit()`, `disconnect()`, `end()`): the store can no longer reach the server on its behalf.
 */
export class LockStoreClosedError extends Error {
  constructor(message) {
    super(message);
    this.name = "LockStoreClosedError";
  }
}

/** Default interval of a waiting store's safety-net look, in ms (see `safetyNetMs`). */
export const SAFETY_NET_MS = 1_000;

/**
 * How long a waiting store keeps its own connection (Redis subscriber, Postgres listener) open
 * after its last waiter left, in ms: a burst of waits shares one connection, and an idle store
 * holds no connection that would keep a finished process alive.
 */
export const IDLE_CLOSE_MS = 250;

/** The `safetyNetMs` option of `who`: a whole number of ms in 1..MAX_TTL_MS, default SAFETY_NET_MS. */
export function safetyNetOption(who, value) {
  if (value === undefined) return SAFETY_NET_MS;
  if (!Number.isInteger(value) || value < 1 || value > MAX_TTL_MS) {
    throw new RangeError(`${who}: safetyNetMs must be a whole number of ms in 1..${MAX_TTL_MS}, got ${value}`);
  }
  return value;
}

/** Runs `fn` once after `ms` on a timer that never keeps the process alive by itself. */
export function unrefTimer(fn, ms) {
  const timer = setTimeout(fn, ms);
  timer?.unref?.();
  return timer;
}

/**
 * Closes a waiting store's own connection once it has been idle for IDLE_CLOSE_MS: `arm()` when
 * the last wait left (again while armed changes nothing), `cancel()` when a wait starts or the
 * connection is closed another way. `close()` runs only if `stillIdle()` says so then.
 */
export function idleCloser(stillIdle, close) {
  let timer = null;
  return {
    arm() {
      if (timer !== null) return;
      timer = unrefTimer(() => {
        timer = null;
        if (stillIdle()) close();
      }, IDLE_CLOSE_MS);
    },
    cancel() {
      clearTimeout(timer);
      timer = null;
    },
  };
}

/**
 * Which kind of handle a store factory was given: `given` when it is one of `kinds`, else (when
 * not given) what `detect()` recognises; a TypeError otherwise. `option` names the option that
 * says it, `expected` what the factory takes, in the message for a handle it does not recognise.
 */
export function kindOption(factory, option, given, kinds, detect, expected) {
  if (given === undefined) {
    const found = detect();
    if (found === null) throw new TypeError(`${factory}: unrecognised ${expected} (or pass options.${option})`);
    return found;
  }
  if (!kinds.includes(given)) throw new TypeError(`${factory}: ${option} must be one of ${kinds.join(", ")}`);
  return given;
}
