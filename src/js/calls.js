// Calls to a JS store, each answer awaited no longer than its bound (seam rule 6), and the race
// of an answer, a timer and an abort signal that every wait of the JS face is.

import { ANSWER_FALSE, ANSWER_FENCE, ANSWER_TRUE, CALL, KEPT, OP_ACQUIRE, OP_RELEASE, OUT_EXTEND_ID, OUT_TTL } from "./protocol.js";
import { carriedNumber, core, ok, ownerOf, stepArg, waitExtras } from "./core.js";
import { nothing, onAbort } from "./options.js";
import { cancelTimer, timer } from "./promises.js";

// What a race answers when its time ran out, or its signal aborted, before the answer came.
export const ELAPSED = Symbol("elapsed");
export const ABORTED = Symbol("aborted");

export function isThenable(value) {
  return (
    value !== null &&
    (typeof value === "object" || typeof value === "function") &&
    typeof value.then === "function"
  );
}

/**
 * Resolves with the first of: what the function `listen` is handed is called with (`(value,
 * failed)`: a failure rejects), ELAPSED once `ms` pass (Infinity: never), ABORTED once `signal`
 * (may be undefined) aborts. Whichever comes first stops the others.
 */
export function race(ms, signal, listen) {
  if (signal !== undefined && signal.aborted) return Promise.resolve(ABORTED);
  return new Promise((resolve, reject) => {
    let t = null;
    let stopListening = nothing;
    const finish = (value, failed) => {
      if (t !== null) cancelTimer(t);
      stopListening();
      if (failed) reject(value);
      else resolve(value);
    };
    if (ms < Infinity) t = timer(ms, () => finish(ELAPSED, false));
    stopListening = onAbort(signal, () => finish(ABORTED, false));
    if (listen !== undefined) listen(finish);
  });
}

/**
 * A store call's answer, followed from the moment the call is made. The caller gives it one
 * microtask (`await null`): an answer that is there by then — a store answering from memory —
 * is taken as it is, without a timer or a promise of its own; only one that is not starts the
 * bound's timer (`later`).
 */
class Pending {
  constructor(answer) {
    this.done = false;
    this.failed = false;
    this.value = undefined;
    this.onAnswer = null;
    answer.then(
      (value) => this.answered(value, false),
      (error) => this.answered(error, true),
    );
  }

  // A public method: a class with a private one brands each instance as it is made.
  answered(value, failed) {
    if (this.done) return; // a thenable that calls back twice: the first answer stands
    this.done = true;
    this.failed = failed;
    this.value = value;
    if (this.onAnswer !== null) this.onAnswer(value, failed);
  }

  /** The answer (a failure is thrown), once it came. */
  get result() {
    if (this.failed) throw this.value;
    return this.value;
  }

  /** The answer once it comes, or ELAPSED if `ms` pass first, or ABORTED if `signal` aborts. */
  later(ms, signal) {
    return race(ms, signal, (answer) => {
      this.onAnswer = answer;
    });
  }
}

/** A store call's answer as a Pending, or null when it answered synchronously. */
export function pending(answer) {
  return isThenable(answer) ? new Pending(answer) : null;
}

/** What a store call answered (`answer`, as it returned), or ELAPSED after `bound` ms. */
export async function answerWithin(answer, bound) {
  const p = pending(answer);
  await null;
  return p === null ? answer : p.done ? p.result : p.later(bound);
}

/**
 * The acquire call a CALL or CALL_ACQUIRE_OR_WAIT step (`waits`) asks of the JS store `store`
 * for a handle on `key` for `ttl` ms under `limit` (0: a lock; else a semaphore's or read
 * lock's, whose store must keep shared holds), as it returned; `metadata`, when given, goes
 * after the documented arguments.
 */
export function sendAcquire(store, key, ttl, limit, owner, waits, permits, metadata) {
  if (limit !== 0) {
    if (typeof store.acquireShared !== "function") throw core.noSharedError();
    const said = metadata === undefined ? [] : [metadata];
    if (waits) {
      const [waitMs, pollMs] = waitExtras();
      return store.acquireSharedOrWait.call(store.object, key, owner, ttl, permits, limit, waitMs, pollMs, ...said);
    }
    return store.acquireShared.call(store.object, key, owner, ttl, permits, limit, ...said);
  }
  if (waits) {
    const [waitMs, pollMs] = waitExtras();
    if (metadata !== undefined) return store.acquireOrWait.call(store.object, key, owner, ttl, waitMs, pollMs, metadata);
    return store.acquireOrWait.call(store.object, key, owner, ttl, waitMs, pollMs);
  }
  if (metadata !== undefined) return store.acquire.call(store.object, key, owner, ttl, metadata);
  return store.acquire.call(store.object, key, owner, ttl);
}

/** The core's code for a JS store's acquire answer (`answer`, not ELAPSED; `waits`: to acquireOrWait). */
export function acquireAnswer(id, answer, waits) {
  if (typeof answer === "boolean") return ok(core.acquireAnswered(id, answer ? ANSWER_TRUE : ANSWER_FALSE, 0));
  if (waits) return ok(core.acquireOrWaitAnswered(id, answer));
  if (answer !== null && typeof answer === "object" && typeof answer.fence === "number") {
    return ok(core.acquireAnswered(id, ANSWER_FENCE, answer.fence));
  }
  return ok(core.acquireAnsweredValue(id, answer));
}

/**
 * A JS store's answer to a release (within its `bound`), recorded by the core: RELEASED,
 * CLOSED, SPARED (released, and the slot let go of) or REFUSED (the hold was lost).
 */
export function releaseAnswer(id, answer, bound) {
  if (answer === ELAPSED) throw core.timeoutError(id, OP_RELEASE, bound);
  if (typeof answer !== "boolean") throw core.releaseAnswerError(answer);
  return ok(core.releaseAnswered(id, answer));
}

/**
 * The JS store's `release(key, owner)` that a step answered CALL for (`release()`), within the
 * step's bound: the core's code for its answer (RELEASED…, or REFUSED: the hold was lost). On
 * an error the hold is no longer tracked as the run's. `finish(code)` is called in the turn the
 * core answered: a slot that the release made the spare closed the spare before it, and no other
 * handle may take that closed slot as the spare in the microtasks before this promise settles.
 */
export async function releaseOverStore(id, store, key, owner, finish) {
  let code;
  try {
    const bound = stepArg();
    let answer = store.release.call(store.object, key, owner);
    const p = pending(answer);
    await null;
    if (p !== null) answer = p.done ? p.result : await p.later(bound);
    code = releaseAnswer(id, answer, bound);
  } catch (error) {
    // The hold is no longer tracked as the run's; the release's error is the one to report.
    core.forgetRunHold(id);
    finish(KEPT);
    throw error;
  }
  finish(code);
  return code;
}

/** An aborted caller of slot `id` leaves a JS store's queue: `withdraw(key, owner)`, or `release`. */
export async function withdrawOverStore(id, store, key, owner) {
  if (ok(core.stopWaiting(id)) !== CALL) return;
  const bound = stepArg();
  const withdraws = store.withdraw !== undefined;
  const method = withdraws ? store.withdraw : store.release;
  const answer = await answerWithin(method.call(store.object, key, owner), bound);
  if (answer === ELAPSED) throw core.timeoutError(id, OP_ACQUIRE, bound);
  if (!withdraws && typeof answer !== "boolean") throw core.releaseAnswerError(answer);
}

/** A JS store's extend for slot `id`, its answer recorded by the core against the hold it was about. */
export async function extendOverStore(id, store, key) {
  const bound = stepArg();
  const ttl = carriedNumber(OUT_TTL);
  const extendId = carriedNumber(OUT_EXTEND_ID);
  const owner = ownerOf(id);
  let answer;
  try {
    answer = await answerWithin(store.extend.call(store.object, key, owner, ttl), bound);
  } catch (error) {
    core.extendFailed(extendId);
    throw error;
  }
  const unanswered = answer === ELAPSED;
  ok(core.extendAnswered(extendId, unanswered ? undefined : answer, unanswered));
}

/** A JS store's answer to a call about `key` alone (`op`), as the core judges it. */
export async function keyOperationOverStore(store, key, op, bound) {
  const answer = await answerWithin(store[op].call(store.object, key), bound);
  const unanswered = answer === ELAPSED;
  return ok(core.keyOperationAnswered(key, op, unanswered ? undefined : answer, unanswered, bound));
}
