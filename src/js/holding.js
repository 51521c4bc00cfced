// The parts of holding a lock that JS must provide itself: the context object `run(fn)` hands
// `fn` (its `signal` is a real AbortSignal, created only when read), the error `hold()` throws,
// and what `hold()` and `await using` do with a lock or a set of keys.

// Called when a run's context has its signal first read, so the hold's deadline is only watched
// for a `fn` that looks at its signal: `(handle, context)`.
let onSignalRead = null;

export function setOnSignalRead(f) {
  onSignalRead = f;
}

/** What `run(fn)` passes to `fn`: the hold's fence, and a signal aborted when the hold is lost. */
export class LockContext {
  #controller = null;
  #lost = undefined;
  #handle;
  // The watcher of the run's hold (`{ stop() }`), once one was started; else null.
  #watcher = null;

  /** `handle`: the Lock whose run this is, watched once `signal` is read (null: never). */
  constructor(fence, handle = null) {
    /** The hold's fencing token, or null when the store keeps no fences. */
    this.fence = fence;
    this.#handle = handle;
  }

  /** Aborted (with a LockNotHeldError) the moment the hold is known or presumed lost. */
  get signal() {
    if (this.#controller === null) {
      this.#controller = new AbortController();
      if (this.#lost !== undefined) this.#controller.abort(this.#lost);
      else if (this.#handle !== null) onSignalRead?.(this.#handle, this);
    }
    return this.#controller.signal;
  }

  /** Whether the run's hold has a watcher. */
  static watched(context) {
    return context.#watcher !== null;
  }

  /** `watcher` (`{ stop() }`) watches the run's hold until the run is over. */
  static watchWith(context, watcher) {
    context.#watcher = watcher;
  }

  /**
   * The run is over: reading `signal` from now on watches nothing, and the hold's watcher
   * stops. Answers what its `stop()` answers (it resolves once no extend is in flight), or
   * undefined when there was none.
   */
  static end(context) {
    context.#handle = null;
    const watcher = context.#watcher;
    if (watcher === null) return undefined;
    context.#watcher = null;
    return watcher.stop();
  }

  static lose(context, reason) {
    if (context.#lost !== undefined) return;
    context.#lost = reason;
    context.#controller?.abort(reason);
  }
}

/** Thrown by `hold()` when the lock could not be acquired within its timeout. */
export class LockUnavailableError extends Error {
  constructor(key, message) {
    super(message ?? `lock "${key}" is held by someone else`);
    this.name = "LockUnavailableError";
    this.key = key;
  }
}

/** The method `await using` calls: it releases the lock. */
export const asyncDispose = Symbol.asyncDispose ?? Symbol.for("Symbol.asyncDispose");

/**
 * `handle.hold(options)` (a lock, or a set of keys): acquires it or throws LockUnavailableError;
 * with `autoExtend`, keeps extending it. Answers the handle, for `await using`.
 */
export async function holdOrThrow(handle, options) {
  if (!(await handle.acquire(options))) {
    const waited = options?.timeout ? ` after waiting ${options.timeout} ms` : "";
    const keys = handle.keys;
    throw keys === undefined
      ? new LockUnavailableError(handle.key, `lock "${handle.key}" is held by someone else${waited}`)
      : new LockUnavailableError(keys[0], `locks ${keys.map((key) => `"${key}"`).join(", ")}: one is held by someone else${waited}`);
  }
  const autoExtend = options?.autoExtend;
  if (autoExtend) handle.autoExtend(autoExtend === true ? undefined : autoExtend);
  return handle;
}
