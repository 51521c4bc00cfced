// The Keel lock API as the package exports it. A `Lock` is a plain JS object; the core's
// decisions stay in the wasm, reached through numeric exports (src/js/handle/): `run()` on
// the memory store is two calls into the wasm, and over a JS store this layer awaits the
// store's own promises and feeds the answers to the core's acquisition machine, which says what
// to do next (call the store — a JS store's own queue, `acquireOrWait`, too —, pause, done);
// an abort signal ends a wait through the core too (`__kWithdraw`). `extend`, the inspections,
// `serialize` and `restoreLock` work the same way (src/js/operations.rs), and so does the hold's
// watcher (`autoExtend`, a run context's signal: src/js/watching.rs), driven from JS timers. An
// operation started while the handle is busy with another runs on a twin: a second slot of the
// same core lock.
//
// One file, in sections marked `// ===`: wasm-bindgen ships only the snippet files the Rust side
// imports from, so a helper module of this file alone would be missing from the package.

import { LockContext, LockUnavailableError, installHolding, setRunObserver } from "./holding.js";
import { cancelTimer, releaseLateGrant, setWaiterWake, timer } from "./promises.js";
import { eventState, observed, observedStep, onLockEvent, storeName } from "./events.js";

// --- protocol (src/js/protocol.rs) ---------------------------------------------------------
// The numbers this file reads or passes, declared (with what each means) in src/js/protocol.rs;
// tests/js_protocol.rs checks that each name below has the value there, that each is used, and
// that every name of the table this file uses is declared here.
// Step codes. A held step answers the fence (≥ 1) or HELD_UNFENCED.
const REFUSED = 0;
const HELD_UNFENCED = -1;
const CALL = -2;
const SLEEP = -3;
const TIMED_OUT = -4;
const CHECK_KEY_AS_STRING = -5;
const STILL_QUEUED = -7;
const CALL_ACQUIRE_OR_WAIT = -8;
const FAILED = -100; // the error is w.__kError()
// Ending a hold, and what became of the handle's slot.
const KEPT = 0;
const CLOSED = 3;
const SPARED = 4;
// Store operations.
const OP_ACQUIRE = 0;
const OP_RELEASE = 1;
const OP_EXTEND = 2;
const OP_IS_LOCKED = 3;
const OP_REMAINING_TIME = 4;
const OP_FORCE_RELEASE = 5;
const OP_ACQUIRE_SHARED = 6;
const OP_INSPECT = 7;
// A JS store's acquire answer, told apart by type.
const ANSWER_FALSE = 0;
const ANSWER_TRUE = 1;
const ANSWER_FENCE = 2;
// Answers of the other operations.
const YES = 1;
const NOBODY = -1;
const NOT_HELD_EXTEND = 0;
const NOT_HELD_SERIALIZE = 1;
// A hold's watcher: its steps, and why a watch ended.
const WATCH_LOST = 0;
const WATCH_EXTEND = -2;
const WATCH_SLEEP = -3;
const LOST_NOTHING = 0;
// OUT: what a step hands over besides its code, read from wasm memory.
const OUT_LEN = 5;
const OUT_ARG = 0;
const OUT_OWNER_AT = 1;
const OUT_OWNER_LEN = 2;
const OUT_TTL = 3;
const OUT_EXTEND_ID = 4;
const OUT_WAIT_MS = 3;
const OUT_POLL_MS = 4;
const MINTED_TOKEN_LEN = 32;
// --- end protocol ----------------------------------------------------------------------------

const UNANSWERED = Symbol("unanswered");
const ABORTED = Symbol("aborted");
// What `acquire()` runs: nothing — the hold stays the handle's.
const ACQUIRE_ONLY = Symbol("acquire only");

// === The wasm's exports, and what a step carries ============================================

let w = null; // the wasm module's exports

// The numbers a step hands over besides its code, read from wasm memory rather than asked for
// (the OUT_* indices above). Views of memory go stale (length 0) when it grows.
let memory = null;
let outAt = 0;
let out = new Float64Array(0);
let bytes = new Uint8Array(0);

function view() {
  out = new Float64Array(memory.buffer, outAt, OUT_LEN);
  bytes = new Uint8Array(memory.buffer);
}

/** The number the last step carries: a bound, a pause, a fence. */
function arg() {
  if (out.length === 0) view();
  return out[OUT_ARG];
}

/** A wait's waitMs and pollMs, as a CALL_ACQUIRE_OR_WAIT step carries them. */
function waitExtras() {
  if (out.length === 0) view();
  return [out[OUT_WAIT_MS], out[OUT_POLL_MS]];
}

/** A call's number; its error thrown when it answered FAILED. */
function ok(code) {
  if (code === FAILED) throw w.__kError();
  return code;
}

// A leading U+FEFF is part of a key, not a byte-order mark to drop.
const utf8 = new TextDecoder("utf-8", { ignoreBOM: true });

/** The text a call answered (src/js/handle/mod.rs, `text`), read from wasm memory; throws on FAILED. */
function textOf(code) {
  ok(code);
  if (out.length === 0) view();
  return utf8.decode(bytes.subarray(out[OUT_OWNER_AT], out[OUT_OWNER_AT] + out[OUT_OWNER_LEN]));
}

/** The owner token of the store call the last CALL step is about (read before calling in). */
function ownerOf(id) {
  if (out.length === 0) view();
  if (out[OUT_OWNER_LEN] !== MINTED_TOKEN_LEN) return textOf(w.__kOwner(id));
  const b = bytes;
  const p = out[OUT_OWNER_AT];
  // Minted tokens: MINTED_TOKEN_LEN (32) ASCII bytes.
  return String.fromCharCode(
    b[p], b[p + 1], b[p + 2], b[p + 3], b[p + 4], b[p + 5], b[p + 6], b[p + 7],
    b[p + 8], b[p + 9], b[p + 10], b[p + 11], b[p + 12], b[p + 13], b[p + 14], b[p + 15],
    b[p + 16], b[p + 17], b[p + 18], b[p + 19], b[p + 20], b[p + 21], b[p + 22], b[p + 23],
    b[p + 24], b[p + 25], b[p + 26], b[p + 27], b[p + 28], b[p + 29], b[p + 30], b[p + 31],
  );
}

// === The store lock() binds to, and the spare slot ==========================================

// The spare: the last slot a handle let go of idle, which the core keeps open, and the key, TTL
// and store of that handle. The next handle on the same takes that slot as it is, without a
// call into the wasm or passing the key again; the core closes a spare not taken when the next
// slot goes idle, so only the last one is ever named here.
let spareId = 0;
let spareKey;
let spareTtl = 0;
let spareStore = null;
let spareLimit = 0;
// The permits the spare's core lock was last told (undefined: not known): a semaphore handle
// taking the spare with the same permits skips the call into the wasm.
let sparePermits;
let current = null; // the store lock() binds to: { object, binding, memory, acquire, release, … }
const internal = Symbol("keel-lock internal");
// Lock's method for a multi-key run over holds one store step took (see MultiKeyLock).
const RUN_ON_HOLD = Symbol("keel-lock run on an acquired hold");

// A handle dropped while its slot lives (it holds, or knows its hold lost) frees the slot.
const slots =
  typeof FinalizationRegistry === "function"
    ? new FinalizationRegistry((id) => w.__kClose(id, true))
    : { register() {}, unregister() {} };

function bind() {
  const object = w.getLockStore();
  const binding = w.__kCurrent();
  current = binding.memory
    ? { object, binding, memory: true }
    : {
        object,
        binding,
        memory: false,
        acquire: object.acquire,
        acquireOrWait: object.acquireOrWait,
        acquireShared: object.acquireShared,
        acquireSharedOrWait: object.acquireSharedOrWait,
        withdraw: object.withdraw,
        release: object.release,
        extend: object.extend,
        [OP_IS_LOCKED]: object.isLocked,
        [OP_REMAINING_TIME]: object.remainingTime,
        [OP_FORCE_RELEASE]: object.forceRelease,
      };
  return current;
}

function isThenable(value) {
  return (
    value !== null &&
    (typeof value === "object" || typeof value === "function") &&
    typeof value.then === "function"
  );
}

// === Callers waiting in the memory store's queue ============================================

// Callers waiting in the memory store's queue, by slot id: the wasm says when to step one —
// woken (`wakeWaiter`), or after the time a STILL_QUEUED step carries (the queue's timekeeper).
const waiters = new Map();

/** After a STILL_QUEUED step of `waiter`: its timer as the step says (`arg()` ms, or none at -1). */
function rearm(waiter, id) {
  const ms = arg();
  if (waiter.timer !== null) cancelTimer(waiter.timer);
  waiter.timer = ms < 0 ? null : timer(ms, () => {
    waiter.timer = null;
    pollWaiter(id);
  });
}

/** The waiter stops waiting: its timer goes too. */
function forget(waiter, id) {
  waiters.delete(id);
  if (waiter.timer !== null) cancelTimer(waiter.timer);
  waiter.timer = null;
}

function pollWaiter(id) {
  const waiter = waiters.get(id);
  if (waiter === undefined) return;
  waiter.scheduled = false;
  const code = w.__kPoll(id, performance.now());
  if (code === STILL_QUEUED) return rearm(waiter, id);
  forget(waiter, id);
  waiter.go(code);
  // Not granted (or granted and already ended): an end held back for this hand-over is told.
  memoryEnded(waiter.store, waiter.key);
}

// Waiters woken and not stepped yet, in the order woken (`woken[wokenAt]` is next): each wake
// queues one microtask, which steps the oldest. A resolved promise's `then` with one function
// for all: Node's `queueMicrotask` makes an async resource and a bound function per call.
const woken = [];
let wokenAt = 0;
const resolved = Promise.resolve();

function stepWoken() {
  const id = woken[wokenAt++];
  if (wokenAt === woken.length) {
    woken.length = 0;
    wokenAt = 0;
  }
  pollWaiter(id);
}

/** Called by the wasm (through promises.js) when the wait of slot `id` can make progress. */
function wakeWaiter(id) {
  const waiter = waiters.get(id);
  if (waiter === undefined || waiter.scheduled) return;
  waiter.scheduled = true;
  woken.push(id);
  resolved.then(stepWoken);
}
setWaiterWake(wakeWaiter);

// === Store calls: each answer bounded =======================================================

/**
 * A store call's answer, watched from the moment the call is made. The caller gives it one
 * microtask (`await null`): an answer that is there by then — a store answering from memory —
 * is taken as it is, without a timer or a promise of its own; only one that is not starts the
 * bound's timer (`later`). Seam rule 6: no store call is awaited longer than its bound.
 */
class Pending {
  constructor(answer) {
    this.done = false;
    this.failed = false;
    this.value = undefined;
    this.wake = null;
    answer.then(
      (value) => this.settle(value, false),
      (error) => this.settle(error, true),
    );
  }

  settle(value, failed) {
    if (this.done) return; // a thenable that calls back twice: the first answer stands
    this.done = true;
    this.failed = failed;
    this.value = value;
    if (this.wake !== null) this.wake();
  }

  /** The answer (a failure is thrown), once it came. */
  get result() {
    if (this.failed) throw this.value;
    return this.value;
  }

  /** The answer once it comes, or UNANSWERED if `ms` pass first, or ABORTED if `signal` aborts. */
  later(ms, signal) {
    if (signal !== undefined && signal.aborted) return Promise.resolve(ABORTED);
    return new Promise((resolve, reject) => {
      const stopListening = onAbort(signal, () => {
        cancelTimer(t);
        this.wake = null;
        resolve(ABORTED);
      });
      const t = timer(ms, () => {
        stopListening();
        resolve(UNANSWERED);
      });
      this.wake = () => {
        cancelTimer(t);
        stopListening();
        if (this.failed) reject(this.value);
        else resolve(this.value);
      };
    });
  }
}

/** A store call's answer as a Pending, or null when it answered synchronously. */
function pending(answer) {
  return isThenable(answer) ? new Pending(answer) : null;
}

/** What a store call answered (`answer`, as it returned), or UNANSWERED after `bound` ms. */
async function settle(answer, bound) {
  const p = pending(answer);
  await null;
  return p === null ? answer : p.done ? p.result : p.later(bound);
}

/**
 * A JS store's answer to a release (within its `bound`), recorded by the core: RELEASED,
 * CLOSED, SPARED (released, and the slot let go of) or REFUSED (the hold was lost).
 */
function released(id, answer, bound) {
  if (answer === UNANSWERED) throw w.__kTimeoutError(id, OP_RELEASE, bound);
  if (typeof answer !== "boolean") throw w.__kReleaseAnswerError(answer);
  const code = w.__kReleased(id, answer);
  if (code === FAILED) throw w.__kError();
  return code;
}

/** What a run or an acquire answers when the key was not taken. */
function refused(fn) {
  return fn === ACQUIRE_ONLY ? false : [false, undefined];
}

/** Resolves after `ms` (false), or as soon as `signal` (may be undefined) aborts (true). */
function pause(ms, signal) {
  if (signal === undefined) return new Promise((resolve) => timer(ms, () => resolve(false)));
  if (signal.aborted) return Promise.resolve(true);
  return new Promise((resolve) => {
    const stopListening = onAbort(signal, () => {
      cancelTimer(t);
      resolve(true);
    });
    const t = timer(ms, () => {
      stopListening();
      resolve(false);
    });
  });
}

// === Lock events ============================================================================

// Handles whose calls are not told on their own: a set's per-key handles (the set is told as
// one), and any call made while a told call is entering (its plain twin).
const setParts = new WeakSet();
const events = eventState();
let quiet = 0;
// How the grant now being handed to a run came, set by the wait that ended in it and read, in
// the same synchronous stretch, by the told run (null: it came at once). An acquire files its
// way in `acquiredVia` under the handle the user called.
let grantVia = null;
const acquiredVia = new WeakMap();

/** How the grant a told call was just given came: "immediate", "hand-over" or "poll". */
function takeVia(handle) {
  const via = acquiredVia.get(handle) ?? grantVia ?? "immediate";
  acquiredVia.delete(handle);
  grantVia = null;
  return via;
}

function told(handle) {
  return quiet === 0 && !setParts.has(handle);
}

/** `call(fn')`, the plain run or acquire of `handle` on `store`, told as lock events (`events.js`). */
function toldRun(handle, store, fn, options, call) {
  grantVia = null;
  return observed(handle, fn, options, () => takeVia(handle), storeName(store.object), (inner) => {
    quiet++;
    try {
      // The user's fn is told again: a lock it takes is its own call.
      return call(inner === undefined ? undefined : (context) => {
        const outer = quiet;
        quiet = 0;
        try {
          return inner(context);
        } finally {
          quiet = outer;
        }
      });
    } finally {
      quiet--;
    }
  });
}

/** `call()`, the plain release or extend of `handle` on `store`, told as one lock event. */
function toldStep(handle, store, type, call) {
  return observedStep(handle, type, storeName(store.object), () => {
    quiet++;
    try {
      return call();
    } finally {
      quiet--;
    }
  });
}

// === Options and abort signals ==============================================================

/**
 * The Web Locks API's request options, on `handle` (a Lock or a set of keys): `ifAvailable:
 * true` takes the key only if it is free now (keel-lock's default, `timeout` 0); `steal: true`
 * frees the key whoever holds it (`forceRelease`: the old holder learns at its next extend,
 * its run's signal aborting) and then takes it with the other options — a waiter already queued
 * for it is served first. Checked, then `then(rest)` with the other options.
 */
function webLocksOptions(handle, options, then) {
  const { ifAvailable, steal, ...rest } = options;
  for (const [name, value] of [["ifAvailable", ifAvailable], ["steal", steal]]) {
    if (value !== undefined && typeof value !== "boolean") {
      return Promise.reject(new TypeError(`options.${name} must be a boolean, got ${typeof value}`));
    }
  }
  if (ifAvailable && steal) {
    return Promise.reject(new TypeError("options.ifAvailable and options.steal cannot be combined: one leaves a held key alone, the other takes it"));
  }
  if (ifAvailable && rest.timeout !== undefined && rest.timeout !== 0) {
    return Promise.reject(new TypeError(`options.ifAvailable never waits, so it cannot be combined with timeout ${String(rest.timeout)}`));
  }
  if (!steal) return then(rest);
  if (handle.limit !== null) {
    return Promise.reject(new TypeError("options.steal takes a key to hold alone: a semaphore permit or a read lock cannot steal"));
  }
  return handle.forceRelease().then(() => then(rest));
}

const NO_OPTIONS = [NaN, NaN, undefined, undefined, undefined, undefined];

/**
 * Run options this layer drives itself: `[timeout, retryDelay, signal, autoExtend, permits,
 * metadata]` (NaN, undefined = not given), or null.
 */
function plainOptions(options) {
  if (options === undefined || options === null) return NO_OPTIONS;
  if (typeof options !== "object") return null;
  const { timeout, retryDelay, signal, autoExtend, permits, metadata } = options;
  const number = (v) => v === undefined || (typeof v === "number" && v === v);
  if (!number(timeout) || !number(retryDelay)) return null;
  return [timeout ?? NaN, retryDelay ?? NaN, signal, autoExtend, permits, metadata];
}

/** What an aborted wait rejects with: the signal's reason, or an AbortError when it has none. */
function abortReason(signal) {
  if (signal.reason !== undefined) return signal.reason;
  const error = new Error("the operation was aborted");
  error.name = "AbortError";
  return error;
}

const nothing = () => {};

/** Calls `f` once if `signal` (may be undefined) aborts, until the returned function is called. */
function onAbort(signal, f) {
  if (signal === undefined) return nothing;
  signal.addEventListener("abort", f, { once: true });
  return () => signal.removeEventListener("abort", f);
}

// === The Lock ================================================================================

/** A lock on one key. Created by `lock(key, ttlMs)` or `restoreLock(serialized)`. */
export class Lock {
  #key;
  #ttl;
  #store;
  // 0 for a lock (the key alone); else the limit its shared holds are under (a semaphore's, or
  // 2^32 - 1 for a read lock).
  #limit = 0;
  #slot = 0;
  // The permits the slot's core lock was last told by this handle (undefined: not known).
  #told = undefined;
  #busy = false;
  #registered = false;
  // The metadata of the run in progress on the memory store (undefined: none), which the
  // grant's fence files in the store's `memoryMetadata`.
  #saying = undefined;
  // The run's `autoExtend` option while it acquires (undefined: none); the watcher of the run's
  // hold (its context's signal was read, or it auto-extends); the one `autoExtend()` started.
  #runAutoExtend = undefined;
  #runWatch = null;
  #autoExtender = null;
  // On a twin (see `#twin`): the handle it is the twin of; else null.
  #twinOf = null;

  static {
    setRunObserver((handle, context) => handle.#observeRun(context));
  }

  constructor(token, key, ttl, store, slot = 0, limit = 0) {
    if (token !== internal) throw new TypeError("use lock(key, ttlMs) or restoreLock(serialized)");
    this.#key = key;
    this.#ttl = ttl;
    this.#store = store;
    this.#limit = limit;
    // A restored handle holds from the start, in the slot restoreLock opened; a twin (see
    // `#twin`) starts on a second slot of its handle's core lock.
    if (slot !== 0) this.#settled(slot);
  }

  /**
   * For an operation that starts while this handle is busy with another: a handle of its own on
   * a second slot of the same core lock (so the same hold), let go of when it is idle again.
   */
  #twin() {
    const id = this.#slot !== 0 ? w.__kTwin(this.#slot) : 0;
    if (id === FAILED) throw w.__kError();
    // The twin shares the core lock and tells it its own permits.
    this.#told = undefined;
    const twin = new Lock(internal, this.#key, this.#ttl, this.#store, id, this.#limit);
    twin.#twinOf = this;
    return twin;
  }

  #open() {
    if (
      spareId !== 0 &&
      spareKey === this.#key &&
      spareTtl === this.#ttl &&
      spareStore === this.#store &&
      spareLimit === this.#limit
    ) {
      const id = spareId;
      spareId = 0;
      this.#slot = id;
      if (this.#limit !== 0) this.#told = sparePermits;
      return id;
    }
    const id = w.__kOpen(this.#key, this.#ttl, this.#store.binding);
    if (id === FAILED) throw w.__kError();
    this.#slot = id;
    if (this.#limit !== 0) this.#told = undefined;
    return id;
  }

  /** The slot is `id` (0: none) after an operation: a slot that outlives it is watched. */
  #settled(id) {
    if (this.#registered) {
      slots.unregister(this);
      this.#registered = false;
    }
    this.#slot = id;
    if (id !== 0) {
      slots.register(this, id, this);
      this.#registered = true;
    }
  }

  /**
   * A fast operation is over: let go of the slot if the handle is idle (`after`: what ending
   * the hold already did with it — CLOSED, SPARED — or any other code when nothing), else keep
   * it watched.
   */
  #done(after) {
    this.#busy = false;
    // Any other code (REFUSED, RELEASED, FAILED) left the slot with the handle.
    if (after !== CLOSED && after !== SPARED) {
      after = w.__kClose(this.#slot, false);
      if (after === KEPT && this.#twinOf !== null) return this.#handBack();
      if (after === KEPT) {
        if (!this.#registered) this.#settled(this.#slot);
        return;
      }
    }
    if (after === SPARED) this.#idle();
    else this.#settled(0);
  }

  /**
   * A twin's operation is over and its slot outlives it: the core lock holds something (the
   * hold this twin's `acquire()` took, or its handle's own). The handle keeps the core lock
   * through its own slot, or, having let go of it meanwhile, takes this one.
   */
  #handBack() {
    const id = this.#slot;
    const handle = this.#twinOf;
    this.#settled(0);
    if (handle.#slot === 0) {
      handle.#settled(id);
      handle.#told = undefined;
    } else w.__kClose(id, true);
  }

  /** The handle let go of its slot, idle: the slot is the spare, for the next handle on the same. */
  #idle() {
    spareId = this.#slot;
    spareKey = this.#key;
    spareTtl = this.#ttl;
    spareStore = this.#store;
    spareLimit = this.#limit;
    sparePermits = this.#told;
    this.#settled(0);
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
    const fence = w.__kFence(this.#slot);
    return fence === fence ? fence : null;
  }

  get signal() {
    return this.#autoExtender === null ? undefined : this.#autoExtender.context.signal;
  }

  /** Acquire, run `fn({ fence, signal })`, always release: `[true, result]` or `[false, undefined]`. */
  run(fn, options) {
    if (options?.ifAvailable !== undefined || options?.steal !== undefined) {
      return webLocksOptions(this, options, (rest) => this.run(fn, rest));
    }
    if (events.listening && told(this)) return toldRun(this, this.#store, fn, options, (inner) => this.run(inner, options));
    const plain = plainOptions(options);
    if (plain === null) return Promise.reject(w.__kOptionsError(options, true));
    if (typeof fn !== "function") {
      // Every option is checked before `fn`.
      return Promise.reject(w.__kOptionsError(options, true) ?? w.__kNotAFunction(fn));
    }
    if (this.#busy) return this.#twin().run(fn, options);
    if (plain[4] !== undefined && this.#limit === 0) {
      w.__kShare(0, plain[4], 0);
      return Promise.reject(w.__kError());
    }
    if (plain[2] !== undefined || (plain[3] !== undefined && plain[3] !== false)) {
      // A signal or autoExtend: the core checks every option, in order, before anything starts.
      const error = w.__kOptionsError(options, true);
      if (error !== undefined) return Promise.reject(error);
    }
    return this.#run(fn, plain[0], plain[1], plain[2], plain[3], plain[4], plain[5]);
  }

  /** `run(fn)` that never waits. */
  runImmediately(fn) {
    if (events.listening && told(this)) return toldRun(this, this.#store, fn, undefined, (inner) => this.runImmediately(inner));
    if (typeof fn !== "function") return Promise.reject(w.__kNotAFunction(fn));
    if (this.#busy) return this.#twin().runImmediately(fn);
    return this.#run(fn, NaN, NaN, undefined, undefined);
  }

  /** `signal` and `keep` (autoExtend) were checked by the caller, with the other options. */
  #run(fn, timeout, retryDelay, signal, keep, permits, metadata) {
    if (keep === false) keep = undefined;
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
      if (p !== this.#told) {
        // Permits are checked against the limit (a RangeError) before anything starts.
        if (w.__kShare(id, permits, this.#limit) === FAILED) {
          this.#done(KEPT);
          return Promise.reject(w.__kError());
        }
        this.#told = p;
      }
    }
    if (metadata !== undefined) {
      const error = metadataError(this.#store, metadata);
      if (error !== undefined) {
        this.#done(KEPT);
        return Promise.reject(error);
      }
    }
    this.#busy = true;
    this.#runAutoExtend = keep;
    this.#saying = metadata;
    const code = w.__kBegin(id, timeout, retryDelay, performance.now());
    if (code === FAILED) {
      this.#done(KEPT);
      return Promise.reject(w.__kError());
    }
    if (code === REFUSED) {
      this.#done(KEPT);
      return Promise.resolve(refused(fn));
    }
    if (code >= 1 || code === HELD_UNFENCED) return this.#holding(id, fn, code);
    if (code === STILL_QUEUED) return this.#queued(id, fn, signal);
    return this.#runOverStore(id, code, fn, signal, permits ?? 1, metadata);
  }

  /**
   * Waits in the memory store's queue, which `__kBegin` joined; the hand-over calls `fn` in the
   * microtask it wakes. An abort leaves the queue (the core gives back a grant that raced it).
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
              w.__kWithdraw(id);
              this.#done(KEPT);
              memoryEnded(waiter.store, waiter.key);
              reject(abortReason(signal));
            });
      waiter.go = (code) => {
        stopListening();
        if (code >= 1 || code === HELD_UNFENCED) {
          grantVia = "hand-over";
          this.#holdingInto(id, fn, code, resolve, reject);
          grantVia = null;
          return;
        }
        this.#done(KEPT);
        if (code === FAILED) reject(w.__kError());
        else resolve(refused(fn));
      };
    });
  }

  /** `acquire()` took the key: the hold is the handle's, kept in its slot until released. */
  #adopt(id) {
    ok(w.__kAdopt(id));
    if (events.listening) {
      acquiredVia.set(this.#twinOf ?? this, grantVia ?? "immediate");
      grantVia = null;
    }
    this.#done(KEPT);
    return true;
  }

  /** Files the run's metadata under the fence `code` of the hold it took on the memory store. */
  #said(code) {
    if (code >= 1) keepMemoryMetadata(this.#store.object, this.#key, code, this.#saying);
    this.#saying = undefined;
  }

  /** The run took a hold from the memory store (fence `code`): its watchers are told. */
  #granted(code) {
    if (this.#limit === 0) memoryGranted(this.#store.object, this.#key, code);
  }

  /** Runs `fn` on the hold the run took from the memory store, then ends it. */
  #holding(id, fn, code) {
    if (this.#saying !== undefined) this.#said(code);
    if (memoryWatchCount !== 0) this.#granted(code);
    if (fn === ACQUIRE_ONLY) return Promise.resolve(this.#adopt(id));
    const context = new LockContext(code >= 1 ? code : null, this);
    if (this.#runAutoExtend !== undefined) this.#startRunAutoExtend(id, context);
    let out;
    try {
      out = fn(context);
    } catch (error) {
      return this.#end(id, context, error, true);
    }
    if (isThenable(out)) {
      return Promise.resolve(out).then(
        (value) => this.#ended(id, context, value, false),
        (error) => this.#ended(id, context, error, true),
      );
    }
    return this.#end(id, context, out, false);
  }

  /**
   * `#holding` for a run woken in the memory store's queue: the run's own promise is settled
   * with `resolve`/`reject`, with no promise between it and `fn`'s.
   */
  #holdingInto(id, fn, code, resolve, reject) {
    if (this.#saying !== undefined) this.#said(code);
    if (memoryWatchCount !== 0) this.#granted(code);
    if (fn === ACQUIRE_ONLY) {
      try {
        resolve(this.#adopt(id));
      } catch (error) {
        reject(error);
      }
      return;
    }
    const context = new LockContext(code >= 1 ? code : null, this);
    if (this.#runAutoExtend !== undefined) this.#startRunAutoExtend(id, context);
    let out;
    try {
      out = fn(context);
    } catch (error) {
      return this.#endInto(id, context, error, true, resolve, reject);
    }
    if (isThenable(out)) {
      Promise.resolve(out).then(
        (value) => this.#endInto(id, context, value, false, resolve, reject),
        (error) => this.#endInto(id, context, error, true, resolve, reject),
      );
    } else this.#endInto(id, context, out, false, resolve, reject);
  }

  /** Releases the run's hold on the memory store: the release's error, or undefined. */
  #release(id, context) {
    LockContext.end(context);
    // The memory store extends inside the wasm: no extend can be in flight to wait for.
    if (this.#runWatch !== null) this.#stopRunWatch();
    const code = w.__kEnd(id, performance.now());
    const error = code === FAILED ? w.__kError() : undefined;
    this.#done(code);
    memoryEnded(this.#store.object, this.#key);
    return error;
  }

  /** Ends the run: `[true, value]` as a promise, or the task's error, which wins over the release's. */
  #end(id, context, value, failed) {
    const error = this.#release(id, context);
    if (failed) return Promise.reject(value);
    return error === undefined ? Promise.resolve([true, value]) : Promise.reject(error);
  }

  /** `#end`'s answer itself: `[true, value]`, or thrown. */
  #ended(id, context, value, failed) {
    const error = this.#release(id, context);
    if (failed) throw value;
    if (error !== undefined) throw error;
    return [true, value];
  }

  /** `#ended` into the run's `resolve`/`reject`. */
  #endInto(id, context, value, failed, resolve, reject) {
    try {
      resolve(this.#ended(id, context, value, failed));
    } catch (error) {
      reject(error);
    }
  }

  /**
   * `run()` over a JS store, as one async function: the acquisition's steps (each store call
   * bounded as the core says), `fn`, and the release. The task's error wins over the release's.
   */
  async #runOverStore(id, code, fn, signal, permits, metadata) {
    const store = this.#store;
    let owner = "";
    // How the grant came when the run waited for it: "poll" or "hand-over" (told as events).
    let via = null;
    try {
      for (;;) {
        if (code === CALL || code === CALL_ACQUIRE_OR_WAIT) {
          const bound = arg();
          const waits = code === CALL_ACQUIRE_OR_WAIT;
          owner = ownerOf(id);
          let sent;
          let answer;
          try {
            if (this.#limit !== 0) {
              sent = this.#acquireShared(store, owner, waits, permits, metadata);
            } else if (metadata !== undefined) {
              sent = this.#acquireSaying(store, owner, waits, metadata);
            } else if (waits) {
              const [waitMs, pollMs] = waitExtras();
              sent = store.acquireOrWait.call(store.object, this.#key, owner, this.#ttl, waitMs, pollMs);
            } else {
              sent = store.acquire.call(store.object, this.#key, owner, this.#ttl);
            }
            answer = sent;
            const p = pending(sent);
            await null;
            if (p !== null) answer = p.done ? p.result : await p.later(bound, waits ? signal : undefined);
          } catch (error) {
            ok(w.__kAbandon(id));
            throw error;
          }
          if (answer === ABORTED) {
            releaseLateGrant(sent, store.object, this.#key, owner);
            await this.#withdraw(id, owner);
            throw abortReason(signal);
          }
          if (signal !== undefined && signal.aborted && answer !== UNANSWERED && answer !== false) {
            // Granted as the signal aborted: given back before the core takes the hold.
            await this.#withdraw(id, owner);
            throw abortReason(signal);
          }
          if (answer === UNANSWERED) {
            releaseLateGrant(sent, store.object, this.#key, owner);
            code = ok(w.__kUnanswered(id));
          } else if (typeof answer === "boolean") {
            code = ok(w.__kAnswered(id, answer ? ANSWER_TRUE : ANSWER_FALSE, 0));
          } else if (waits) {
            if (answer !== null && typeof answer === "object" && answer.waitedMs > 0) via = "hand-over";
            code = ok(w.__kAnsweredWaited(id, answer));
          } else if (answer !== null && typeof answer === "object" && typeof answer.fence === "number") {
            code = ok(w.__kAnswered(id, ANSWER_FENCE, answer.fence));
          } else {
            code = ok(w.__kAnsweredValue(id, answer));
          }
        } else if (code === SLEEP) {
          via = "poll";
          if (await pause(arg(), signal)) {
            ok(w.__kAbandon(id));
            throw abortReason(signal);
          }
          code = ok(w.__kRetry(id));
        } else if (code === TIMED_OUT) {
          throw w.__kTimeoutError(id, OP_ACQUIRE, arg());
        } else {
          break;
        }
      }
    } catch (error) {
      this.#done(KEPT);
      throw error;
    }
    if (code === REFUSED) {
      this.#done(KEPT);
      return refused(fn);
    }
    grantVia = via;
    if (fn === ACQUIRE_ONLY) return this.#adopt(id);
    const context = new LockContext(code >= 1 ? code : null, this);
    if (this.#runAutoExtend !== undefined) this.#startRunAutoExtend(id, context);
    let value;
    let failed = false;
    try {
      value = fn(context);
      grantVia = null;
      if (isThenable(value)) value = await value;
    } catch (error) {
      grantVia = null;
      value = error;
      failed = true;
    }
    LockContext.end(context);
    // An extend in flight finishes before the release.
    if (this.#runWatch !== null) await this.#stopRunWatch();
    let releaseFailed = false;
    let releaseError;
    let after = KEPT;
    try {
      // The run's hold is the one its last acquire call was granted, under that call's token.
      const ending = w.__kEnd(id, NaN);
      if (ending === FAILED) throw w.__kError();
      if (ending === CALL) {
        // As #storeRelease does, written out here: one async call less per run().
        const bound = arg();
        let answer = store.release.call(store.object, this.#key, owner);
        const p = pending(answer);
        await null;
        if (p !== null) answer = p.done ? p.result : await p.later(bound);
        after = released(id, answer, bound);
      }
    } catch (error) {
      // The hold is no longer tracked as the run's.
      w.__kForget(id);
      releaseFailed = true;
      releaseError = error;
    }
    this.#done(after);
    if (failed) throw value;
    if (releaseFailed) throw releaseError;
    return [true, value];
  }

  /**
   * A semaphore's or read lock's acquire call on a JS store (which must keep shared holds);
   * `metadata`, when given, goes after the documented arguments.
   */
  #acquireShared(store, owner, waits, permits, metadata) {
    if (typeof store.acquireShared !== "function") throw w.__kNoShared();
    const said = metadata === undefined ? [] : [metadata];
    if (waits) {
      const [waitMs, pollMs] = waitExtras();
      return store.acquireSharedOrWait.call(
        store.object, this.#key, owner, this.#ttl, permits, this.#limit, waitMs, pollMs, ...said,
      );
    }
    return store.acquireShared.call(store.object, this.#key, owner, this.#ttl, permits, this.#limit, ...said);
  }

  /** A lock's acquire call on a JS store that keeps metadata, `metadata` after the others. */
  #acquireSaying(store, owner, waits, metadata) {
    if (waits) {
      const [waitMs, pollMs] = waitExtras();
      return store.acquireOrWait.call(store.object, this.#key, owner, this.#ttl, waitMs, pollMs, metadata);
    }
    return store.acquire.call(store.object, this.#key, owner, this.#ttl, metadata);
  }

  /** Who holds the key and who waits: see `inspect(key)`. */
  inspect() {
    return inspectOn(this.#store, this.#key, this.#ttl);
  }

  /**
   * The JS store's `release(key, owner)` that a step answered CALL for (ending a run's hold, or
   * `release()`), within the step's bound: the core's code for its answer (RELEASED…, or REFUSED:
   * the hold was lost). On an error the hold is no longer tracked as the run's.
   */
  async #storeRelease(id, owner) {
    const store = this.#store;
    let code;
    try {
      const bound = arg();
      let answer = store.release.call(store.object, this.#key, owner);
      const p = pending(answer);
      await null;
      if (p !== null) answer = p.done ? p.result : await p.later(bound);
      code = released(id, answer, bound);
    } catch (error) {
      // The hold is no longer tracked as the run's; the release's error is the one to report.
      w.__kForget(id);
      this.#done(KEPT);
      throw error;
    }
    // In the turn the core answered: a slot it made the spare closed the spare before it, which
    // must stop being named the spare here before any other handle can take it.
    this.#done(code);
    return code;
  }

  /** An aborted caller leaves a JS store's queue: `withdraw(key, owner)`, or `release`. */
  async #withdraw(id, owner) {
    const code = w.__kWithdraw(id);
    if (code === FAILED) throw w.__kError();
    if (code !== CALL) return;
    const bound = arg();
    const store = this.#store;
    const withdraws = store.withdraw !== undefined;
    const method = withdraws ? store.withdraw : store.release;
    const answer = await settle(method.call(store.object, this.#key, owner), bound);
    if (answer === UNANSWERED) throw w.__kTimeoutError(id, OP_ACQUIRE, bound);
    if (!withdraws && typeof answer !== "boolean") throw w.__kReleaseAnswerError(answer);
  }

  /** Tries to take the lock; with `{ timeout }`, waits until then. Resolves a boolean. */
  acquire(options) {
    if (options?.ifAvailable !== undefined || options?.steal !== undefined) {
      return webLocksOptions(this, options, (rest) => this.acquire(rest));
    }
    if (events.listening && told(this)) return toldRun(this, this.#store, null, options, () => this.acquire(options));
    const plain = plainOptions(options);
    if (plain === null) return Promise.reject(w.__kOptionsError(options, false));
    if (this.#busy) return this.#twin().acquire(options);
    if (plain[4] !== undefined && this.#limit === 0) {
      w.__kShare(0, plain[4], 0);
      return Promise.reject(w.__kError());
    }
    if (plain[2] !== undefined) {
      const error = w.__kOptionsError(options, false);
      if (error !== undefined) return Promise.reject(error);
    }
    return this.#run(ACQUIRE_ONLY, plain[0], plain[1], plain[2], undefined, plain[4], plain[5]);
  }

  /** Frees the lock if this handle still owns it; resolves `false` (never throws) otherwise. */
  release() {
    if (events.listening && told(this)) return toldStep(this, this.#store, "release", () => this.release());
    if (this.#autoExtender !== null) {
      // autoExtend() stops first, and an extend in flight finishes, before the release.
      const keeper = this.#autoExtender;
      this.#autoExtender = null;
      return keeper.stop().then(() => this.release());
    }
    if (this.#busy) return this.#twin().release();
    const id = this.#slot;
    if (id === 0) return Promise.resolve(false); // no slot: nothing held, nothing lost
    this.#busy = true;
    const code = w.__kRelease(id, this.#store.memory ? performance.now() : NaN);
    if (code === FAILED) {
      this.#done(KEPT);
      return Promise.reject(w.__kError());
    }
    if (code !== CALL) {
      this.#done(code);
      if (this.#store.memory) memoryEnded(this.#store.object, this.#key);
      return Promise.resolve(code !== REFUSED);
    }
    return this.#storeRelease(id, ownerOf(id)).then((released) => released !== REFUSED);
  }

  /** Resets the expiry to `ttlMs` (default: the lock's TTL) from now, or rejects LockNotHeldError. */
  extend(ttlMs) {
    if (events.listening && told(this)) return toldStep(this, this.#store, "extend", () => this.extend(ttlMs));
    const given = ttlMs !== undefined;
    if (given && typeof ttlMs !== "number") return Promise.reject(w.__kNotANumber("ttlMs", ttlMs));
    const id = this.#slot;
    // No slot: the handle holds nothing.
    if (id === 0) return Promise.reject(w.__kExtendIdle(this.#key, given ? ttlMs : 0, given));
    return this.#extended(w.__kExtend(id, given ? ttlMs : 0, given));
  }

  /** What an extend step (`code`) comes to: done, an error, or a JS store's call to make. */
  #extended(code) {
    if (code === FAILED) return Promise.reject(w.__kError());
    if (code !== CALL) return Promise.resolve(); // EXTENDED
    return this.#extendOverStore(this.#slot);
  }

  /** A JS store's extend, its answer recorded by the core against the hold it was about. */
  async #extendOverStore(id) {
    const bound = arg();
    if (out.length === 0) view();
    const ttl = out[OUT_TTL];
    const extendId = out[OUT_EXTEND_ID];
    const owner = ownerOf(id);
    const store = this.#store;
    let answer;
    try {
      answer = await settle(store.extend.call(store.object, this.#key, owner, ttl), bound);
    } catch (error) {
      w.__kExtendFailed(extendId);
      throw error;
    }
    const unanswered = answer === UNANSWERED;
    if (w.__kExtended(extendId, unanswered ? undefined : answer, unanswered) === FAILED) throw w.__kError();
  }

  /** A store call about the key alone (`op`): the core's answer code, after the store's if a JS one. */
  #inspect(op) {
    const code = w.__kInspect(this.#key, this.#store.binding, op, this.#ttl);
    if (code === FAILED) return Promise.reject(w.__kError());
    if (code !== CALL) return Promise.resolve(code);
    return this.#inspectStore(op, arg());
  }

  async #inspectStore(op, bound) {
    const store = this.#store;
    const answer = await settle(store[op].call(store.object, this.#key), bound);
    const unanswered = answer === UNANSWERED;
    const code = w.__kInspected(this.#key, op, unanswered ? undefined : answer, unanswered, bound);
    if (code === FAILED) throw w.__kError();
    return code;
  }

  /**
   * Keeps extending the held lock until `release()` or `stopAutoExtend()`; returns the hold's
   * context, whose signal aborts when the hold is lost. Again while it runs: the same context.
   */
  autoExtend(options) {
    if (this.#autoExtender !== null) return this.#autoExtender.context;
    if (options !== undefined && w.__kKeepAliveCheck(options) === FAILED) throw w.__kError();
    if (this.#slot === 0) throw w.__kNotHeld(this.#key, NOT_HELD_EXTEND);
    const watcher = w.__kWatch(this.#slot, true, options, performance.now());
    if (watcher === FAILED) throw w.__kError();
    this.#autoExtender = this.#watch(watcher, new LockContext(this.fence));
    return this.#autoExtender.context;
  }

  /** Stops `autoExtend()`; resolves once no extend is in flight. The lock stays held. */
  stopAutoExtend() {
    const keeper = this.#autoExtender;
    this.#autoExtender = null;
    return keeper === null ? Promise.resolve() : keeper.stop().then(() => undefined);
  }

  /** The run's context had its signal read: watch the run's hold, and abort it when lost. */
  #observeRun(context) {
    if (this.#runWatch !== null || this.#slot === 0) return;
    const watcher = w.__kWatch(this.#slot, false, undefined, performance.now());
    if (watcher === FAILED) {
      w.__kError(); // nothing held: nothing to watch
      return;
    }
    this.#runWatch = this.#watch(watcher, context);
  }

  /**
   * `fn(context)` on the hold this handle acquired, as a run's `fn` gets it (its signal watches
   * the hold once read; `keep`: autoExtend on while `fn` runs). For a multi-key run whose keys
   * came from one store step; the caller releases afterwards.
   */
  async [RUN_ON_HOLD](fn, keep) {
    const context = keep ? this.autoExtend(keep === true ? undefined : keep) : new LockContext(this.fence, this);
    try {
      return await fn(context);
    } finally {
      LockContext.end(context);
      if (keep) await this.stopAutoExtend();
      else if (this.#runWatch !== null) await this.#stopRunWatch();
    }
  }

  /** The run took the key with `autoExtend`: keep its hold alive while `fn` runs. */
  #startRunAutoExtend(id, context) {
    const keep = this.#runAutoExtend;
    this.#runAutoExtend = undefined;
    const watcher = w.__kWatch(id, true, keep, performance.now());
    if (watcher !== FAILED) this.#runWatch = this.#watch(watcher, context);
    else w.__kError();
  }

  #stopRunWatch() {
    const watch = this.#runWatch;
    this.#runWatch = null;
    return watch.stop();
  }

  /**
   * Drives the core's watcher `watcher` from JS timers: sleeps, extends when told, and when the
   * hold is lost aborts `context` with the core's LockNotHeldError. `stop()` ends it and
   * resolves once no extend is in flight.
   */
  #watch(watcher, context) {
    const key = this.#key;
    let stopped = false;
    let sleeping = null;
    let wake = null;
    const loop = (async () => {
      while (!stopped) {
        const code = w.__kWatchNext(watcher, performance.now());
        if (code === WATCH_SLEEP) {
          await new Promise((resolve) => {
            wake = resolve;
            sleeping = timer(arg(), resolve);
          });
          sleeping = null;
        } else if (code === WATCH_EXTEND) {
          let ok = true;
          try {
            await this.#extended(w.__kWatchExtend(watcher));
          } catch {
            ok = false;
          }
          w.__kWatchExtended(watcher, ok, performance.now());
          if (stopped && w.__kWatchNext(watcher, performance.now()) === WATCH_LOST) {
            // Stopped mid-extend, and that extend lost the hold: the context still hears of it.
            const reason = arg();
            if (reason !== LOST_NOTHING) LockContext.lose(context, w.__kLostError(key, reason));
            return;
          }
        } else {
          // Lost: the core has let the watcher go.
          const reason = arg();
          if (reason !== LOST_NOTHING) LockContext.lose(context, w.__kLostError(key, reason));
          return;
        }
      }
      w.__kWatchStop(watcher);
    })();
    return {
      context,
      stop() {
        if (!stopped) {
          stopped = true;
          if (sleeping !== null) {
            cancelTimer(sleeping);
            sleeping = null;
            wake();
          }
        }
        return loop;
      },
    };
  }

  /** Frees the key whoever holds it; resolves whether anyone did. */
  forceRelease() {
    return this.#inspect(OP_FORCE_RELEASE).then((code) => code === YES);
  }

  /** The hold as a string for `restoreLock`, or throws LockNotHeldError. */
  serialize() {
    if (this.#slot === 0) throw w.__kNotHeld(this.#key, NOT_HELD_SERIALIZE);
    return textOf(w.__kSerialize(this.#slot));
  }

  /** Whether anyone (not necessarily this handle) holds the key. */
  isLocked() {
    return this.#inspect(OP_IS_LOCKED).then((code) => code === YES);
  }

  isExpired() {
    return Promise.resolve(this.#slot !== 0 && w.__kExpired(this.#slot));
  }

  /** Milliseconds until the key's expiry, or null when nobody holds it. */
  getRemainingTime() {
    return this.#inspect(OP_REMAINING_TIME).then((code) => (code === NOBODY ? null : code));
  }
}

// === Several keys at once ===================================================================
// `lock([k1, k2, …])`: the rules of the core's MultiLock (ARCHITECTURE.md, "Several keys at
// once"), applied to the keys' own handles: taken one at a time in one canonical order, each
// within what is left of the timeout, all held or none. The handles already do everything a key
// needs; doing the composition in the wasm too would cost bytes the Node build's budget no
// longer has (docs/wasm-size.md).

/** The most keys one lock takes. */
const MAX_KEYS = 64;
/** Marks a nested run whose inner key was not taken (or must be taken again). */
const NOT_ALL = Symbol("not every key");
const PERMITS_ON_SET = "lock: permits are for semaphores; a multi-key lock takes each key whole";
const asyncDispose = Symbol.asyncDispose ?? Symbol.for("Symbol.asyncDispose");

/**
 * Orders two strings by code point — the order of their UTF-8 bytes, in which the Rust core
 * sorts keys — so JS and Rust callers of one store take shared keys in the same order.
 */
function byCodePoint(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    let x = a.charCodeAt(i);
    let y = b.charCodeAt(i);
    if (x === y) continue;
    // Code units order code points except where a surrogate (half of one above U+FFFF) meets a
    // unit from U+E000 up: lift surrogates above those.
    if (x >= 0xd800 && y >= 0xd800) {
      x += x >= 0xe000 ? -0x800 : 0x2000;
      y += y >= 0xe000 ? -0x800 : 0x2000;
    }
    return x - y;
  }
  return a.length - b.length;
}

/** A lock over `keys` (an array) for `ttlMs`: each key checked as `lock(key)` checks it. */
function lockKeys(keys, ttlMs) {
  if (keys.length === 0 || keys.length > MAX_KEYS) {
    throw new RangeError(`lock: a multi-key lock needs 1 to ${MAX_KEYS} distinct keys, got ${keys.length}`);
  }
  const store = current ?? bind();
  const step = keys.length > 1 && !store.memory && typeof store.object.acquireMany === "function" ? new OneStep(store) : null;
  const bound = step === null ? store : step.binding;
  const locks = Array.from(keys, (key) => handle(key, ttlMs, 0, bound)).sort((a, b) => byCodePoint(a.key, b.key));
  for (let i = 1; i < locks.length; i++) {
    if (locks[i].key === locks[i - 1].key) throw new TypeError(`lock: key "${locks[i].key}" is given twice`);
  }
  return new MultiKeyLock(internal, locks, step, store);
}

/**
 * A JS store's `acquireMany`, reached through the keys' own handles: they are bound to
 * `binding`, a copy of the store whose `acquire` is collected while `take` runs them, and the
 * collected calls are answered together from one `acquireMany`. Each handle keeps all it does
 * for a single key (its owner token, the bound on its call, releasing a grant that lands late).
 */
class OneStep {
  #calls = null;
  #store;

  constructor(store) {
    this.#store = store;
    const collect = this;
    this.binding = {
      ...store,
      acquire(key, owner, ttlMs, ...said) {
        if (collect.#calls === null) return store.acquire.call(this, key, owner, ttlMs, ...said);
        return new Promise((resolve, reject) => collect.#calls.push({ key, owner, ttlMs, metadata: said[0], resolve, reject }));
      },
    };
  }

  /**
   * Acquires every handle of `locks` at once, their calls answered by one `acquireMany`:
   * `true` when all are held; `false` (none held) when refused; `null` (none held) when the
   * store cannot take this set in one step.
   */
  async take(locks, metadata) {
    this.#calls = [];
    let settled;
    const calls = this.#calls;
    const options = metadata === undefined ? undefined : { metadata };
    try {
      settled = Promise.allSettled(locks.map((lock) => lock.acquire(options)));
    } finally {
      this.#calls = null;
    }
    // A handle that made no call synchronously (it had nothing to send) leaves the step
    // incomplete: it is answered as refused, and the keys are taken one by one.
    let oneStep = calls.length === locks.length;
    if (oneStep) oneStep = await this.#send(calls);
    else for (const call of calls) call.resolve(false);
    const results = await settled;
    let failed;
    let all = true;
    const held = [];
    for (let i = 0; i < results.length; i++) {
      const r = results[i];
      if (r.status === "rejected") failed ??= [r.reason];
      else if (r.value) held.push(locks[i]);
      else all = false;
    }
    if (failed === undefined && all) return true;
    // A partial set (only a store answering per key can leave one) is freed whole.
    for (let i = held.length - 1; i >= 0; i--) await held[i].release().catch(() => {});
    if (failed !== undefined) throw failed[0];
    return oneStep === null ? null : false;
  }

  /** One `acquireMany` for `calls`: each call answered its key's part; null for "not one step". */
  async #send(calls) {
    const store = this.#store;
    let answer;
    try {
      const said = calls[0].metadata === undefined ? [] : [calls.map((c) => c.metadata)];
      answer = await store.object.acquireMany(
        calls.map((c) => c.key),
        calls.map((c) => c.owner),
        calls[0].ttlMs,
        ...said,
      );
    } catch (error) {
      for (const call of calls) call.reject(error);
      return true;
    }
    if (answer === null) {
      for (const call of calls) call.resolve(false);
      return null;
    }
    if (answer === false) {
      for (const call of calls) call.resolve(false);
    } else if (Array.isArray(answer) && answer.length === calls.length) {
      for (let i = 0; i < calls.length; i++) calls[i].resolve(answer[i]);
    } else {
      const error = new TypeError(
        `LockStore.acquireMany must answer false, null or an array of ${calls.length} acquire answers, got ${describe(answer)}`,
      );
      // A grant in a malformed answer is not taken: each key is given back by its own owner.
      for (const call of calls) {
        call.reject(error);
        releaseLateGrant(true, store.object, call.key, call.owner);
      }
    }
    return true;
  }
}

/** A short description of a value for an error message. */
function describe(value) {
  if (Array.isArray(value)) return `an array of ${value.length}`;
  return value === null ? "null" : typeof value === "object" ? "an object" : `${typeof value} ${String(value)}`;
}

/** A signal aborted with the reason of the first of `signals` to abort. */
function anyAborted(signals) {
  const controller = new AbortController();
  for (const signal of signals) {
    if (signal.aborted) {
      controller.abort(signal.reason);
      break;
    }
    signal.addEventListener("abort", () => controller.abort(signal.reason), { once: true });
  }
  return controller.signal;
}

/** What `run(fn)` of a multi-key lock passes to `fn`: a fence per key, and one loss signal. */
class MultiKeyContext {
  #contexts;
  #signal = null;

  constructor(contexts, fences) {
    /** Null: a multi-key lock has a fence per key (`fences`), none for the set. */
    this.fence = null;
    /** Each key's fence, or null when the store keeps no fences. */
    this.fences = fences;
    this.#contexts = contexts;
  }

  /** Aborted the moment any key's hold is known or presumed lost (read: every key is watched). */
  get signal() {
    this.#signal ??= anyAborted(this.#contexts.map((context) => context.signal));
    return this.#signal;
  }
}

/** Each handle's fence by key, or null unless every key is held with one. */
function fencesOf(locks) {
  const fences = {};
  for (const lock of locks) {
    const fence = lock.fence;
    if (fence === null) return null;
    fences[lock.key] = fence;
  }
  return Object.freeze(fences);
}

/** The timeout left of `options` at `elapsed` ms in: the options for the next key. */
function leftOf(options, elapsed) {
  const timeout = options?.timeout;
  if (typeof timeout !== "number" || !(timeout > 0) || timeout === Infinity) return options;
  return { ...options, timeout: Math.max(0, Math.floor(timeout - elapsed)) };
}

class MultiKeyLock {
  #locks;
  #keeping = null;
  // The store's one-step acquisition of every key, while the store offers it for this set.
  #step;
  // The store the set was made over, for its lock events.
  #store;
  // How a key the set waited for came ("hand-over" or "poll"), for its lock events.
  #via = null;

  constructor(token, locks, step = null, store = current ?? bind()) {
    if (token !== internal) throw new TypeError("MultiKeyLock is made by lock([...keys]), not new");
    this.#store = store;
    // The set is told as one: its keys' handles are its parts, not the user's calls.
    for (const l of locks) setParts.add(l);
    this.#locks = locks;
    this.#step = step;
  }

  /**
   * The first attempt, where the store takes the set in one step: `true` (all held), `false`
   * (refused, none held) or undefined (no step to take: the keys are taken one by one).
   */
  async #takeAtOnce(options) {
    if (this.#step === null || options?.signal?.aborted) return undefined;
    const took = await this.#step.take(this.#locks, options?.metadata);
    if (took === null) {
      this.#step = null;
      return undefined;
    }
    if (took && options?.signal?.aborted) {
      // Granted as the signal aborted: given back before anyone is told it is held.
      await this.#free(this.#locks.length);
      throw abortReason(options.signal);
    }
    return took;
  }

  /** A key came after a wait (`via` not null or "immediate"): the set says so when granted. */
  #cameBy(via) {
    if (via !== null && via !== "immediate") this.#via = via;
  }

  /** The keys, in the order they are taken (by code point). */
  get keys() {
    return this.#locks.map((lock) => lock.key);
  }

  get ttlMs() {
    return this.#locks[0].ttlMs;
  }

  /** Null: the set has no fence of its own; each key's is in `fences`. */
  get fence() {
    return null;
  }

  get limit() {
    return null;
  }

  /** Each key's fence while every key is held with one, else null. */
  get fences() {
    return fencesOf(this.#locks);
  }

  /** While autoExtend() runs: aborted when any key's hold is lost. */
  get signal() {
    return this.#keeping?.signal;
  }

  /** Takes every key, the lowest first, or none: `true` when all are held. */
  async acquire(options) {
    if (options?.ifAvailable !== undefined || options?.steal !== undefined) {
      return webLocksOptions(this, options, (rest) => this.acquire(rest));
    }
    if (events.listening && told(this)) return toldRun(this, this.#store, null, options, () => this.acquire(options));
    const started = performance.now();
    const half = this.ttlMs / 2;
    if (this.#step !== null) {
      const error = w.__kOptionsError(options, false);
      if (error !== undefined) throw error;
      if (options?.permits !== undefined) throw new TypeError(PERMITS_ON_SET);
      const took = await this.#takeAtOnce(options);
      if (took === true) return true;
      if (took === false) {
        if (!(options?.timeout > performance.now() - started)) return false;
        options = leftOf(options, performance.now() - started);
      }
    }
    for (;;) {
      let firstAt;
      for (let i = 0; i < this.#locks.length; i++) {
        let got;
        try {
          got = await this.#locks[i].acquire(i === 0 ? options : leftOf(options, performance.now() - started));
        } catch (error) {
          await this.#free(i);
          throw error;
        }
        if (events.listening) this.#cameBy(acquiredVia.get(this.#locks[i]) ?? null);
        if (!got) {
          await this.#free(i);
          return false;
        }
        firstAt ??= performance.now();
      }
      const kept = await this.#keepWhole(firstAt, half);
      if (kept) {
        if (events.listening) acquiredVia.set(this, this.#via ?? "immediate");
        this.#via = null;
        return true;
      }
      if (!(options?.timeout > performance.now() - started)) return false;
    }
  }

  /**
   * After the last key came in: keys held over half their TTL get it anew; a key already lost
   * frees them all (answers false: take them again while the timeout lasts).
   */
  async #keepWhole(firstAt, half) {
    if (performance.now() - firstAt <= half) return true;
    const LockNotHeldError = w.__lockNotHeldErrorClass();
    for (const lock of this.#locks.slice(0, -1)) {
      try {
        await lock.extend();
      } catch (error) {
        await this.#free(this.#locks.length);
        if (error instanceof LockNotHeldError) return false;
        throw error;
      }
    }
    return true;
  }

  /**
   * Frees the first `count` keys, all at once (a request each, in flight together): whether
   * every one was still held; throws the first error once every release has answered.
   */
  async #free(count) {
    const results = await Promise.allSettled(this.#locks.slice(0, count).map((lock) => lock.release()));
    let all = true;
    for (const r of results) {
      if (r.status === "rejected") throw r.reason;
      all = r.value && all;
    }
    return all;
  }

  /** Frees every key, all at once: `true` when every key was still held. */
  async release() {
    if (events.listening && told(this)) return toldStep(this, this.#store, "release", () => this.release());
    if (this.#keeping !== null) await this.stopAutoExtend();
    return this.#free(this.#locks.length);
  }

  /** Resets every key's expiry; a key no longer held frees the others and rejects LockNotHeldError. */
  async extend(ttlMs) {
    if (events.listening && told(this)) return toldStep(this, this.#store, "extend", () => this.extend(ttlMs));
    for (const lock of this.#locks) {
      try {
        await lock.extend(ttlMs);
      } catch (error) {
        if (error instanceof w.__lockNotHeldErrorClass()) await this.release().catch(() => {});
        throw error;
      }
    }
  }

  /** Acquire every key, run `fn({ fence: null, fences, signal })`, always release. */
  run(fn, options) {
    if (options?.ifAvailable !== undefined || options?.steal !== undefined) {
      return webLocksOptions(this, options, (rest) => this.run(fn, rest));
    }
    if (events.listening && told(this)) return toldRun(this, this.#store, fn, options, (inner) => this.run(inner, options));
    if (typeof fn !== "function") return Promise.reject(w.__kNotAFunction(fn));
    if (options?.permits !== undefined) return Promise.reject(new TypeError(PERMITS_ON_SET));
    return this.#runAll(fn, options);
  }

  async #runAll(fn, options) {
    const started = performance.now();
    const locks = this.#locks;
    const half = this.ttlMs / 2;
    if (this.#step !== null) {
      const error = w.__kOptionsError(options, true);
      if (error !== undefined) throw error;
      const took = await this.#takeAtOnce(options);
      if (took === true) return [true, await this.#runOnHolds(fn, options?.autoExtend)];
      if (took === false) {
        if (!(options?.timeout > performance.now() - started)) return [false, undefined];
        options = leftOf(options, performance.now() - started);
      }
    }
    for (;;) {
      const contexts = [];
      let firstAt;
      // Key i's run holds it while the runs of the keys after it go on inside: one key refused
      // unwinds them all, each run releasing its key.
      const inside = (i) => async (context) => {
        contexts[i] = context;
        this.#cameBy(grantVia);
        firstAt ??= performance.now();
        if (i + 1 < locks.length) {
          const [ran, value] = await locks[i + 1].run(inside(i + 1), leftOf(options, performance.now() - started));
          return ran ? value : NOT_ALL;
        }
        if (performance.now() - firstAt > half) {
          const LockNotHeldError = w.__lockNotHeldErrorClass();
          for (const lock of locks.slice(0, -1)) {
            try {
              await lock.extend();
            } catch (error) {
              if (error instanceof LockNotHeldError) return NOT_ALL;
              throw error;
            }
          }
        }
        grantVia = this.#via;
        this.#via = null;
        let out;
        try {
          out = fn(new MultiKeyContext(contexts, fencesOf(locks)));
        } finally {
          grantVia = null;
        }
        return { value: await out };
      };
      const [ran, out] = await locks[0].run(inside(0), options);
      if (ran && out !== NOT_ALL) return [true, out.value];
      if (!(options?.timeout > performance.now() - started)) return [false, undefined];
    }
  }

  /**
   * `fn` on every key's acquired hold, each key's context nested in the one before (so an
   * error unwinds them all), then every key released: the task's error wins over a release's.
   */
  async #runOnHolds(fn, keep) {
    const locks = this.#locks;
    const contexts = [];
    const inside = (i) => (context) => {
      contexts[i] = context;
      if (i + 1 < locks.length) return locks[i + 1][RUN_ON_HOLD](inside(i + 1), keep);
      return fn(new MultiKeyContext(contexts, fencesOf(locks)));
    };
    let value;
    try {
      value = await locks[0][RUN_ON_HOLD](inside(0), keep);
    } catch (error) {
      await this.#free(locks.length).catch(() => {});
      throw error;
    }
    await this.#free(locks.length);
    return value;
  }

  /** `run(fn)` that never waits. */
  runImmediately(fn) {
    return this.run(fn, { timeout: 0 });
  }

  /** Acquires every key or throws LockUnavailableError; with `autoExtend`, keeps extending them. */
  async hold(options) {
    if (!(await this.acquire(options))) {
      const waited = options?.timeout ? ` after waiting ${options.timeout} ms` : "";
      const keys = this.keys.map((key) => `"${key}"`).join(", ");
      throw new LockUnavailableError(this.keys[0], `locks ${keys}: one is held by someone else${waited}`);
    }
    const keep = options?.autoExtend;
    if (keep) this.autoExtend(keep === true ? undefined : keep);
    return this;
  }

  async [asyncDispose]() {
    await this.release();
  }

  /** Keeps extending every key until release() or stopAutoExtend(); the context's signal aborts when any is lost. */
  autoExtend(options) {
    if (this.#keeping === null) {
      const contexts = this.#locks.map((lock) => lock.autoExtend(options));
      this.#keeping = new MultiKeyContext(contexts, fencesOf(this.#locks));
    }
    return this.#keeping;
  }

  /** Stops autoExtend() on every key; the keys stay held. */
  async stopAutoExtend() {
    this.#keeping = null;
    await Promise.all(this.#locks.map((lock) => lock.stopAutoExtend()));
  }

  /** Frees every key whoever holds it: true when any was held. */
  async forceRelease() {
    let any = false;
    for (const lock of this.#locks) any = (await lock.forceRelease()) || any;
    return any;
  }

  /** The hold of every key as one string for `restoreLock`, or throws LockNotHeldError. */
  serialize() {
    return `${SET_PREFIX}${this.#locks.length}:${this.#locks.map((lock) => lock.serialize()).join(",")}`;
  }

  /** Whether anyone (not necessarily this handle) holds any of the keys. */
  async isLocked() {
    for (const lock of this.#locks) if (await lock.isLocked()) return true;
    return false;
  }

  /** Whether some key's hold is presumed lost. */
  async isExpired() {
    for (const lock of this.#locks) if (await lock.isExpired()) return true;
    return false;
  }

  /** Milliseconds until the first held key's expiry, or null when none is held. */
  async getRemainingTime() {
    let least = null;
    for (const lock of this.#locks) {
      const ms = await lock.getRemainingTime();
      if (ms !== null && (least === null || ms < least)) least = ms;
    }
    return least;
  }
}

/** How a multi-key lock's serialized form starts: then the number of keys, then each key's. */
const SET_PREFIX = "keel-lock-set:1:";

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
  return new MultiKeyLock(internal, locks);
}

// === lock(), restoreLock() and the current store ============================================

// Checking a key and a TTL is a pure function of each, so what the core accepted is kept and
// `lock()` need not ask again: the keys (a bounded set, emptied when full), and the last TTL
// with the TTL it made of it.
const acceptedKeys = new Set();
const ACCEPTED_KEYS = 4096;
let acceptedTtlMs;
let acceptedTtl = 0;

function lock(key, ttlMs) {
  if (Array.isArray(key)) return lockKeys(key, ttlMs);
  return handle(key, ttlMs, 0);
}

/** A handle on `key` for `ttlMs`, its holds shared under `limit` (0: a lock), on `store`. */
function handle(key, ttlMs, limit, store = current ?? bind()) {
  if (typeof key === "string" && (ttlMs === undefined || (typeof ttlMs === "number" && ttlMs === ttlMs))) {
    if (ttlMs === acceptedTtlMs && acceptedKeys.has(key)) return new Lock(internal, key, acceptedTtl, store, 0, limit);
    let ttl = w.__kCheck(key, ttlMs === undefined ? NaN : ttlMs, false);
    // A U+FFFD the wasm saw is the key's own when the string has no lone surrogate.
    if (ttl === CHECK_KEY_AS_STRING && typeof key.isWellFormed === "function" && key.isWellFormed()) {
      ttl = w.__kCheck(key, ttlMs === undefined ? NaN : ttlMs, true);
    }
    if (ttl === FAILED) throw w.__kError();
    if (ttl !== CHECK_KEY_AS_STRING) {
      if (acceptedKeys.size >= ACCEPTED_KEYS) acceptedKeys.clear();
      acceptedKeys.add(key);
      acceptedTtlMs = ttlMs;
      acceptedTtl = ttl;
      return new Lock(internal, key, ttl, store, 0, limit);
    }
  }
  // Anything else is judged, and if wrong reported, by the core. A key only its JS string can
  // judge (CHECK_KEY_AS_STRING, where the runtime has no isWellFormed) is good when the core finds no fault.
  const error = w.__kLockError(key, ttlMs);
  if (error !== undefined) throw error;
  const ttl = w.__kCheck(key, ttlMs === undefined ? NaN : ttlMs, true);
  if (ttl === FAILED) throw w.__kError();
  return new Lock(internal, key, ttl, store, 0, limit);
}

/** The largest limit, 2^32 - 1: the limit of read locks. */
const READ_LIMIT = 4294967295;

// The last limit the core accepted: checking one is a pure function of it.
let acceptedLimit = 0;

function semaphore(key, limit, ttlMs) {
  if (limit !== acceptedLimit) {
    const checked = w.__kLimit(limit);
    if (checked === FAILED) throw w.__kError();
    acceptedLimit = checked;
  }
  return handle(key, ttlMs, acceptedLimit);
}

function readLock(key, ttlMs) {
  return handle(key, ttlMs, READ_LIMIT);
}

function writeLock(key, ttlMs) {
  return lock(key, ttlMs);
}

function restoreLock(serialized) {
  const store = current ?? bind();
  if (typeof serialized !== "string") throw w.__kNotSerialized();
  if (serialized.startsWith(SET_PREFIX)) return restoreSet(serialized);
  const id = w.__kRestore(serialized, store.binding);
  if (id === FAILED) throw w.__kError();
  return new Lock(internal, textOf(w.__kKeyOf(id)), ok(w.__kTtlOf(id)), store, id, ok(w.__kLimitOf(id)));
}

// === inspect(), campaign(), observe() ========================================================

const MAX_FENCE = Number.MAX_SAFE_INTEGER;

/** Who holds `key` and who waits, on the current store. */
function inspect(key) {
  try {
    return lock(key).inspect();
  } catch (error) {
    return Promise.reject(error);
  }
}

/**
 * `key`'s live holds and waiters from `store`, within `bound` ms: `{ key, held, holders:
 * [{ metadata, fence, remainingMs }], waiting }`, built here from those fields alone, so an
 * owner token a store put anywhere else never reaches the caller.
 */
async function inspectOn(store, key, bound) {
  const object = store.object;
  if (typeof object.inspect !== "function") throw new TypeError(`inspect: ${NO_INSPECT}`);
  const answer = await settle(object.inspect(key), bound);
  if (answer === UNANSWERED) {
    const LockStoreTimeoutError = w.__lockStoreTimeoutErrorClass();
    throw new LockStoreTimeoutError(key, "inspect", bound);
  }
  const broken = () =>
    new TypeError("lock store's inspect() must answer { holders: [{ metadata, fence, remainingMs }], waiting }");
  if (answer === null || typeof answer !== "object" || !Array.isArray(answer.holders)) throw broken();
  const holders = answer.holders.map((h) => {
    if (h === null || typeof h !== "object") throw broken();
    const { metadata = null, fence, remainingMs } = h;
    const fenced = fence === null || (Number.isInteger(fence) && fence >= 1 && fence <= MAX_FENCE);
    if (!(metadata === null || typeof metadata === "string") || !fenced || !(remainingMs >= 0 && remainingMs <= 2147483647)) {
      throw broken();
    }
    return { metadata, fence, remainingMs: Math.ceil(remainingMs) };
  });
  holders.sort((a, b) => (a.fence ?? 0) - (b.fence ?? 0));
  const waiting = answer.waiting ?? null;
  if (!(waiting === null || (Number.isInteger(waiting) && waiting >= 0))) throw broken();
  return { key, held: holders.length > 0, holders, waiting };
}

// Why a store cannot inspect or keep metadata.
const NO_INSPECT =
  "the lock store cannot say who holds a key, and keeps no hold metadata: it has no inspect method";

/**
 * The error `metadata` earns on `store`: not a string, longer than 1 KiB of UTF-8, or given to
 * a store that would not keep it; undefined when it is good.
 */
function metadataError(store, metadata) {
  const bad = badMetadata(metadata);
  if (bad !== undefined) return bad;
  if (typeof store.object.inspect !== "function") return new TypeError(`metadata: ${NO_INSPECT}`);
  return undefined;
}

/** Throws the error of bad `metadata`. */
function checkMetadata(metadata) {
  const bad = badMetadata(metadata);
  if (bad !== undefined) throw bad;
}

/** The error of `metadata` that is not a string of at most 1 KiB of UTF-8; else undefined. */
function badMetadata(metadata) {
  if (typeof metadata !== "string") return new TypeError(`metadata must be a string, got ${typeof metadata}`);
  // UTF-16 units never outnumber UTF-8 bytes, and one unit is at most 3 bytes.
  if (metadata.length * 3 > 1024) {
    const bytes = new TextEncoder().encode(metadata).length;
    if (bytes > 1024) return new RangeError(`metadata is ${bytes} bytes of UTF-8; the limit is 1024`);
  }
  return undefined;
}

/** The longest wait one acquire takes: a campaign waits in turns of it, for as long as it must. */
const LONGEST_WAIT = 2147483647;

/**
 * Waits (first come, first served, where the store hands over) to lead `key`, runs
 * `fn({ fence, signal })` while holding it with keep-alive on, and answers what `fn` answers.
 * Leadership lost while `fn` runs: `signal` aborts, and the campaign rejects with the loss.
 */
async function campaign(key, fn, options) {
  if (typeof fn !== "function") throw new TypeError(`campaign: fn must be a function, got ${typeof fn}`);
  if (options !== undefined && (options === null || typeof options !== "object")) {
    throw new TypeError("campaign: options must be an object");
  }
  const { ttlMs, metadata, signal } = options ?? {};
  const leader = lock(key, ttlMs);
  for (;;) {
    const [ran, value] = await leader.run(
      async (context) => {
        const signal = context.signal;
        // The loss rejects the campaign even while `fn` has not settled (it may not heed it).
        const lost = new Promise((_, reject) => {
          if (signal.aborted) reject(signal.reason);
          else signal.addEventListener("abort", () => reject(signal.reason), { once: true });
        });
        lost.catch(nothing);
        const out = await Promise.race([fn({ fence: context.fence, signal }), lost]);
        if (signal.aborted) throw signal.reason;
        return out;
      },
      { timeout: LONGEST_WAIT, autoExtend: true, signal, metadata },
    );
    if (ran) return value;
  }
}

/**
 * The leaders of `key` as they change: `{ metadata, fence }` of the holder, or `null` while
 * nobody leads; the first value is the state when iteration starts, and a leader is never
 * reported after a newer one. On a store with `watch` every change the store makes is pushed
 * here as it happens (a leader that comes and goes at once is still seen), and the holder's
 * expiry is looked for when its time runs out. Elsewhere `inspect` is read every `intervalMs`
 * (default 1000 ms, at least 10), and a leader that comes and goes between two looks is not
 * seen. Ends when `signal` aborts.
 */
async function* observe(key, options) {
  if (options !== undefined && (options === null || typeof options !== "object")) {
    throw new TypeError("observe: options must be an object");
  }
  const { signal, intervalMs = 1000 } = options ?? {};
  if (typeof intervalMs !== "number" || !(intervalMs >= 10 && intervalMs <= LONGEST_WAIT)) {
    throw new RangeError(`observe: intervalMs must be a number of milliseconds from 10 to ${LONGEST_WAIT}, got ${intervalMs}`);
  }
  if (signal !== undefined && !(typeof signal?.addEventListener === "function" && typeof signal.aborted === "boolean")) {
    throw new TypeError(`observe: options.signal must be an AbortSignal, got ${signal === null ? "null" : typeof signal}`);
  }
  const store = current ?? bind();
  const handle = lock(key);
  const watched = typeof store.object.watch === "function" ? await watchOn(store.object, key, signal) : null;
  try {
    // The leader last yielded (undefined: none yet), the largest fence yielded, and when the
    // leader's hold runs out by its own clock (a store that pushes reports no expiry).
    let last;
    let seen = 0;
    let endsAt = Infinity;
    const leader = (fence, metadata, remainingMs) => {
      endsAt = performance.now() + remainingMs;
      return { metadata, fence };
    };
    // The holder `inspect` shows now, if it is news.
    const look = async () => {
      const { holders } = await handle.inspect();
      const top = holders.at(-1);
      if (top === undefined) {
        endsAt = Infinity;
        return last === null ? undefined : null;
      }
      const now = leader(top.fence, top.metadata, top.remainingMs);
      if (last !== undefined && last !== null && top.fence === last.fence) return undefined;
      if (last !== undefined && top.fence !== null && top.fence <= seen) return undefined;
      return now;
    };
    let news = await look();
    for (;;) {
      if (news !== undefined) {
        last = news;
        if (news !== null && news.fence !== null) seen = Math.max(seen, news.fence);
        yield news;
      }
      if (signal?.aborted) return;
      if (watched === null) {
        if (await pause(intervalMs, signal)) return;
        news = await look();
        continue;
      }
      const change = await watched.next(endsAt - performance.now());
      if (change === ABORTED) return;
      news = undefined;
      if (change === UNANSWERED || change === null) {
        news = await look(); // the holder's time ran out, or the store may have missed reports
      } else if (change.held) {
        if (!(change.fence > seen)) continue; // older than what was yielded
        news = leader(change.fence, change.metadata, change.remainingMs);
      } else if (last !== null && last !== undefined && last.fence === change.fence && !watched.handedOver(change.fence)) {
        endsAt = Infinity;
        news = null;
      }
    }
  } finally {
    // Stopping is the store's business; its failure is not the iteration's.
    if (watched !== null) Promise.resolve().then(() => watched.stop()).catch(nothing);
  }
}

/**
 * Subscribes to `object.watch(key, …)` (checking what it reports): `{ next(ms), stop() }`,
 * `next` answering the next report, `UNANSWERED` when `ms` pass first, `ABORTED` once
 * `signal` aborts. Reports made before `next` is called wait for it, in order.
 */
async function watchOn(object, key, signal) {
  const queue = [];
  let wake = nothing;
  const broken = () =>
    new TypeError("lock store's watch() must report { fence, held, metadata, remainingMs }, { fence, held: false } or null");
  let failure = null;
  const stop = await object.watch(key, (change) => {
    if (change !== null) {
      const metadata = change?.metadata ?? null;
      const good =
        typeof change === "object" &&
        Number.isInteger(change.fence) &&
        change.fence >= 1 &&
        change.fence <= MAX_FENCE &&
        (change.held === false ||
          (change.held === true &&
            (metadata === null || typeof metadata === "string") &&
            change.remainingMs >= 0 &&
            change.remainingMs <= 2147483647));
      if (!good) failure ??= broken();
      else change = change.held ? { fence: change.fence, held: true, metadata, remainingMs: change.remainingMs } : { fence: change.fence, held: false };
    }
    queue.push(change);
    wake();
  });
  if (typeof stop !== "function") throw new TypeError("lock store's watch() must resolve to a function that stops it");
  return {
    async next(ms) {
      if (failure !== null) throw failure;
      if (queue.length === 0) {
        const done = await new Promise((resolve) => {
          let t = null;
          let stopListening = nothing;
          // Whichever comes first settles the wait and lets the others go.
          const finish = (value) => {
            if (t !== null) cancelTimer(t);
            stopListening();
            wake = nothing;
            resolve(value);
          };
          if (signal?.aborted) return finish(ABORTED);
          if (ms < Infinity) t = timer(Math.max(0, Math.min(ms, LONGEST_WAIT)), () => finish(UNANSWERED));
          stopListening = onAbort(signal, () => finish(ABORTED));
          wake = () => finish(undefined);
        });
        if (done !== undefined) return done;
      }
      if (failure !== null) throw failure;
      return queue.shift();
    },
    /** Whether a newer grant already waits behind the end of `fence`: a hand-over, not a gap. */
    handedOver(fence) {
      return queue.length > 0 && queue[0] !== null && queue[0].held && queue[0].fence > fence;
    },
    stop,
  };
}

function setLockStore(store) {
  w.setLockStore(store);
  current = null;
}

function getLockStore() {
  return w.getLockStore();
}

// === The memory store's hold metadata =======================================================

// The memory store's wasm keeps no metadata (the no-std builds leave it out: docs/wasm-size.md),
// so its JS face keeps it here: per store, `fence → [key, metadata]`. One counter per store
// draws every fence, so a fence names one hold of one key for good. An entry is filed in the
// turn its grant reaches the handle (a waiter's in the microtask its hand-over queues, which
// `inspect` waits behind) and swept as the store's rows are: when the map reaches twice the
// size its last sweep left (at least 64), the entries of holds no longer live go.
const memoryMetadata = new WeakMap();
const METADATA_SWEEP_FLOOR = 64;

/** Files `metadata` (if any) under `fence`, the grant of a hold of `key` on `store`. */
function keepMemoryMetadata(store, key, fence, metadata) {
  if (metadata === undefined || !(fence >= 1)) return;
  let kept = memoryMetadata.get(store);
  if (kept === undefined) {
    kept = { said: new Map(), sweepAt: METADATA_SWEEP_FLOOR };
    memoryMetadata.set(store, kept);
  }
  kept.said.set(fence, [key, metadata]);
  if (kept.said.size < kept.sweepAt) return;
  const live = new Set();
  for (const k of new Set(Array.from(kept.said.values(), ([k]) => k))) {
    const flat = memoryCall(store, OP_INSPECT, k);
    for (let i = 0; i < flat.length; i += 2) live.add(flat[i]);
  }
  for (const f of kept.said.keys()) if (!live.has(f)) kept.said.delete(f);
  kept.sweepAt = Math.max(METADATA_SWEEP_FLOOR, 2 * kept.said.size);
}

function memoryCall(store, op, key, owner, ttlMs, weight, limit) {
  return w.__kMemoryCall(store, op, key, owner, ttlMs, weight, limit);
}

// === Watching the memory store ============================================================

// Every change to a memory store's holders is made by a call from this file, in this isolate, so
// the store tells its watchers as each happens: no timer, no polling. A grant of an exclusive
// hold is reported where it is made (its fence and metadata known there); an end is found by
// comparing the holds a watch has reported with the live ones after a call that may end one. An
// end that hands the key to a queued waiter is told just before that waiter's grant, in the
// same turn, so `observe` reads the two as a hand-over. Expiry, `extend` and shared holds are
// not reported (the `LockStore.watch` contract).

// store → key → the watches of that key: { report, known: Set of reported held fences }.
const memoryWatches = new WeakMap();
// Watches on every memory store: while 0, the calls below are one comparison each.
let memoryWatchCount = 0;

/** The watches of `key` on `store`, or undefined. */
function watchesOf(store, key) {
  return memoryWatches.get(store)?.get(key);
}

/** Calls a watcher; one that throws is reported on the console and changes nothing. */
function tellWatch(watch, change) {
  try {
    watch.report(change);
  } catch (error) {
    console.error("keel-lock: a MemoryLockStore watch callback threw", error);
  }
}

/**
 * After a call that may have ended a hold of `key`: each hold a watch reported that is no
 * longer live is told as ended — unless a waiter of the key was woken and not yet stepped
 * (`handingOver`), whose grant will tell it. Answers the live holds (`inspect`'s flat list).
 */
function reportEnds(store, key, handingOver) {
  const watches = watchesOf(store, key);
  if (watches === undefined) return null;
  if (handingOver) {
    for (const waiter of waiters.values()) if (waiter.scheduled && waiter.store === store && waiter.key === key) return null;
  }
  const flat = memoryCall(store, OP_INSPECT, key);
  const live = new Set();
  for (let i = 0; i < flat.length; i += 2) live.add(flat[i]);
  for (const watch of watches) {
    for (const fence of Array.from(watch.known).sort((a, b) => a - b)) {
      if (live.has(fence)) continue;
      watch.known.delete(fence);
      if (!watch.stopped) tellWatch(watch, { fence, held: false });
    }
  }
  return flat;
}

/** `store` (a memory store) may have ended a hold of `key`: tell its watchers. */
function memoryEnded(store, key) {
  if (memoryWatchCount !== 0) reportEnds(store, key, true);
}

/** `store` granted an exclusive hold of `key` under `fence`: tell its watchers (ends first). */
function memoryGranted(store, key, fence) {
  if (memoryWatchCount === 0 || !(fence >= 1)) return;
  const flat = reportEnds(store, key, false);
  if (flat === null) return;
  let remainingMs = -1;
  for (let i = 0; i < flat.length; i += 2) if (flat[i] === fence) remainingMs = flat[i + 1];
  if (remainingMs < 0) return; // already gone again
  const metadata = memoryMetadata.get(store)?.said.get(fence)?.[1] ?? null;
  for (const watch of watchesOf(store, key)) {
    if (watch.known.has(fence)) continue;
    watch.known.add(fence);
    if (!watch.stopped) tellWatch(watch, { fence, held: true, metadata, remainingMs });
  }
}

/** `MemoryLockStore.watch(key, onChange)`: see `LockStore.watch`. */
function watchMemory(store, key, onChange) {
  // The core checks the key as every method's.
  const flat = memoryCall(store, OP_INSPECT, key);
  if (typeof onChange !== "function") {
    throw new TypeError(`MemoryLockStore.watch: onChange must be a function, got ${typeof onChange}`);
  }
  // A lone live hold is taken as the exclusive holder to report the end of.
  const watch = { report: onChange, known: new Set(flat.length === 2 && flat[0] >= 1 ? [flat[0]] : []), stopped: false };
  let byKey = memoryWatches.get(store);
  if (byKey === undefined) memoryWatches.set(store, (byKey = new Map()));
  let watches = byKey.get(key);
  if (watches === undefined) byKey.set(key, (watches = new Set()));
  watches.add(watch);
  memoryWatchCount++;
  return () => {
    if (watch.stopped) return;
    watch.stopped = true;
    memoryWatchCount--;
    watches.delete(watch);
    if (watches.size === 0 && byKey.get(key) === watches) byKey.delete(key);
  };
}

// === MemoryLockStore's methods ==============================================================

/**
 * Puts the `LockStore` methods on `MemoryLockStore`'s prototype, as class methods would be:
 * each is one call into the core's memory store (`__kMemoryCall`), which checks the arguments.
 */
function installMemoryStore(proto) {
  const methods = {
    // `metadata` defaulted: `length` stays the documented arguments', as a class would have it.
    acquire(key, owner, ttlMs, metadata = undefined) {
      if (metadata !== undefined) checkMetadata(metadata);
      const grant = memoryCall(this, OP_ACQUIRE, key, owner, ttlMs);
      if (grant !== false) {
        keepMemoryMetadata(this, key, grant.fence, metadata);
        memoryGranted(this, key, grant.fence);
      }
      return grant;
    },
    release(key, owner) {
      const released = memoryCall(this, OP_RELEASE, key, owner);
      memoryEnded(this, key);
      return released;
    },
    extend(key, owner, ttlMs) {
      return memoryCall(this, OP_EXTEND, key, owner, ttlMs);
    },
    isLocked(key) {
      return memoryCall(this, OP_IS_LOCKED, key);
    },
    remainingTime(key) {
      return memoryCall(this, OP_REMAINING_TIME, key);
    },
    forceRelease(key) {
      const released = memoryCall(this, OP_FORCE_RELEASE, key);
      memoryEnded(this, key);
      return released;
    },
    acquireShared(key, owner, ttlMs, weight, limit, metadata = undefined) {
      if (metadata !== undefined) checkMetadata(metadata);
      const answer = memoryCall(this, OP_ACQUIRE_SHARED, key, owner, ttlMs, weight, limit);
      if (typeof answer === "number") return { heldLimit: answer };
      if (answer !== false) keepMemoryMetadata(this, key, answer.fence, metadata);
      return answer;
    },
    acquireMany(keys, owners, ttlMs, metadata = undefined) {
      if (!Array.isArray(keys) || !Array.isArray(owners) || keys.length !== owners.length) {
        throw new TypeError("MemoryLockStore.acquireMany: keys and owners must be arrays of one length");
      }
      if (metadata !== undefined && (!Array.isArray(metadata) || metadata.length !== keys.length)) {
        throw new TypeError("MemoryLockStore.acquireMany: metadata must be an array as long as keys");
      }
      // Synchronous, so within one turn of the isolate: nothing runs between the takes and
      // (a key refused, or bad) the release of those taken, so nobody sees part of the set —
      // watchers neither: they are told of the set's grants once all are taken.
      const grants = [];
      try {
        for (let i = 0; i < keys.length; i++) {
          if (metadata?.[i] !== undefined) checkMetadata(metadata[i]);
          const grant = memoryCall(this, OP_ACQUIRE, keys[i], owners[i], ttlMs);
          if (grant === false) break;
          keepMemoryMetadata(this, keys[i], grant.fence, metadata?.[i]);
          grants.push(grant);
        }
      } finally {
        if (grants.length < keys.length) for (let i = grants.length - 1; i >= 0; i--) memoryCall(this, OP_RELEASE, keys[i], owners[i]);
      }
      if (grants.length < keys.length) return false;
      for (let i = 0; i < keys.length; i++) memoryGranted(this, keys[i], grants[i].fence);
      return grants;
    },
    // A promise, read after the hand-overs already queued have reached their handles (and
    // filed their metadata).
    inspect(key) {
      return resolved.then(() => {
        const flat = memoryCall(this, OP_INSPECT, key);
        const said = memoryMetadata.get(this)?.said;
        const holders = [];
        for (let i = 0; i < flat.length; i += 2) {
          const fence = flat[i] || null;
          holders.push({ metadata: said?.get(fence)?.[1] ?? null, fence, remainingMs: flat[i + 1] });
        }
        holders.sort((a, b) => (a.fence ?? 0) - (b.fence ?? 0));
        // The store's queue is joined only by this file's handles, and each waiter is here.
        let waiting = 0;
        for (const waiter of waiters.values()) if (waiter.store === this && waiter.key === key) waiting++;
        return { holders, waiting };
      });
    },
    // Resolves once subscribed, as a store across the network does.
    watch(key, onChange) {
      try {
        return Promise.resolve(watchMemory(this, key, onChange));
      } catch (error) {
        return Promise.reject(error);
      }
    },
  };
  for (const name of Object.keys(methods)) {
    Object.defineProperty(proto, name, { value: methods[name], writable: true, configurable: true });
  }
}

// What `api` answered: every entry of one instance gets the same objects.
let exported = null;

// === The entry ==============================================================================

/**
 * The package's exports over the wasm module's exports `glue`, built on the first call; later
 * calls (the Node entries for `import` and `require` share one instance) answer the same.
 */
export function api(glue) {
  if (exported !== null) return exported;
  w = glue;
  [memory, outAt] = w.__kOut();
  installHolding(Object.create(Lock.prototype));
  installMemoryStore(w.MemoryLockStore.prototype);
  exported = {
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
    onLockEvent,
    Lock,
    MemoryLockStore: w.MemoryLockStore,
    LockNotHeldError: w.__lockNotHeldErrorClass(),
    LockUnavailableError: w.__lockUnavailableErrorClass(),
    LockStoreTimeoutError: w.__lockStoreTimeoutErrorClass(),
    LimitMismatchError: w.__limitMismatchErrorClass(),
  };
  return exported;
}
