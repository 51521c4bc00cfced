// Callers waiting in the memory store's queue, by slot id: the wasm says when to step one —
// woken (`wakeWaiter`), or after the time a STILL_QUEUED step carries (the queue's timekeeper).
// A waiter is `{ scheduled, go, timer, key, store }`: `go(code)` gets the step that ends its wait.

import { STILL_QUEUED } from "./protocol.js";
import { core, stepArg } from "./core.js";
import { cancelTimer, setWaiterWake, timer } from "./promises.js";

export const waiters = new Map();

/** After a STILL_QUEUED step of `waiter`: its timer as the step says (`stepArg()` ms, or none at -1). */
export function rearm(waiter, id) {
  const ms = stepArg();
  if (waiter.timer !== null) cancelTimer(waiter.timer);
  waiter.timer = ms < 0 ? null : timer(ms, () => {
    waiter.timer = null;
    stepWaiter(id);
  });
}

/** The waiter stops waiting: its timer goes too. */
export function forget(waiter, id) {
  waiters.delete(id);
  if (waiter.timer !== null) cancelTimer(waiter.timer);
  waiter.timer = null;
}

function stepWaiter(id) {
  const waiter = waiters.get(id);
  if (waiter === undefined) return;
  waiter.scheduled = false;
  const code = core.stepQueued(id, performance.now());
  if (code === STILL_QUEUED) return rearm(waiter, id);
  forget(waiter, id);
  waiter.go(code);
}

/** Whether a waiter for `key` on `store` was woken and has not stepped yet: a hand-over under way. */
export function handingOver(store, key) {
  for (const waiter of waiters.values()) if (waiter.scheduled && waiter.store === store && waiter.key === key) return true;
  return false;
}

/** How many wait for `key` on `store`. */
export function waitingFor(store, key) {
  let waiting = 0;
  for (const waiter of waiters.values()) if (waiter.store === store && waiter.key === key) waiting++;
  return waiting;
}

// Waiters woken and not stepped yet, in the order woken (`woken[wokenAt]` is next): each wake
// queues one microtask, which steps the oldest. A resolved promise's `then` with one function
// for all: Node's `queueMicrotask` makes an async resource and a bound function per call.
const woken = [];
let wokenAt = 0;
export const resolved = Promise.resolve();

function stepWoken() {
  const id = woken[wokenAt++];
  if (wokenAt === woken.length) {
    woken.length = 0;
    wokenAt = 0;
  }
  stepWaiter(id);
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
