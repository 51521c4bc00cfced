// The bridge between JS promises and the core's futures, written so that awaiting a promise or
// handing out one costs no per-call wasm closure: JS calls back into wasm through one function,
// set once, naming the waiting future by a number.

let settled = null;

export function setSettled(f) {
  settled = f;
}

/** Calls back `settled(id, ok, value)` when `value` (a promise, a thenable or a plain value) settles. */
export function watch(value, id) {
  Promise.resolve(value).then(
    (v) => settled(id, true, v),
    (e) => settled(id, false, e),
  );
}

/** Calls back `settled(id, true, undefined)` after `ms`; answers the timer to cancel. */
export function sleep(ms, id) {
  return setTimeout(() => settled(id, true, undefined), ms);
}

export function cancelSleep(timer) {
  clearTimeout(timer);
}

const pending = new Map();

/** A promise the core settles later with `settle(id, ok, value)`. */
export function deferred(id) {
  return new Promise((resolve, reject) => pending.set(id, { resolve, reject }));
}

export function settle(id, ok, value) {
  const p = pending.get(id);
  if (p === undefined) return;
  pending.delete(id);
  if (ok) p.resolve(value);
  else p.reject(value);
}

/** Calls back `settled(id, true, undefined)` when `signal` aborts; answers the listener. */
export function onAbort(signal, id) {
  const listener = () => settled(id, true, undefined);
  signal.addEventListener("abort", listener, { once: true });
  return listener;
}

export function offAbort(signal, listener) {
  signal.removeEventListener("abort", listener);
}
