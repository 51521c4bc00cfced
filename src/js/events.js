// Lock events: what a run, an acquire, a release and an extend came to, for whoever listens
// (`onLockEvent`, and `keel-lock/otel` on top of it). Nothing here runs while nobody listens:
// the handles check `listening` and call the plain methods. With a listener, the public method
// is wrapped once, at its boundary, so that every outcome — the grant and how it came, a
// refusal, a timeout, an abort, a loss, a store error — is read from what the method answered,
// the same way on every store and in every runtime.

let listeners = [];
let attempts = 0;

// Whether anyone listens: the handles' one check on their way in (an object, so that its
// importers see it change in every module form).
export const events = { listening: false };

/**
 * Calls `listener(event)` for every lock event from now on, until the returned function is
 * called. A listener that throws is reported on the console and does not change the lock.
 */
export function onLockEvent(listener) {
  if (typeof listener !== "function") throw new TypeError(`onLockEvent: listener must be a function, got ${typeof listener}`);
  const entry = (event) => listener(event);
  listeners = [...listeners, entry];
  events.listening = true;
  return () => {
    listeners = listeners.filter((l) => l !== entry);
    events.listening = listeners.length > 0;
  };
}

function emit(event) {
  for (const listener of listeners) {
    try {
      listener(event);
    } catch (error) {
      console.error("keel-lock: a lock event listener threw", error);
    }
  }
}

/**
 * The store's name for events: its `Symbol.toStringTag` (the Redis and SQL stores set one), its
 * class's, or "LockStore" for a plain object.
 */
function storeName(object) {
  const tag = object?.[Symbol.toStringTag];
  if (typeof tag === "string" && tag !== "") return tag;
  const name = object?.constructor?.name;
  return typeof name === "string" && name !== "" && name !== "Object" ? name : "LockStore";
}

function isAbort(error, signal) {
  return signal !== undefined && signal.aborted && error === signal.reason;
}

/**
 * `handle.run(fn, options)` (or `acquire(options)` when `fn` is null) told as events; `call`
 * makes the plain call with the `fn` to run. The first event, `run` (or `acquire`), may be
 * given `runInside(call)` by a listener: `fn` is then run as `runInside(() => fn(context))`
 * (each listener wrapping the one before), so a tracer's span is active around it.
 */
function observed(handle, fn, options, viaOf, store, call) {
  const started = performance.now();
  const base = {
    key: handle.key ?? handle.keys,
    store,
    kind: handle.limit === null ? "lock" : handle.limit === 4294967295 ? "read" : "semaphore",
    attempt: ++attempts,
  };
  const timeout = typeof options?.timeout === "number" ? options.timeout : 0;
  const first = { type: fn === null ? "acquire" : "run", ...base, timeoutMs: timeout, runInside: undefined };
  emit(first);
  let grantedAt;
  let fence = null;
  const granted = (f) => {
    grantedAt = performance.now();
    fence = f;
    emit({ type: "granted", ...base, fence, waitedMs: grantedAt - started, via: viaOf() });
  };
  const ended = (type, extra) => emit({ type, ...base, waitedMs: performance.now() - started, ...extra });
  let answer;
  if (fn === null) {
    answer = call(undefined).then(
      (took) => {
        if (took) {
          granted(handle.fence ?? null);
        } else ended(timeout > 0 ? "timed-out" : "refused");
        return took;
      },
      (error) => {
        ended(isAbort(error, options?.signal) ? "aborted" : "error", { error });
        throw error;
      },
    );
    return answer;
  }
  const inside = (context) => {
    granted(context.fence ?? null);
    const signal = context.signal;
    if (signal !== undefined) {
      signal.addEventListener("abort", () => emit({ type: "lost", ...base, fence, reason: signal.reason }), { once: true });
    }
    const runInside = first.runInside;
    return typeof runInside === "function" ? runInside(() => fn(context)) : fn(context);
  };
  return call(inside).then(
    (result) => {
      if (result[0]) emit({ type: "released", ...base, fence, heldMs: performance.now() - grantedAt });
      else ended(timeout > 0 ? "timed-out" : "refused");
      return result;
    },
    (error) => {
      if (grantedAt !== undefined) {
        emit({ type: "released", ...base, fence, heldMs: performance.now() - grantedAt, error });
      } else ended(isAbort(error, options?.signal) ? "aborted" : "error", { error });
      throw error;
    },
  );
}

/** `handle.release()` or `handle.extend()` (`type`) told as one event when it settles. */
function observedStep(handle, type, store, call) {
  const started = performance.now();
  const fence = handle.fence ?? null;
  const base = { key: handle.key ?? handle.keys, store, fence };
  return call().then(
    (answer) => {
      const durationMs = performance.now() - started;
      if (type === "release") emit({ type: answer ? "released" : "release-refused", ...base, durationMs });
      else emit({ type: "extended", ...base, durationMs });
      return answer;
    },
    (error) => {
      const durationMs = performance.now() - started;
      const lost = error?.name === "LockNotHeldError";
      emit({ type: lost ? "lost" : "error", operation: type, ...base, durationMs, reason: lost ? error : undefined, error: lost ? undefined : error });
      throw error;
    },
  );
}

// Handles whose calls are not told on their own: a set's per-key handles (the set is told as
// one), and any call made while a told call is entering (its plain twin).
const setParts = new WeakSet();
let quiet = 0;

/** `handle` is a part of a set of keys: the set is told, not its parts. */
export function partOfSet(handle) {
  setParts.add(handle);
}

/**
 * How the grant now being handed to a run came (`via`), set by the wait that ended in it and
 * read, in the same synchronous stretch, by the told run (null: it came at once). An acquire
 * files its way in `acquiredVia` under the handle the user called.
 */
export const grant = { via: null };
export const acquiredVia = new WeakMap();

/** How the grant a told call was just given came: "immediate", "hand-over" or "poll". */
function takeVia(handle) {
  const via = acquiredVia.get(handle) ?? grant.via ?? "immediate";
  acquiredVia.delete(handle);
  grant.via = null;
  return via;
}

/** Whether a call of `handle` now is told as lock events of its own. */
export function told(handle) {
  return quiet === 0 && !setParts.has(handle);
}

/** `call(fn')`, the plain run or acquire of `handle` on `store`, told as lock events. */
export function toldRun(handle, store, fn, options, call) {
  grant.via = null;
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
export function toldStep(handle, store, type, call) {
  return observedStep(handle, type, storeName(store.object), () => {
    quiet++;
    try {
      return call();
    } finally {
      quiet--;
    }
  });
}
