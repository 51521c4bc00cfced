// The one piece of the JS API that must be written in JS: a real Error subclass, so that
// `instanceof LockNotHeldError`, `instanceof Error` and stack traces all behave natively.
// The Rust bindings construct it through `notHeld` below.

/** Thrown by `extend()` when the lock was lost or never acquired. */
export class LockNotHeldError extends Error {
  constructor(key, message) {
    super(message ?? `lock "${key}" is not held`);
    this.name = "LockNotHeldError";
    this.key = key;
  }
}

/** Rejects a lock call whose store did not answer in time: the call was abandoned. */
export class LockStoreTimeoutError extends Error {
  constructor(key, operation, afterMs, message) {
    super(message ?? `the lock store did not answer ${operation}() for "${key}" within ${afterMs} ms`);
    this.name = "LockStoreTimeoutError";
    this.key = key;
    this.operation = operation;
    this.afterMs = afterMs;
  }
}

export function storeTimeout(key, operation, afterMs) {
  return new LockStoreTimeoutError(key, operation, afterMs);
}

export function notHeld(key, message) {
  return new LockNotHeldError(key, message);
}

/**
 * Rejects an acquire on a key whose live shared holds have another limit: `semaphore(key, 5)`
 * while holders of `semaphore(key, 3)` (or read locks) are live. Never granted: "at most N"
 * would mean two things at once.
 */
export class LimitMismatchError extends Error {
  constructor(key, heldLimit, limit) {
    super(`"${key}" is held under a limit of ${heldLimit}; asked for a limit of ${limit}`);
    this.name = "LimitMismatchError";
    this.key = key;
    this.heldLimit = heldLimit;
    this.limit = limit;
  }
}

export function limitMismatch(key, heldLimit, limit) {
  return new LimitMismatchError(key, heldLimit, limit);
}
