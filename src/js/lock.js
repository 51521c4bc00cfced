// The JS `Lock`, a handle on one key; the core's decisions stay in the wasm (core.js). While a
// handle acquires, holds or releases, its core lock lives in a slot; an operation started while
// the handle is busy with another runs on a twin: a second slot of the same core lock.

import { CALL, CLOSED, FAILED, HELD_UNFENCED, KEPT, NOBODY, NOT_HELD_EXTEND, NOT_HELD_SERIALIZE, OP_FORCE_RELEASE, OP_IS_LOCKED, OP_REMAINING_TIME, REFUSED, SPARED, STILL_QUEUED, YES } from "./protocol.js";
import { core, ok, ownerOf, stepArg, textOf } from "./core.js";
import { extendOverStore, isThenable, keyOperationOverStore, releaseOverStore } from "./calls.js";
import { BY_FACTORY, closeOnDrop, spare } from "./binding.js";
import { forget, rearm, waiters } from "./waiters.js";
import { acquiredVia, events, grant, told, toldRun, toldStep } from "./events.js";
import { AUTO_EXTEND, METADATA, PERMITS, RETRY_DELAY, SIGNAL, TIMEOUT, abortReason, asksWebLocks, metadataError, nothing, onAbort, plainOptions, webLocksOptions } from "./options.js";
import { keepMemoryMetadata, memoryEnded, memoryGranted, subscriptions } from "./memory-store.js";
import { inspectOn } from "./inspect.js";
import { driveWatcher } from "./watcher.js";
import { ACQUIRE_ONLY, ADOPT, ENTER, FINISH, refused, runOverStore } from "./over-store.js";
import { LockContext, asyncDispose, holdOrThrow, setOnSignalRead } from "./holding.js";

/** A lock on one key. Created by `lock(key, ttlMs)` or `restoreLock(serialized)`. */
export class Lock {
  #key;
  #ttl;
  #store;
  // 0 for a lock (the key alone); else the limit its shared holds are under (a semaphore's, or
  // 2^32 - 1 for a read lock).
  #limit = 0;
  #slot = 0;
  // The permits this handle last gave the slot's core lock (undefined: not known).
  #slotPermits = undefined;
  #busy = false;
  // Whether the slot is registered with `closeOnDrop`.
  #closesOnDrop = false;
  // The metadata of the run in progress on the memory store (undefined: none), which the
  // grant's fence files in the store's metadata.
  #saying = undefined;
  // The run's `autoExtend` option while it acquires (undefined: none); the watcher `autoExtend()`
  // started (a run's is its context's).
  #runAutoExtend = undefined;
  #autoExtendWatcher = null;
  // On a twin (see `#twin`): the handle it is the twin of; else null.
  #twinOf = null;

  static {
    setOnSignalRead((handle, context) => handle.#watchRun(context));
  }

  constructor(token, key, ttl, store, slot = 0, limit = 0) {
    if (token !== BY_FACTORY) throw new TypeError("use lock(key, ttlMs) or restoreLock(serialized)");
    this.#key = key;
    this.#ttl = ttl;
    this.#store = store;
    this.#limit = limit;
    // A restored handle holds from the start, in the slot restoreLock opened; a twin (see
    // `#twin`) starts on a second slot of its handle's core lock.
    if (slot !== 0) this.#keepSlot(slot);
  }

  /**
   * For an operation that starts while this handle is busy with another: a handle of its own on
   * a second slot of the same core lock (so the same hold), let go of when it is idle again.
   */
  #twin() {
    const id = this.#slot !== 0 ? ok(core.twinSlot(this.#slot)) : 0;
    // The twin shares the core lock and gives it its own permits.
    this.#slotPermits = undefined;
    const twin = new Lock(BY_FACTORY, this.#key, this.#ttl, this.#store, id, this.#limit);
    twin.#twinOf = this;
    return twin;
  }

  #open() {
    if (spare.id !== 0 && spare.key === this.#key && spare.ttl === this.#ttl && spare.store === this.#store && spare.limit === this.#limit) {
      const id = spare.id;
      spare.id = 0;
      this.#slot = id;
      if (this.#limit !== 0) this.#slotPermits = spare.permits;
      return id;
    }
    const id = ok(core.openSlot(this.#key, this.#ttl, this.#store.binding));
    this.#slot = id;
    if (this.#limit !== 0) this.#slotPermits = undefined;
    return id;
  }

  /** The slot is `id` (0: none) after an operation: a slot that outlives it closes if the handle is dropped. */
  #keepSlot(id) {
    if (this.#closesOnDrop) {
      closeOnDrop.unregister(this);
      this.#closesOnDrop = false;
    }
    this.#slot = id;
    if (id !== 0) {
      closeOnDrop.register(this, id, this);
      this.#closesOnDrop = true;
    }
  }

  /**
   * An operation is over: let go of the slot if the handle is idle (`after`: what ending the
   * hold already did with it — CLOSED, SPARED — or any other code when nothing), else keep it.
   */
  #finish(after) {
    this.#busy = false;
    // Any other code (REFUSED, RELEASED, FAILED) left the slot with the handle.
    if (after !== CLOSED && after !== SPARED) {
      after = core.closeSlot(this.#slot, false);
      if (after === KEPT && this.#twinOf !== null) return this.#handBack();
      if (after === KEPT) {
        if (!this.#closesOnDrop) this.#keepSlot(this.#slot);
        return;
      }
    }
    if (after === SPARED) this.#spare();
    else this.#keepSlot(0);
  }

  /** The operation could not start (the core said FAILED): its error, as a rejection. */
  #failed() {
    this.#finish(KEPT);
    return Promise.reject(core.lastError());
  }

  /**
   * A twin's operation is over and its slot outlives it: the core lock holds something (the
   * hold this twin's `acquire()` took, or its handle's own). The handle keeps the core lock
   * through its own slot, or, having let go of it meanwhile, takes this one.
   */
  #handBack() {
    const id = this.#slot;
    const handle = this.#twinOf;
    this.#keepSlot(0);
    if (handle.#slot === 0) {
      handle.#keepSlot(id);
      handle.#slotPermits = undefined;
    } else core.closeSlot(id, true);
  }

  /** The handle let go of its slot, idle: the slot is the spare, for the next handle on the same. */
  #spare() {
    spare.id = this.#slot;
    spare.key = this.#key;
    spare.ttl = this.#ttl;
    spare.store = this.#store;
    spare.limit = this.#limit;
    spare.permits = this.#slotPermits;
    this.#keepSlot(0);
  }

  get key() {
    return this.#key;
  }

  get ttlMs() {
    return this.#ttl;
  }

  /** The limit a semaphore's permits are under (2^32 - 1 for a read lock); null for a lock. */
  get limit() {
    return this.#limit === 0 ? null : this.#limit;
  }

  get fence() {
    if (this.#slot === 0) return null;
    const fence = core.fenceOf(this.#slot);
    return fence === fence ? fence : null;
  }

  get signal() {
    return this.#autoExtendWatcher === null ? undefined : this.#autoExtendWatcher.context.signal;
  }

  /**
   * Acquire, run `fn({ fence, signal })`, always release: `[true, result]` or `[false, undefined]`.
   * `acquire(options)` is this with `fn` ACQUIRE_ONLY: every option is checked first.
   */
  run(fn, options) {
    if (asksWebLocks(options)) return webLocksOptions(this, options, (rest) => this.run(fn, rest));
    const running = fn !== ACQUIRE_ONLY;
    if (events.listening && told(this)) {
      return toldRun(this, this.#store, running ? fn : null, options, (inner) => this.run(running ? inner : ACQUIRE_ONLY, options));
    }
    const plain = plainOptions(options);
    if (plain === null) return Promise.reject(core.optionsError(options, running));
    if (running && typeof fn !== "function") {
      // Every option is checked before `fn`.
      return Promise.reject(core.optionsError(options, true) ?? core.notAFunctionError(fn));
    }
    if (this.#busy) return this.#twin().run(fn, options);
    if (plain[PERMITS] !== undefined && this.#limit === 0) {
      core.setPermits(0, plain[PERMITS], 0);
      return Promise.reject(core.lastError());
    }
    const autoExtend = running ? plain[AUTO_EXTEND] : undefined;
    if (plain[SIGNAL] !== undefined || (autoExtend !== undefined && autoExtend !== false)) {
      // A signal or autoExtend: the core checks every option, in order, before anything starts.
      const error = core.optionsError(options, running);
      if (error !== undefined) return Promise.reject(error);
    }
    return this.#run(fn, plain[TIMEOUT], plain[RETRY_DELAY], plain[SIGNAL], autoExtend, plain[PERMITS], plain[METADATA]);
  }

  /** `run(fn)` that never waits. */
  runImmediately(fn) {
    return this.run(fn, undefined);
  }

  /** Tries to take the lock; with `{ timeout }`, waits until then. Resolves a boolean. */
  acquire(options) {
    return this.run(ACQUIRE_ONLY, options);
  }

  /** Acquires the lock or throws LockUnavailableError; with `autoExtend`, keeps extending it. */
  hold(options) {
    return holdOrThrow(this, options);
  }

  async [asyncDispose]() {
    await this.release();
  }

  /** `signal` and `autoExtend` were checked by the caller, with the other options. */
  #run(fn, timeout, retryDelay, signal, autoExtend, permits, metadata) {
    // An already aborted signal starts nothing.
    if (signal !== undefined && signal.aborted) return Promise.reject(abortReason(signal));
    let id = this.#slot;
    if (id === 0) {
      try {
        id = this.#open();
      } catch (error) {
        return Promise.reject(error);
      }
    }
    if (this.#limit !== 0) {
      const p = permits ?? 1;
      if (p !== this.#slotPermits) {
        // Permits are checked against the limit (a RangeError) before anything starts.
        if (core.setPermits(id, permits, this.#limit) === FAILED) return this.#failed();
        this.#slotPermits = p;
      }
    }
    if (metadata !== undefined) {
      const error = metadataError(this.#store, metadata);
      if (error !== undefined) {
        this.#finish(KEPT);
        return Promise.reject(error);
      }
    }
    this.#busy = true;
    this.#runAutoExtend = autoExtend === false ? undefined : autoExtend;
    this.#saying = metadata;
    const code = core.beginAcquire(id, timeout, retryDelay, performance.now());
    if (code === FAILED) return this.#failed();
    if (code === REFUSED) {
      this.#finish(KEPT);
      return Promise.resolve(refused(fn));
    }
    if (code >= 1 || code === HELD_UNFENCED) {
      try {
        return this.#holding(id, fn, code);
      } catch (error) {
        return Promise.reject(error);
      }
    }
    if (code === STILL_QUEUED) return this.#queued(id, fn, signal);
    return runOverStore(this, this.#store, this.#key, this.#ttl, this.#limit, id, code, fn, signal, permits ?? 1, metadata);
  }

  /**
   * Waits in the memory store's queue, which `beginAcquire` joined; the hand-over calls `fn` in
   * the microtask it wakes. An abort leaves the queue (the core gives back a grant that raced it).
   */
  #queued(id, fn, signal) {
    const waiter = { scheduled: false, go: null, timer: null, key: this.#key, store: this.#store.object };
    waiters.set(id, waiter);
    rearm(waiter, id);
    return new Promise((resolve, reject) => {
      const stopListening =
        signal === undefined
          ? nothing
          : onAbort(signal, () => {
              forget(waiter, id);
              core.stopWaiting(id);
              this.#finish(KEPT);
              memoryEnded(waiter.store, waiter.key);
              reject(abortReason(signal));
            });
      waiter.go = (code) => {
        stopListening();
        if (code >= 1 || code === HELD_UNFENCED) {
          grant.via = "hand-over";
          try {
            this.#holding(id, fn, code, resolve, reject);
          } catch (error) {
            reject(error);
          }
          grant.via = null;
        } else {
          this.#finish(KEPT);
          if (code === FAILED) reject(core.lastError());
          else resolve(refused(fn));
        }
        // Not granted, or granted and already ended: an end held back for the hand-over is reported.
        memoryEnded(waiter.store, waiter.key);
      };
    });
  }

  /** `acquire()` took the key: the hold is the handle's, kept in its slot until released. */
  #adopt(id) {
    ok(core.adoptHold(id));
    if (events.listening) {
      acquiredVia.set(this.#twinOf ?? this, grant.via ?? "immediate");
      grant.via = null;
    }
    this.#finish(KEPT);
    return true;
  }

  /** The run took the key (fence `code`): the context `fn` is handed. */
  #enter(id, code) {
    const context = new LockContext(code >= 1 ? code : null, this);
    if (this.#runAutoExtend !== undefined) this.#autoExtendRun(id, context);
    return context;
  }

  // The steps a run over a JS store (over-store.js) takes on the handle.
  [FINISH](after) {
    this.#finish(after);
  }

  [ADOPT](id) {
    return this.#adopt(id);
  }

  [ENTER](id, code) {
    return this.#enter(id, code);
  }

  /**
   * On the hold the run took from the memory store (fence `code`): `acquire()` keeps it; a run
   * runs `fn` and ends it. Answers the run's promise: `[true, value]`, or the task's error, which
   * wins over the release's; a throw is the caller's to reject with. Given `resolve` and `reject`
   * (a run woken in the queue, whose promise exists), the answer goes to them instead, with no
   * promise between it and `fn`'s.
   */
  #holding(id, fn, code, resolve, reject) {
    if (this.#saying !== undefined) {
      if (code >= 1) keepMemoryMetadata(this.#store.object, this.#key, code, this.#saying);
      this.#saying = undefined;
    }
    if (subscriptions.count !== 0 && this.#limit === 0) memoryGranted(this.#store.object, this.#key, code);
    if (fn === ACQUIRE_ONLY) return resolve === undefined ? Promise.resolve(this.#adopt(id)) : resolve(this.#adopt(id));
    const context = this.#enter(id, code);
    let value;
    try {
      value = fn(context);
    } catch (error) {
      return this.#ended(id, context, error, true, resolve, reject);
    }
    if (isThenable(value)) {
      return Promise.resolve(value).then(
        (v) => this.#ended(id, context, v, false, resolve, reject),
        (e) => this.#ended(id, context, e, true, resolve, reject),
      );
    }
    if (resolve !== undefined) return this.#ended(id, context, value, false, resolve, reject);
    // The promise is made from an array literal, whose `then` the compiler need not look up.
    const error = this.#release(id, context);
    return error === undefined ? Promise.resolve([true, value]) : Promise.reject(error);
  }

  /** Releases the run's hold on the memory store: the release's error, or undefined. */
  #release(id, context) {
    // The memory store extends inside the wasm: no extend can be in flight to wait for.
    LockContext.end(context);
    const code = core.endRun(id, performance.now());
    const error = code === FAILED ? core.lastError() : undefined;
    this.#finish(code);
    if (subscriptions.count !== 0) memoryEnded(this.#store.object, this.#key);
    return error;
  }

  /**
   * `#release`, `fn` having answered `value` (or thrown it, `failed`): `[true, value]`, or the
   * task's error, which wins over the release's, thrown — or handed to `resolve` / `reject`.
   */
  #ended(id, context, value, failed, resolve, reject) {
    const error = this.#release(id, context);
    if (resolve === undefined) {
      if (failed) throw value;
      if (error !== undefined) throw error;
      return [true, value];
    }
    if (failed) reject(value);
    else if (error !== undefined) reject(error);
    else resolve([true, value]);
  }

  /** Who holds the key and who waits: see `inspect(key)`. */
  inspect() {
    return inspectOn(this.#store, this.#key, this.#ttl);
  }

  /** Frees the lock if this handle still owns it; resolves `false` (never throws) otherwise. */
  release() {
    if (events.listening && told(this)) return toldStep(this, this.#store, "release", () => this.release());
    if (this.#autoExtendWatcher !== null) {
      // autoExtend() stops first, and an extend in flight finishes, before the release.
      const watcher = this.#autoExtendWatcher;
      this.#autoExtendWatcher = null;
      return watcher.stop().then(() => this.release());
    }
    if (this.#busy) return this.#twin().release();
    const id = this.#slot;
    if (id === 0) return Promise.resolve(false); // no slot: nothing held, nothing lost
    this.#busy = true;
    const code = core.releaseHold(id, this.#store.memory ? performance.now() : NaN);
    if (code === FAILED) return this.#failed();
    if (code !== CALL) {
      this.#finish(code);
      if (this.#store.memory) memoryEnded(this.#store.object, this.#key);
      return Promise.resolve(code !== REFUSED);
    }
    const finish = (after) => this.#finish(after);
    return releaseOverStore(id, this.#store, this.#key, ownerOf(id), finish).then((released) => released !== REFUSED);
  }

  /** Resets the expiry to `ttlMs` (default: the lock's TTL) from now, or rejects LockNotHeldError. */
  extend(ttlMs) {
    if (events.listening && told(this)) return toldStep(this, this.#store, "extend", () => this.extend(ttlMs));
    const given = ttlMs !== undefined;
    if (given && typeof ttlMs !== "number") return Promise.reject(core.notANumberError("ttlMs", ttlMs));
    const id = this.#slot;
    // No slot: the handle holds nothing.
    if (id === 0) return Promise.reject(core.extendIdleError(this.#key, given ? ttlMs : 0, given));
    return this.#extended(core.extendHold(id, given ? ttlMs : 0, given));
  }

  /** What an extend step (`code`) comes to: done, an error, or a JS store's call to make. */
  #extended(code) {
    if (code === FAILED) return Promise.reject(core.lastError());
    if (code !== CALL) return Promise.resolve(); // EXTENDED
    return extendOverStore(this.#slot, this.#store, this.#key);
  }

  /** A store call about the key alone (`op`): the core's answer code, after the store's if a JS one. */
  #keyOperation(op) {
    const code = core.keyOperation(this.#key, this.#store.binding, op, this.#ttl);
    if (code === FAILED) return Promise.reject(core.lastError());
    if (code !== CALL) return Promise.resolve(code);
    return keyOperationOverStore(this.#store, this.#key, op, stepArg());
  }

  /** Frees the key whoever holds it; resolves whether anyone did. */
  forceRelease() {
    return this.#keyOperation(OP_FORCE_RELEASE).then((code) => code === YES);
  }

  /** Whether anyone (not necessarily this handle) holds the key. */
  isLocked() {
    return this.#keyOperation(OP_IS_LOCKED).then((code) => code === YES);
  }

  isExpired() {
    return Promise.resolve(this.#slot !== 0 && core.holdLost(this.#slot));
  }

  /** Milliseconds until the key's expiry, or null when nobody holds it. */
  getRemainingTime() {
    return this.#keyOperation(OP_REMAINING_TIME).then((code) => (code === NOBODY ? null : code));
  }

  /** The hold as a string for `restoreLock`, or throws LockNotHeldError. */
  serialize() {
    if (this.#slot === 0) throw core.notHeldError(this.#key, NOT_HELD_SERIALIZE);
    return textOf(core.serialize(this.#slot));
  }

  /**
   * Keeps extending the held lock until `release()` or `stopAutoExtend()`; returns the hold's
   * context, whose signal aborts when the hold is lost. Again while it runs: the same context.
   */
  autoExtend(options) {
    if (this.#autoExtendWatcher !== null) return this.#autoExtendWatcher.context;
    if (options !== undefined) ok(core.checkAutoExtend(options));
    if (this.#slot === 0) throw core.notHeldError(this.#key, NOT_HELD_EXTEND);
    const watcher = ok(core.startWatcher(this.#slot, true, options, performance.now()));
    this.#autoExtendWatcher = this.#drive(watcher, new LockContext(this.fence));
    return this.#autoExtendWatcher.context;
  }

  /** Stops `autoExtend()`; resolves once no extend is in flight. The lock stays held. */
  stopAutoExtend() {
    const watcher = this.#autoExtendWatcher;
    this.#autoExtendWatcher = null;
    return watcher === null ? Promise.resolve() : watcher.stop().then(() => undefined);
  }

  /** The run's context had its signal read: watch the run's hold, and abort it when lost. */
  #watchRun(context) {
    if (!LockContext.watched(context) && this.#slot !== 0) this.#watchHold(this.#slot, false, undefined, context);
  }

  /** The run (slot `id`) took the key with `autoExtend`: keep its hold alive while `fn` runs. */
  #autoExtendRun(id, context) {
    const autoExtend = this.#runAutoExtend;
    this.#runAutoExtend = undefined;
    this.#watchHold(id, true, autoExtend, context);
  }

  /** `context`'s watcher on the hold of slot `id`, unless nothing is held. */
  #watchHold(id, autoExtend, options, context) {
    const watcher = core.startWatcher(id, autoExtend, options, performance.now());
    if (watcher === FAILED) core.lastError(); // nothing held: nothing to watch
    else LockContext.watchWith(context, this.#drive(watcher, context));
  }

  #drive(watcher, context) {
    return driveWatcher(watcher, context, this.#key, (code) => this.#extended(code));
  }
}
