// The floor: keel-lock's memory-store semantics in plain JS, no wasm boundary. Written for this
// benchmark (not a product): a Map of key → { owner, expiresAt }, a fresh random owner token per
// acquire, expired rows count as absent, release/extend only by the live owner, run() =
// acquire → fn → release in a finally, resolving [true, result] or [false, undefined].
// Waiting is the same polling loop keel-lock uses: try, sleep retryDelay, try again until timeout.
import { randomUUID } from "node:crypto";

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export class FloorStore {
  constructor() {
    this.rows = new Map();
  }
  acquire(key, owner, ttlMs) {
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
