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
  onLockEvent,
  setLockStore,
  getLockStore,
  Lock,
  MemoryLockStore,
  LockNotHeldError,
  LockUnavailableError,
  LockStoreTimeoutError,
  LimitMismatchError,
} = wasm.__keelApi(wasm);

// How long a watch whose object went away (restarted, moved) waits before subscribing again.
const WATCH_RETRY_MS = 250;

/**
 * `new DurableObjectLockStore(env.LOCKS)` for JS Workers: the store over the key's
 * `LockDurableObject` (the wasm class), plus `watch`, which the object pushes over JS RPC.
 */
export class DurableObjectLockStore extends wasm.DurableObjectLockStore {
  #namespace;
  constructor(namespace) {
    super(namespace);
    this.#namespace = namespace;
  }

  /**
   * Pushes `key`'s exclusive holder changes to `onChange`, as the key's object makes them
   * (the `LockStore.watch` contract); resolves, once subscribed, to the function that stops.
   * The object calls back over RPC, numbering its reports: a gap, or the object going away
   * (a restart), is reported as `null` ("look again") and the watch subscribes anew.
   */
  async watch(key, onChange) {
    if (typeof onChange !== "function") {
      throw new TypeError(`DurableObjectLockStore.watch: onChange must be a function, got ${typeof onChange}`);
    }
    const namespace = this.#namespace;
    // A stub whose object went away stays broken: each subscription gets a new one.
    let stub;
    const id = crypto.randomUUID();
    let stopped = false;
    let next = 0;
    const told = (seq, report) => {
      if (stopped) return false;
      if (seq !== next) onChange(null);
      next = seq + 1;
      onChange(report);
      return true;
    };
    const subscribe = async () => {
      stub = namespace.get(namespace.idFromName(key));
      next = await stub.watch(key, id, told);
      stub.watching(key, id).then(
        () => {},
        async () => {
          if (stopped) return;
          // The object went away with the watch: say so, and subscribe again once it is back.
          onChange(null);
          while (!stopped) {
            await new Promise((resolve) => setTimeout(resolve, WATCH_RETRY_MS));
            if (stopped) return;
            try {
              await subscribe();
              onChange(null);
              return;
            } catch {
              // still away: try again
            }
          }
        },
      );
    };
    await subscribe();
    return () => {
      if (stopped) return undefined;
      stopped = true;
      return stub.unwatch(key, id).catch(() => false);
    };
  }
}

/**
 * The Durable Object that holds lock rows. Re-export it from your Worker's entry module
 * (`export { LockDurableObject } from "keel-lock"`) and bind it in wrangler.toml with a
 * `new_sqlite_classes` migration. JS RPC reaches only classes that extend `DurableObject`, so
 * this class exists to forward each call to the Rust object that does the work.
 */
export class LockDurableObject extends DurableObject {
  #core;
  #sql;
  // The watched keys: key → { leader (fence of the last reported holder, or null), seq (the
  // next report's number), callbacks: id → the watcher's RPC callback, ended: id → settles the
  // watcher's open `watching` call }. Nothing is looked at while it is empty.
  #watches = new Map();
  constructor(ctx, env) {
    super(ctx, env);
    this.#core = new wasm.LockDurableObjectCore(ctx, env);
    this.#sql = ctx.storage.sql;
  }

  /**
   * Reports `key`'s exclusive holder to its watchers if it changed since the last report: the
   * new hold's grant, or the old one's end when nobody holds it. Called in the same turn as every operation that
   * can change it (storage is synchronous, so the row read is the one the operation left), and
   * when a queued call is granted (a hand-over at a holder's expiry happens in no operation).
   */
  #changed(key) {
    const watch = this.#watches.get(key);
    if (watch === undefined) return;
    const now = Date.now();
    let row;
    try {
      row = this.#sql
        .exec("SELECT fence, metadata, expires_at FROM keel_locks WHERE key = ? AND expires_at > ?", key, now)
        .toArray()[0];
    } catch {
      row = undefined; // no table yet: nothing held
    }
    const fence = row === undefined ? null : row.fence;
    if (fence === watch.leader) return;
    // Straight from one holder to the next (a hand-over), the grant alone says both.
    if (watch.leader !== null && fence === null) this.#tell(watch, { fence: watch.leader, held: false });
    if (fence !== null) {
      this.#tell(watch, { fence, held: true, metadata: row.metadata ?? null, remainingMs: row.expires_at - now });
    }
    watch.leader = fence;
  }

  #tell(watch, report) {
    const seq = watch.seq++;
    for (const [id, callback] of watch.callbacks) {
      // A watcher that is gone (its isolate ended) or that stopped is dropped.
      let answer;
      try {
        answer = callback(seq, report);
      } catch {
        this.#drop(watch, id);
        continue;
      }
      Promise.resolve(answer).then(
        (more) => more === false && this.#drop(watch, id),
        () => this.#drop(watch, id),
      );
    }
  }

  #drop(watch, id) {
    const callback = watch.callbacks.get(id);
    if (callback === undefined) return;
    watch.callbacks.delete(id);
    callback[Symbol.dispose]?.();
    watch.ended.get(id)?.();
    watch.ended.delete(id);
    if (watch.callbacks.size === 0 && this.#watches.get(watch.key) === watch) this.#watches.delete(watch.key);
  }

  /**
   * Pushes `key`'s exclusive holder changes to `onChange(seq, report)` (reports numbered from
   * the answer), until `unwatch(key, id)` or a failed call. See `DurableObjectLockStore#watch`.
   */
  watch(key, id, onChange) {
    this.#core.inspect(key); // checks the key
    if (typeof id !== "string" || id.length === 0 || id.length > 64) throw new TypeError("watch: id must be a string of 1 to 64 characters");
    if (typeof onChange !== "function") throw new TypeError("watch: onChange must be a function");
    let watch = this.#watches.get(key);
    if (watch === undefined) {
      watch = { key, leader: null, seq: 0, callbacks: new Map(), ended: new Map() };
      this.#watches.set(key, watch);
      this.#changed(key); // the holder now, reported to nobody: the baseline
      watch.seq = 0;
    }
    // A callback received over RPC lives only as long as this call, unless kept by `dup`.
    watch.callbacks.set(id, typeof onChange.dup === "function" ? onChange.dup() : onChange);
    return watch.seq;
  }

  /** Stays open while watch `id` of `key` lasts: resolves when it ends. */
  watching(key, id) {
    const watch = this.#watches.get(key);
    if (watch === undefined || !watch.callbacks.has(id)) return Promise.resolve(false);
    return new Promise((resolve) => watch.ended.set(id, () => resolve(true)));
  }

  /** Ends watch `id` of `key`: `true` when it was live. */
  unwatch(key, id) {
    const watch = this.#watches.get(key);
    if (watch === undefined || !watch.callbacks.has(id)) return false;
    this.#drop(watch, id);
    return true;
  }
  /**
   * Set-if-absent: `{ fence }` or `false`. Every acquiring method takes the hold's `metadata`
   * (a string of at most 1 KiB of UTF-8) as an optional last argument; the hold keeps it until
   * it ends, and `inspect` shows it.
   */
  acquire(key, owner, ttlMs, metadata) {
    const answer = this.#core.acquire(key, owner, ttlMs, metadata);
    if (this.#watches.size !== 0) this.#changed(key);
    return answer;
  }
  /** Acquire, or wait in the key's FIFO queue up to `waitMs`: `{ fence, waitedMs }` or `false`. */
  acquireOrWait(key, owner, ttlMs, waitMs, metadata) {
    const answer = this.#core.acquireOrWait(key, owner, ttlMs, waitMs, metadata);
    if (this.#watches.size !== 0) this.#changed(key);
    return answer.then((granted) => {
      if (this.#watches.size !== 0) this.#changed(key);
      return granted;
    });
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
    const answer = this.#core.withdraw(key, owner);
    if (this.#watches.size !== 0) this.#changed(key);
    return answer;
  }
  release(key, owner) {
    const answer = this.#core.release(key, owner);
    if (this.#watches.size !== 0) this.#changed(key);
    return answer;
  }
  forceRelease(key) {
    const answer = this.#core.forceRelease(key);
    if (this.#watches.size !== 0) this.#changed(key);
    return answer;
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
    const done = this.#core.alarm();
    if (this.#watches.size === 0) return done;
    return Promise.resolve(done).finally(() => {
      for (const key of this.#watches.keys()) this.#changed(key);
    });
  }
}
