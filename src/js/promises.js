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

// Timers share one host timer, armed for the earliest deadline. Most of them are cancelled long
// before they are due (the bound on every store call is the lock's TTL), so each costs a Map
// entry instead of a setTimeout/clearTimeout pair. While nothing is due the host timer is
// unref'd (Node, Bun, Deno), so a cancelled bound never keeps a process alive. In workerd a timer
// belongs to the request that set it, so there every timer is its own host timer.
const perRequest = globalThis.navigator?.userAgent === "Cloudflare-Workers";
const deno = globalThis.Deno;
const due = new Map(); // id -> deadline (performance.now() ms)
const MAX_DELAY = 2 ** 31 - 1;
let armedAt = Infinity;
let host;

function keepAlive(on) {
  if (host === undefined) return;
  if (typeof host === "object") on ? host.ref?.() : host.unref?.();
  else if (deno?.refTimer) on ? deno.refTimer(host) : deno.unrefTimer(host);
}

function arm(at) {
  if (at >= armedAt) {
    keepAlive(true);
    return;
  }
  if (host !== undefined) clearTimeout(host);
  armedAt = at;
  // A longer delay would overflow setTimeout (it then fires at once); the tick re-arms instead.
  host = setTimeout(tick, Math.min(MAX_DELAY, Math.max(0, Math.ceil(at - performance.now()))));
}

function tick() {
  armedAt = Infinity;
  host = undefined;
  const now = performance.now();
  const ready = [];
  for (const [id, at] of due) if (at <= now) ready.push([at, id]);
  ready.sort((a, b) => a[0] - b[0]);
  for (const [, id] of ready) due.delete(id);
  // Fired in deadline order; a callback may start or cancel timers meanwhile.
  for (const [, id] of ready) fire(id);
  let next = Infinity;
  for (const at of due.values()) if (at < next) next = at;
  if (next !== Infinity) arm(next);
}

// Timers set from JS (negative ids) call a function; the core's (positive ids) report through
// `settled`.
const callbacks = new Map();
let lastTimer = 0;

function fire(id) {
  const f = callbacks.get(id);
  if (f === undefined) return settled(id, true, undefined);
  callbacks.delete(id);
  f();
}

/** Calls `f()` after `ms`, on the shared host timer; answers an id for `cancel`. */
export function timer(ms, f) {
  const id = --lastTimer;
  callbacks.set(id, f);
  sleep(ms, id);
  return id;
}

/** Milliseconds on a clock that only moves forward: what waits and the memory store measure. */
export function monotonicNow() {
  return performance.now();
}

/** Calls back `settled(id, true, undefined)` after `ms`. */
export function sleep(ms, id) {
  if (perRequest) {
    const host = setTimeout(() => {
      undo.delete(id);
      fire(id);
    }, Math.min(ms, MAX_DELAY));
    undo.set(id, () => clearTimeout(host));
    return;
  }
  const at = performance.now() + ms;
  due.set(id, at);
  arm(at);
}

// What undoes a pending abort listener (or, in workerd, a timer), by id, until it fires.
const undo = new Map();

/** Calls back `settled(id, true, undefined)` when `signal` aborts. */
export function onAbort(signal, id) {
  const listener = () => {
    undo.delete(id);
    settled(id, true, undefined);
  };
  signal.addEventListener("abort", listener, { once: true });
  undo.set(id, () => signal.removeEventListener("abort", listener));
}

/** Forgets the event `id` (its timer, or its abort listener) if it has not fired. */
export function cancel(id) {
  callbacks.delete(id);
  if (due.delete(id)) {
    if (due.size === 0) keepAlive(false);
    return;
  }
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
