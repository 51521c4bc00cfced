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

export function notHeld(key, message) {
  return new LockNotHeldError(key, message);
}

export function errorClass() {
  return LockNotHeldError;
}
