// The bridge between JS promises and the core's futures, written so that awaiting a promise or
// handing out one costs no per-call wasm closure: JS calls back into wasm through one function,
// set once, naming the waiting future by a number.

let settled = null;

export function setSettled(f) {
  settled = f;
}

// The other way: the wasm wakes a caller waiting in the memory store's queue (`wakeWaiter`,
// called by src/js/handle/queue.rs); the JS layer, which steps the waiter, says once how.
let waiterWake = null;

export function setWaiterWake(f) {
  waiterWake = f;
}

export function wakeWaiter(id) {
  waiterWake(id);
}

/** Calls back `settled(id, ok, value)` when `value` (a promise, a thenable or a plain value) settles. */
export function whenSettled(value, id) {
  Promise.resolve(value).then(
    (v) => settled(id, true, v),
    (e) => settled(id, false, e),
  );
}

// Timers share one host timer, armed for the earliest deadline. Most of them are cancelled long
// before they are due (the bound on every store call is the lock's TTL). The core's timers
// (`sleep`, by id) are a Map entry each. JS's own (`timer`: the bound on a store call that has not
// answered at once, a pause between attempts) queue by duration, since timers of one duration fall
// due in the order they were set: starting one is a push, cancelling one marks it. While nothing
// is due the host timer is unref'd (Node, Bun, Deno), so a cancelled bound never keeps a process
// alive. In workerd a timer belongs to the request that set it, so there every timer is its own
// host timer.
const perRequest = globalThis.navigator?.userAgent === "Cloudflare-Workers";
const deno = globalThis.Deno;
const due = new Map(); // id -> deadline (performance.now() ms)
const queues = new Map(); // duration ms -> { ms, items: [timer, …], head, dead }: items[head] is live
let queued = 0; // JS timers neither fired nor cancelled
const MAX_DELAY = 2 ** 31 - 1;
let armedAt = Infinity;
let host;
let refed = false; // whether `host` keeps the process alive

function refHost(on) {
  if (host === undefined || on === refed) return;
  refed = on;
  if (typeof host === "object") on ? host.ref?.() : host.unref?.();
  else if (deno?.refTimer) on ? deno.refTimer(host) : deno.unrefTimer(host);
}

function arm(at) {
  if (at >= armedAt) {
    refHost(true);
    return;
  }
  if (host !== undefined) clearTimeout(host);
  armedAt = at;
  // A longer delay would overflow setTimeout (it then fires at once); the tick re-arms instead.
  host = setTimeout(tick, Math.min(MAX_DELAY, Math.max(0, Math.ceil(at - performance.now()))));
  refed = true;
}

/** Nothing is due any more: the host timer, if armed, no longer keeps the process alive. */
function idle() {
  if (due.size === 0 && queued === 0) refHost(false);
}

/**
 * Moves `q`'s head past timers that fired or were cancelled; an emptied queue starts over. Timers
 * cancelled behind a head that stays live (a store call that has not answered, for up to its
 * bound) are dropped once they are most of the queue, so they never pile up.
 */
function advance(q) {
  const items = q.items;
  while (q.head < items.length && items[q.head].f === null) {
    q.head++;
    q.dead--;
  }
  if (q.head === items.length) {
    items.length = 0;
    q.head = 0;
    // Durations come and go with the TTLs and timeouts in use: keep a few queues, not all.
    if (queues.size > 16) queues.delete(q.ms);
  } else if (q.dead > 64 && q.dead * 2 > items.length - q.head) {
    q.items = items.filter((t, i) => i >= q.head && t.f !== null);
    q.head = 0;
    q.dead = 0;
  } else if (q.head > 64 && q.head * 2 > items.length) {
    q.items = items.slice(q.head);
    q.head = 0;
  }
}

function tick() {
  armedAt = Infinity;
  host = undefined;
  refed = false;
  const now = performance.now();
  const ready = [];
  for (const [id, at] of due) if (at <= now) ready.push([at, id]);
  for (const [, id] of ready) due.delete(id);
  for (const q of queues.values()) {
    for (let i = q.head; i < q.items.length && q.items[i].at <= now; i++) {
      if (q.items[i].f !== null) ready.push([q.items[i].at, q.items[i]]);
    }
  }
  ready.sort((a, b) => a[0] - b[0]);
  // Fired in deadline order; a callback may start or cancel timers meanwhile.
  for (const [, what] of ready) {
    if (typeof what === "number") settled(what, true, undefined);
    else fireTimer(what);
  }
  let next = Infinity;
  for (const at of due.values()) if (at < next) next = at;
  for (const q of queues.values()) if (q.head < q.items.length && q.items[q.head].at < next) next = q.items[q.head].at;
  if (next !== Infinity) arm(next);
}

function fireTimer(t) {
  const f = t.f;
  if (f === null) return; // cancelled by an earlier callback of this tick
  t.f = null;
  queued--;
  if (t.q !== null) {
    t.q.dead++;
    advance(t.q);
  }
  f();
}

/** Calls `f()` after `ms`, on the shared host timer; answers the timer, for `cancelTimer`. */
export function timer(ms, f) {
  queued++;
  if (perRequest) {
    const t = { at: 0, f, q: null, host: undefined };
    t.host = setTimeout(() => fireTimer(t), Math.min(ms, MAX_DELAY));
    return t;
  }
  let q = queues.get(ms);
  if (q === undefined) {
    q = { ms, items: [], head: 0, dead: 0 };
    queues.set(ms, q);
  }
  const t = { at: performance.now() + ms, f, q, host: undefined };
  q.items.push(t);
  arm(t.at);
  return t;
}

/** Forgets timer `t` if it has not fired. */
export function cancelTimer(t) {
  if (t.f === null) return;
  t.f = null;
  queued--;
  if (t.q === null) clearTimeout(t.host);
  else {
    t.q.dead++;
    advance(t.q);
  }
  idle();
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
      settled(id, true, undefined);
    }, Math.min(ms, MAX_DELAY));
    undo.set(id, () => clearTimeout(host));
    return;
  }
  const at = performance.now() + ms;
  due.set(id, at);
  arm(at);
}

// What undoes a pending timer in workerd, by id, until it fires.
const undo = new Map();

/** Forgets the timer `id` if it has not fired. */
export function cancel(id) {
  if (due.delete(id)) {
    idle();
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

/** A promise the core settles later with `settle(id, ok, value)` (`checkLockStore`'s). */
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
