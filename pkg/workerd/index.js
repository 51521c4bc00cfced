// Cloudflare Workers (workerd) entry: the `workerd`-feature build, which adds the Durable Object
// lock store. Workers cannot fetch or compile wasm at runtime: the module is imported as a
// CompiledWasm module (wrangler and Miniflare do this for `.wasm` imports) and instantiated
// synchronously, at module load. Deferring the instantiation, `__wbindgen_start` and building the
// API to first use would not make start-up shorter: together they take about 1 ms of CPU in
// workerd, once per isolate either way, so deferring only moves that into the first lock call,
// and every class exported below would have to become a stand-in for a value that does not exist
// yet. What loading this entry costs is its size: the wasm workerd compiles, the glue it parses.
import { DurableObject } from "cloudflare:workers";
import wasmModule from "../dist/workerd/keel_lock_bg.wasm";
import { initSync } from "../dist/workerd/keel_lock.js";
import * as wasm from "../dist/workerd/keel_lock.js";

initSync({ module: wasmModule });

export const {
  lock,
  semaphore,
  readLock,
  writeLock,
  restoreLock,
  inspect,
  campaign,
  observe,
  setLockStore,
  getLockStore,
  Lock,
  MemoryLockStore,
  LockNotHeldError,
  LockUnavailableError,
  LockStoreTimeoutError,
  LimitMismatchError,
} = wasm.__keelApi(wasm);
export const { DurableObjectLockStore } = wasm;

/**
 * The Durable Object that holds lock rows. Re-export it from your Worker's entry module
 * (`export { LockDurableObject } from "keel-lock"`) and bind it in wrangler.toml with a
 * `new_sqlite_classes` migration. JS RPC reaches only classes that extend `DurableObject`, so
 * this class exists to forward each call to the Rust object that does the work.
 */
export class LockDurableObject extends DurableObject {
  #core;
  constructor(ctx, env) {
    super(ctx, env);
    this.#core = new wasm.LockDurableObjectCore(ctx, env);
  }
  /**
   * Set-if-absent: `{ fence }` or `false`. Every acquiring method takes the hold's `metadata`
   * (a string of at most 1 KiB of UTF-8) as an optional last argument; the hold keeps it until
   * it ends, and `inspect` shows it.
   */
  acquire(key, owner, ttlMs, metadata) {
    return this.#core.acquire(key, owner, ttlMs, metadata);
  }
  /** Acquire, or wait in the key's FIFO queue up to `waitMs`: `{ fence, waitedMs }` or `false`. */
  acquireOrWait(key, owner, ttlMs, waitMs, metadata) {
    return this.#core.acquireOrWait(key, owner, ttlMs, waitMs, metadata);
  }
  /**
   * A shared hold (semaphore permits, a read lock) of `weight` out of `limit`: `{ fence }`,
   * `false`, or `{ heldLimit }` when the key's live shared holds have another limit.
   */
  acquireShared(key, owner, ttlMs, weight, limit, metadata) {
    return this.#core.acquireShared(key, owner, ttlMs, weight, limit, metadata);
  }
  /** `acquireShared`, or wait in the key's one FIFO queue up to `waitMs`. */
  acquireSharedOrWait(key, owner, ttlMs, weight, limit, waitMs, metadata) {
    return this.#core.acquireSharedOrWait(key, owner, ttlMs, weight, limit, waitMs, metadata);
  }
  /** Leave the key's queue, or release the key if it was already handed to `owner`. */
  withdraw(key, owner) {
    return this.#core.withdraw(key, owner);
  }
  release(key, owner) {
    return this.#core.release(key, owner);
  }
  forceRelease(key) {
    return this.#core.forceRelease(key);
  }
  extend(key, owner, ttlMs) {
    return this.#core.extend(key, owner, ttlMs);
  }
  isLocked(key) {
    return this.#core.isLocked(key);
  }
  remainingTime(key) {
    return this.#core.remainingTime(key);
  }
  /** Who holds `key` and who waits: `{ holders: [{ metadata, fence, remainingMs }], waiting }`. */
  inspect(key) {
    return this.#core.inspect(key);
  }
  /** Diagnostics: `{ now, alarm, rows, shared, waiting }` of the whole object (owner tokens never leave). */
  snapshot() {
    return this.#core.snapshot();
  }
  alarm() {
    return this.#core.alarm();
  }
}
