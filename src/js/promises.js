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

// What undoes a pending event (a timer, an abort listener), by id, until it fires.
const undo = new Map();

function fire(id) {
  undo.delete(id);
  settled(id, true, undefined);
}

/** Calls back `settled(id, true, undefined)` after `ms`. */
export function sleep(ms, id) {
  const timer = setTimeout(() => fire(id), ms);
  undo.set(id, () => clearTimeout(timer));
}

/** Calls back `settled(id, true, undefined)` when `signal` aborts. */
export function onAbort(signal, id) {
  const listener = () => fire(id);
  signal.addEventListener("abort", listener, { once: true });
  undo.set(id, () => signal.removeEventListener("abort", listener));
}

/** Forgets the event `id` (clears its timer or removes its listener) if it has not fired. */
export function cancel(id) {
  const u = undo.get(id);
  if (u === undefined) return;
  undo.delete(id);
  u();
}

/**
 * A caller stopped waiting for `answer`, an acquire still in flight: if it turns out to be a
 * grant, `target.release(key, owner)`, so no key stays held for a caller that is gone.
 */
export function releaseLateGrant(answer, target, key, owner) {
  Promise.resolve(answer)
    .then((a) => (a === false || a == null ? undefined : target.release(key, owner)))
    .then(undefined, () => {});
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
