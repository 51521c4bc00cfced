// The functions that make handles on the current store, and `inspect(key)` through one.

import { CHECK_KEY_AS_STRING } from "./protocol.js";
import { core, ok, textOf } from "./core.js";
import { BY_FACTORY, boundStore } from "./binding.js";
import { Lock } from "./lock.js";
import { MultiKeyLock, SET_PREFIX } from "./multi.js";
import { MAX_KEYS, byCodePoint } from "./key-set.js";
import { OneStep } from "./one-step.js";

// Checking a key and a TTL is a pure function of each, so what the core accepted is kept and
// `lock()` need not ask again: the keys (a bounded set, emptied when full), and the last TTL
// with the TTL it made of it.
const acceptedKeys = new Set();
const ACCEPTED_KEYS = 4096;
let acceptedTtlMs;
let acceptedTtl = 0;

export function lock(key, ttlMs) {
  if (Array.isArray(key)) return lockKeys(key, ttlMs);
  return handle(key, ttlMs, 0);
}

/** A handle on `key` for `ttlMs`, its holds shared under `limit` (0: a lock), on `store`. */
function handle(key, ttlMs, limit, store = boundStore()) {
  if (typeof key === "string" && (ttlMs === undefined || (typeof ttlMs === "number" && ttlMs === ttlMs))) {
    if (ttlMs === acceptedTtlMs && acceptedKeys.has(key)) return new Lock(BY_FACTORY, key, acceptedTtl, store, 0, limit);
    let ttl = core.checkLock(key, ttlMs === undefined ? NaN : ttlMs, false);
    // A U+FFFD the wasm saw is the key's own when the string has no lone surrogate.
    if (ttl === CHECK_KEY_AS_STRING && typeof key.isWellFormed === "function" && key.isWellFormed()) {
      ttl = core.checkLock(key, ttlMs === undefined ? NaN : ttlMs, true);
    }
    if (ok(ttl) !== CHECK_KEY_AS_STRING) {
      if (acceptedKeys.size >= ACCEPTED_KEYS) acceptedKeys.clear();
      acceptedKeys.add(key);
      acceptedTtlMs = ttlMs;
      acceptedTtl = ttl;
      return new Lock(BY_FACTORY, key, ttl, store, 0, limit);
    }
  }
  // Anything else is judged, and if wrong reported, by the core. A key only its JS string can
  // judge (CHECK_KEY_AS_STRING, where the runtime has no isWellFormed) is good when the core finds no fault.
  const error = core.lockArgumentsError(key, ttlMs);
  if (error !== undefined) throw error;
  const ttl = ok(core.checkLock(key, ttlMs === undefined ? NaN : ttlMs, true));
  return new Lock(BY_FACTORY, key, ttl, store, 0, limit);
}

/** A lock over `keys` (an array) for `ttlMs`: each key checked as `lock(key)` checks it. */
function lockKeys(keys, ttlMs) {
  if (keys.length === 0 || keys.length > MAX_KEYS) {
    throw new RangeError(`lock: a multi-key lock needs 1 to ${MAX_KEYS} distinct keys, got ${keys.length}`);
  }
  const store = boundStore();
  const step = keys.length > 1 && !store.memory && typeof store.object.acquireMany === "function" ? new OneStep(store) : null;
  const bound = step === null ? store : step.binding;
  const locks = Array.from(keys, (key) => handle(key, ttlMs, 0, bound)).sort((a, b) => byCodePoint(a.key, b.key));
  for (let i = 1; i < locks.length; i++) {
    if (locks[i].key === locks[i - 1].key) throw new TypeError(`lock: key "${locks[i].key}" is given twice`);
  }
  return new MultiKeyLock(BY_FACTORY, locks, step, store);
}

/** The largest limit, 2^32 - 1: the limit of read locks. */
const READ_LIMIT = 4294967295;

// The last limit the core accepted: checking one is a pure function of it.
let acceptedLimit = 0;

export function semaphore(key, limit, ttlMs) {
  if (limit !== acceptedLimit) acceptedLimit = ok(core.checkLimit(limit));
  return handle(key, ttlMs, acceptedLimit);
}

export function readLock(key, ttlMs) {
  return handle(key, ttlMs, READ_LIMIT);
}

export function writeLock(key, ttlMs) {
  return lock(key, ttlMs);
}

export function restoreLock(serialized) {
  const store = boundStore();
  if (typeof serialized !== "string") throw core.notSerializedError();
  if (serialized.startsWith(SET_PREFIX)) return restoreSet(serialized);
  const id = ok(core.restore(serialized, store.binding));
  return new Lock(BY_FACTORY, textOf(core.keyOf(id)), ok(core.ttlOf(id)), store, id, ok(core.limitOf(id)));
}

/** `restoreLock` of a multi-key lock's string: every key's hold, in order, checked whole. */
function restoreSet(serialized) {
  const colon = serialized.indexOf(":", SET_PREFIX.length);
  const count = Number(serialized.slice(SET_PREFIX.length, colon));
  const parts = colon < 0 ? [] : serialized.slice(colon + 1).split(",");
  if (!Number.isInteger(count) || count < 1 || count > MAX_KEYS || parts.length !== count) {
    throw new TypeError(`restoreLock: not a serialized keel-lock: a multi-key lock of ${parts.length} parts where it says ${serialized.slice(SET_PREFIX.length, colon)}`);
  }
  const locks = parts.map((part) => restoreLock(part));
  for (let i = 1; i < locks.length; i++) {
    if (byCodePoint(locks[i - 1].key, locks[i].key) >= 0 || locks[i].ttlMs !== locks[0].ttlMs || locks[i].limit !== null) {
      throw new TypeError("restoreLock: not a serialized keel-lock: its keys are out of order, repeated or of mixed terms");
    }
  }
  return new MultiKeyLock(BY_FACTORY, locks);
}

/** Who holds `key` and who waits, on the current store. */
export function inspect(key) {
  try {
    return lock(key).inspect();
  } catch (error) {
    return Promise.reject(error);
  }
}
