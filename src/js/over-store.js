// `run()` and `acquire()` of a Lock over a JS store: the core's acquisition machine says what to
// do next (call the store — its own queue, `acquireOrWait`, too —, pause, done).

import { CALL, CALL_ACQUIRE_OR_WAIT, KEPT, OP_ACQUIRE, REFUSED, SLEEP, TIMED_OUT } from "./protocol.js";
import { core, ok, ownerOf, stepArg } from "./core.js";
import { ABORTED, ELAPSED, acquireAnswer, isThenable, pending, race, releaseAnswer, sendAcquire, withdrawOverStore } from "./calls.js";
import { grant } from "./events.js";
import { abortReason } from "./options.js";
import { LockContext } from "./holding.js";
import { releaseLateGrant } from "./promises.js";

// What `acquire()` runs: nothing — the hold stays the handle's.
export const ACQUIRE_ONLY = Symbol("acquire only");

/** What a run or an acquire answers when the key was not taken. */
export function refused(fn) {
  return fn === ACQUIRE_ONLY ? false : [false, undefined];
}

// The handle's own steps, which a run over a JS store takes: methods of Lock under these names.
/** `(after)`: the operation is over (as `closeSlot` and the release left the slot). */
export const FINISH = Symbol("keel-lock finish");
/** `(id)`: `acquire()` took the key, and the hold is the handle's: answers true. */
export const ADOPT = Symbol("keel-lock adopt");
/** `(id, code)`: the run took the key: the context `fn` is handed. */
export const ENTER = Symbol("keel-lock enter");

/**
 * `run()` of `handle` over the JS store `store` (its key, TTL and limit), as one async
 * function: the acquisition's steps from the first, `code`, in slot `id` (each store call
 * bounded as the core says), `fn`, and the release. The task's error wins over the release's.
 */
export async function runOverStore(handle, store, key, ttl, limit, id, code, fn, signal, permits, metadata) {
  let owner = "";
  // How the grant came when the run waited for it: "poll" or "hand-over" (told as events).
  let via = null;
  try {
    for (;;) {
      if (code === CALL || code === CALL_ACQUIRE_OR_WAIT) {
        const bound = stepArg();
        const waits = code === CALL_ACQUIRE_OR_WAIT;
        owner = ownerOf(id);
        let sent;
        let answer;
        try {
          answer = sent = sendAcquire(store, key, ttl, limit, owner, waits, permits, metadata);
          const p = pending(sent);
          await null;
          if (p !== null) answer = p.done ? p.result : await p.later(bound, waits ? signal : undefined);
        } catch (error) {
          ok(core.abandonAcquire(id));
          throw error;
        }
        // Aborted while the call was in flight, or granted as the signal aborted: given back
        // before the core takes the hold.
        const aborted = answer === ABORTED;
        if (aborted || (signal !== undefined && signal.aborted && answer !== ELAPSED && answer !== false)) {
          if (aborted) releaseLateGrant(sent, store.object, key, owner);
          await withdrawOverStore(id, store, key, owner);
          throw abortReason(signal);
        }
        if (answer === ELAPSED) {
          releaseLateGrant(sent, store.object, key, owner);
          code = ok(core.acquireUnanswered(id));
        } else {
          if (waits && answer !== null && typeof answer === "object" && answer.waitedMs > 0) via = "hand-over";
          code = acquireAnswer(id, answer, waits);
        }
      } else if (code === SLEEP) {
        via = "poll";
        if ((await race(stepArg(), signal)) === ABORTED) {
          ok(core.abandonAcquire(id));
          throw abortReason(signal);
        }
        code = ok(core.retryAcquire(id));
      } else if (code === TIMED_OUT) {
        throw core.timeoutError(id, OP_ACQUIRE, stepArg());
      } else {
        break;
      }
    }
  } catch (error) {
    handle[FINISH](KEPT);
    throw error;
  }
  if (code === REFUSED) {
    handle[FINISH](KEPT);
    return refused(fn);
  }
  grant.via = via;
  if (fn === ACQUIRE_ONLY) return handle[ADOPT](id);
  const context = handle[ENTER](id, code);
  let value;
  let failed = false;
  try {
    value = fn(context);
    grant.via = null;
    if (isThenable(value)) value = await value;
  } catch (error) {
    grant.via = null;
    value = error;
    failed = true;
  }
  // An extend in flight finishes before the release.
  const stopping = LockContext.end(context);
  if (stopping !== undefined) await stopping;
  let releaseFailed = false;
  let releaseError;
  let after = KEPT;
  try {
    // The run's hold is the one its last acquire call was granted, under that call's token.
    if (ok(core.endRun(id, NaN)) === CALL) {
      // As releaseOverStore does, written out here: one async call less per run().
      const bound = stepArg();
      let answer = store.release.call(store.object, key, owner);
      const p = pending(answer);
      await null;
      if (p !== null) answer = p.done ? p.result : await p.later(bound);
      after = releaseAnswer(id, answer, bound);
    }
  } catch (error) {
    // The hold is no longer tracked as the run's.
    core.forgetRunHold(id);
    releaseFailed = true;
    releaseError = error;
  }
  handle[FINISH](after);
  if (failed) throw value;
  if (releaseFailed) throw releaseError;
  return [true, value];
}
