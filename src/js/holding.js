// The parts of holding a lock that JS must provide itself: the context object `run(fn)` hands
// `fn` (its `signal` is a real AbortSignal, created only when read), the error `hold()` throws,
// and the `Symbol.asyncDispose` method that lets `await using` release a lock.

// Told when a run's context has its signal first read, so the hold's deadline is only watched
// for a `fn` that looks at its signal: `(handle, context)`.
let runObserver = null;

export function setRunObserver(f) {
  runObserver = f;
}

/** What `run(fn)` passes to `fn`: the hold's fence, and a signal aborted when the hold is lost. */
export class LockContext {
  #controller = null;
  #lost = undefined;
  #handle;

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
      else if (this.#handle !== null) runObserver?.(this.#handle, this);
    }
    return this.#controller.signal;
  }

  /** The run is over: reading `signal` from now on watches nothing. */
  static end(context) {
    context.#handle = null;
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

export function unavailableErrorClass() {
  return LockUnavailableError;
}

const asyncDispose = Symbol.asyncDispose ?? Symbol.for("Symbol.asyncDispose");

/**
 * Gives the class of `instance` the two methods written in JS: `[Symbol.asyncDispose]()`, which
 * releases the lock, and `hold(options)`, which acquires it or throws, for `await using`.
 */
export function installHolding(instance) {
  const proto = Object.getPrototypeOf(instance);
  if (Object.prototype.hasOwnProperty.call(proto, asyncDispose)) return;
  const method = (value) => ({ value, configurable: true, writable: true });
  Object.defineProperty(
    proto,
    asyncDispose,
    method(async function () {
      await this.release();
    }),
  );
  Object.defineProperty(
    proto,
    "hold",
    method(async function (options) {
      if (!(await this.acquire(options))) {
        const waited = options?.timeout ? ` after waiting ${options.timeout} ms` : "";
        throw new LockUnavailableError(this.key, `lock "${this.key}" is held by someone else${waited}`);
      }
      const keep = options?.autoExtend;
      if (keep) this.autoExtend(keep === true ? undefined : keep);
      return this;
    }),
  );
}
