// The floor: keel-lock's memory-store semantics in plain JS, no wasm boundary. Written for this
// benchmark (not a product): a Map of key → { owner, expiresAt }, a fresh random owner token per
// acquire, expired rows count as absent, release/extend only by the live owner, run() =
// acquire → fn → release in a finally, resolving [true, result] or [false, undefined].
// Waiting is a polling loop: try, sleep retryDelay, try again until timeout (keel-lock's
// fallback for stores that cannot hand a key over).
//
// AsyncMapStore + FloorLockAsync: the same lock over a store whose answers are promises (a JS
// store answering from a Map without I/O), for measuring what the async store path costs.
import { randomUUID } from "node:crypto";

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export class FloorStore {
  constructor() {
    this.rows = new Map();
    this.acquireCalls = 0;
  }
  acquire(key, owner, ttlMs) {
    this.acquireCalls++;
    const now = Date.now();
    const row = this.rows.get(key);
    if (row !== undefined && row.expiresAt > now) return false;
    this.rows.set(key, { owner, expiresAt: now + ttlMs });
    return true;
  }
  release(key, owner) {
    const row = this.rows.get(key);
    if (row === undefined || row.owner !== owner || row.expiresAt <= Date.now()) return false;
    this.rows.delete(key);
    return true;
  }
}

export class FloorLock {
  constructor(store, key, ttlMs = 30_000) {
    this.store = store;
    this.key = key;
    this.ttlMs = ttlMs;
    this.owner = null;
  }
  async acquire({ timeout = 0, retryDelay = 50 } = {}) {
    const owner = randomUUID();
    const giveUpAt = Date.now() + timeout;
    for (;;) {
      if (this.store.acquire(this.key, owner, this.ttlMs)) {
        this.owner = owner;
        return true;
      }
      const now = Date.now();
      if (now >= giveUpAt) return false;
      await sleep(Math.min(Math.max(retryDelay, 1), giveUpAt - now));
    }
  }
  async release() {
    if (this.owner === null) return false;
    const released = this.store.release(this.key, this.owner);
    this.owner = null;
    return released;
  }
  async run(fn, options) {
    if (!(await this.acquire(options))) return [false, undefined];
    try {
      const out = fn();
      return [true, out !== null && typeof out === "object" && typeof out.then === "function" ? await out : out];
    } finally {
      await this.release();
    }
  }
}

/**
 * A lock store (keel-lock's five-method contract) over a Map, every answer an already-resolved
 * promise: acquire → false | { fence }, release/extend → boolean, isLocked → boolean,
 * remainingTime → ms | null. No I/O: what remains is the cost of the async store path.
 */
export class AsyncMapStore {
  constructor() {
    this.rows = new Map();
    this.fence = 0;
  }
  #live(key, now) {
    const row = this.rows.get(key);
    return row !== undefined && row.expiresAt > now ? row : undefined;
  }
  acquire(key, owner, ttlMs) {
    const now = Date.now();
    if (this.#live(key, now) !== undefined) return Promise.resolve(false);
    this.rows.set(key, { owner, expiresAt: now + ttlMs });
    return Promise.resolve({ fence: ++this.fence });
  }
  release(key, owner) {
    const row = this.#live(key, Date.now());
    if (row === undefined || row.owner !== owner) return Promise.resolve(false);
    this.rows.delete(key);
    return Promise.resolve(true);
  }
  extend(key, owner, ttlMs) {
    const now = Date.now();
    const row = this.#live(key, now);
    if (row === undefined || row.owner !== owner) return Promise.resolve(false);
    row.expiresAt = now + ttlMs;
    return Promise.resolve(true);
  }
  isLocked(key) {
    return Promise.resolve(this.#live(key, Date.now()) !== undefined);
  }
  remainingTime(key) {
    const now = Date.now();
    const row = this.#live(key, now);
    return Promise.resolve(row === undefined ? null : row.expiresAt - now);
  }
}

/** FloorLock over a store whose answers are promises (AsyncMapStore): every store call awaited. */
export class FloorLockAsync extends FloorLock {
  async acquire({ timeout = 0, retryDelay = 50 } = {}) {
    const owner = randomUUID();
    const giveUpAt = Date.now() + timeout;
    for (;;) {
      if (await this.store.acquire(this.key, owner, this.ttlMs)) {
        this.owner = owner;
        return true;
      }
      const now = Date.now();
      if (now >= giveUpAt) return false;
      await sleep(Math.min(Math.max(retryDelay, 1), giveUpAt - now));
    }
  }
  async release() {
    if (this.owner === null) return false;
    const released = await this.store.release(this.key, this.owner);
    this.owner = null;
    return released;
  }
}
