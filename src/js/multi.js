// `lock([k1, k2, …])`: the rules of the core's MultiLock (ARCHITECTURE.md, "Several keys at
// once"), applied to the keys' own handles: taken one at a time in one canonical order, each
// within what is left of the timeout, all held or none. The handles already do everything a key
// needs; doing the composition in the wasm too would cost bytes the Node build's budget no
// longer has (docs/wasm-size.md).

import { core } from "./core.js";
import { BY_FACTORY, boundStore } from "./binding.js";
import { acquiredVia, events, grant, partOfSet, told, toldRun, toldStep } from "./events.js";
import { abortReason, asksWebLocks, webLocksOptions } from "./options.js";
import { LockNotHeldError } from "./errors.js";
import { LockContext, asyncDispose, holdOrThrow } from "./holding.js";

/** How a multi-key lock's serialized form starts: then the number of keys, then each key's. */
export const SET_PREFIX = "keel-lock-set:1:";
/** Marks a nested run whose inner key was not taken (or must be taken again). */
const NOT_ALL = Symbol("not every key");
const PERMITS_ON_SET = "lock: permits are for semaphores; a multi-key lock takes each key whole";

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

/**
 * `fn(context)` on the hold `lock` (a Lock) acquired, as a run's `fn` gets it (its signal
 * watches the hold once read; `autoExtend`: on while `fn` runs). For a multi-key run whose keys
 * came from one store step; the caller releases afterwards.
 */
async function runOnHold(lock, fn, autoExtend) {
  const context = autoExtend ? lock.autoExtend(autoExtend === true ? undefined : autoExtend) : new LockContext(lock.fence, lock);
  try {
    return await fn(context);
  } finally {
    const stopping = LockContext.end(context);
    if (autoExtend) await lock.stopAutoExtend();
    else if (stopping !== undefined) await stopping;
  }
}

/** The timeout left of `options` at `elapsed` ms in: the options for the next key. */
function leftOf(options, elapsed) {
  const timeout = options?.timeout;
  if (typeof timeout !== "number" || !(timeout > 0) || timeout === Infinity) return options;
  return { ...options, timeout: Math.max(0, Math.floor(timeout - elapsed)) };
}

export class MultiKeyLock {
  #locks;
  // The context of autoExtend() while it runs.
  #autoExtendContext = null;
  // The store's one-step acquisition of every key (a OneStep), while the store offers it for this set.
  #step;
  // The store the set was made over, for its lock events.
  #store;
  // How a key the set waited for came ("hand-over" or "poll"), for its lock events.
  #via = null;

  constructor(token, locks, step = null, store = boundStore()) {
    if (token !== BY_FACTORY) throw new TypeError("MultiKeyLock is made by lock([...keys]), not new");
    this.#store = store;
    // The set is told as one: its keys' handles are its parts, not the user's calls.
    for (const l of locks) partOfSet(l);
    this.#locks = locks;
    this.#step = step;
  }

  /**
   * The first attempt, where the store takes the set in one step, `options` checked as `run`
   * (`forRun`) or `acquire` reads them: `true` (all held), `false` (refused, and no time is
   * left), or the options to take the keys one by one with (what is left of the timeout).
   */
  async #firstStep(options, forRun, started) {
    const error = core.optionsError(options, forRun);
    if (error !== undefined) throw error;
    if (!forRun && options?.permits !== undefined) throw new TypeError(PERMITS_ON_SET);
    if (options?.signal?.aborted) return options;
    const took = await this.#step.take(this.#locks, options?.metadata);
    if (took === null) {
      this.#step = null;
      return options;
    }
    if (took && options?.signal?.aborted) {
      // Granted as the signal aborted: given back before the caller learns it is held.
      await this.#free(this.#locks.length);
      throw abortReason(options.signal);
    }
    if (took) return true;
    if (!(options?.timeout > performance.now() - started)) return false;
    return leftOf(options, performance.now() - started);
  }

  /**
   * After the last key came in, the first at `firstAt`: keys held over half their TTL get it
   * anew. False when a key was already lost (take them again while the timeout lasts).
   */
  async #renewEarly(firstAt) {
    if (performance.now() - firstAt <= this.ttlMs / 2) return true;
    for (const lock of this.#locks.slice(0, -1)) {
      try {
        await lock.extend();
      } catch (error) {
        if (error instanceof LockNotHeldError) return false;
        throw error;
      }
    }
    return true;
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
    return this.#autoExtendContext?.signal;
  }

  /** Takes every key, the lowest first, or none: `true` when all are held. */
  async acquire(options) {
    if (asksWebLocks(options)) return webLocksOptions(this, options, (rest) => this.acquire(rest));
    if (events.listening && told(this)) return toldRun(this, this.#store, null, options, () => this.acquire(options));
    const started = performance.now();
    if (this.#step !== null) {
      const next = await this.#firstStep(options, false, started);
      if (next === true || next === false) return next;
      options = next;
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
      let whole;
      try {
        whole = await this.#renewEarly(firstAt);
      } finally {
        if (whole !== true) await this.#free(this.#locks.length);
      }
      if (whole) {
        if (events.listening) acquiredVia.set(this, this.#via ?? "immediate");
        this.#via = null;
        return true;
      }
      if (!(options?.timeout > performance.now() - started)) return false;
    }
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
    if (this.#autoExtendContext !== null) await this.stopAutoExtend();
    return this.#free(this.#locks.length);
  }

  /** Resets every key's expiry; a key no longer held frees the others and rejects LockNotHeldError. */
  async extend(ttlMs) {
    if (events.listening && told(this)) return toldStep(this, this.#store, "extend", () => this.extend(ttlMs));
    for (const lock of this.#locks) {
      try {
        await lock.extend(ttlMs);
      } catch (error) {
        if (error instanceof LockNotHeldError) await this.release().catch(() => {});
        throw error;
      }
    }
  }

  /** Acquire every key, run `fn({ fence: null, fences, signal })`, always release. */
  run(fn, options) {
    if (asksWebLocks(options)) return webLocksOptions(this, options, (rest) => this.run(fn, rest));
    if (events.listening && told(this)) return toldRun(this, this.#store, fn, options, (inner) => this.run(inner, options));
    if (typeof fn !== "function") return Promise.reject(core.notAFunctionError(fn));
    if (options?.permits !== undefined) return Promise.reject(new TypeError(PERMITS_ON_SET));
    return this.#runAll(fn, options);
  }

  async #runAll(fn, options) {
    const started = performance.now();
    const locks = this.#locks;
    if (this.#step !== null) {
      const next = await this.#firstStep(options, true, started);
      if (next === true) return [true, await this.#runOnHolds(fn, options?.autoExtend)];
      if (next === false) return [false, undefined];
      options = next;
    }
    for (;;) {
      const contexts = [];
      let firstAt;
      // Key i's run holds it while the runs of the keys after it go on inside: one key refused
      // unwinds them all, each run releasing its key.
      const inside = (i) => async (context) => {
        contexts[i] = context;
        this.#cameBy(grant.via);
        firstAt ??= performance.now();
        if (i + 1 < locks.length) {
          const [ran, value] = await locks[i + 1].run(inside(i + 1), leftOf(options, performance.now() - started));
          return ran ? value : NOT_ALL;
        }
        if (!(await this.#renewEarly(firstAt))) return NOT_ALL;
        grant.via = this.#via;
        this.#via = null;
        let out;
        try {
          out = fn(new MultiKeyContext(contexts, fencesOf(locks)));
        } finally {
          grant.via = null;
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
  async #runOnHolds(fn, autoExtend) {
    const locks = this.#locks;
    const contexts = [];
    const inside = (i) => (context) => {
      contexts[i] = context;
      if (i + 1 < locks.length) return runOnHold(locks[i + 1], inside(i + 1), autoExtend);
      return fn(new MultiKeyContext(contexts, fencesOf(locks)));
    };
    let value;
    try {
      value = await runOnHold(locks[0], inside(0), autoExtend);
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
  hold(options) {
    return holdOrThrow(this, options);
  }

  async [asyncDispose]() {
    await this.release();
  }

  /** Keeps extending every key until release() or stopAutoExtend(); the context's signal aborts when any is lost. */
  autoExtend(options) {
    if (this.#autoExtendContext === null) {
      const contexts = this.#locks.map((lock) => lock.autoExtend(options));
      this.#autoExtendContext = new MultiKeyContext(contexts, fencesOf(this.#locks));
    }
    return this.#autoExtendContext;
  }

  /** Stops autoExtend() on every key; the keys stay held. */
  async stopAutoExtend() {
    this.#autoExtendContext = null;
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
