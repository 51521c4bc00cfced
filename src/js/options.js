// Run and acquire options, the Web Locks API's, abort signals and hold metadata.

/**
 * The Web Locks API's request options, on `handle` (a Lock or a set of keys): `ifAvailable:
 * true` takes the key only if it is free now (keel-lock's default, `timeout` 0); `steal: true`
 * frees the key whoever holds it (`forceRelease`: the old holder learns at its next extend,
 * its run's signal aborting) and then takes it with the other options — a waiter already queued
 * for it is served first. Checked, then `then(rest)` with the other options.
 */
export function webLocksOptions(handle, options, then) {
  const { ifAvailable, steal, ...rest } = options;
  for (const [name, value] of [["ifAvailable", ifAvailable], ["steal", steal]]) {
    if (value !== undefined && typeof value !== "boolean") {
      return Promise.reject(new TypeError(`options.${name} must be a boolean, got ${typeof value}`));
    }
  }
  if (ifAvailable && steal) {
    return Promise.reject(new TypeError("options.ifAvailable and options.steal cannot be combined: one leaves a held key alone, the other takes it"));
  }
  if (ifAvailable && rest.timeout !== undefined && rest.timeout !== 0) {
    return Promise.reject(new TypeError(`options.ifAvailable never waits, so it cannot be combined with timeout ${String(rest.timeout)}`));
  }
  if (!steal) return then(rest);
  if (handle.limit !== null) {
    return Promise.reject(new TypeError("options.steal takes a key to hold alone: a semaphore permit or a read lock cannot steal"));
  }
  return handle.forceRelease().then(() => then(rest));
}

/** Whether `options` asks for the Web Locks API's `ifAvailable` or `steal`. */
export function asksWebLocks(options) {
  return options?.ifAvailable !== undefined || options?.steal !== undefined;
}

// Where each option sits in what `plainOptions` answers.
export const TIMEOUT = 0;
export const RETRY_DELAY = 1;
export const SIGNAL = 2;
export const AUTO_EXTEND = 3;
export const PERMITS = 4;
export const METADATA = 5;

const NO_OPTIONS = [NaN, NaN, undefined, undefined, undefined, undefined];

/**
 * Run options this layer drives itself: `[timeout, retryDelay, signal, autoExtend, permits,
 * metadata]` (NaN, undefined = not given), or null.
 */
export function plainOptions(options) {
  if (options === undefined || options === null) return NO_OPTIONS;
  if (typeof options !== "object") return null;
  const { timeout, retryDelay, signal, autoExtend, permits, metadata } = options;
  const number = (v) => v === undefined || (typeof v === "number" && v === v);
  if (!number(timeout) || !number(retryDelay)) return null;
  return [timeout ?? NaN, retryDelay ?? NaN, signal, autoExtend, permits, metadata];
}

/** What an aborted wait rejects with: the signal's reason, or an AbortError when it has none. */
export function abortReason(signal) {
  if (signal.reason !== undefined) return signal.reason;
  const error = new Error("the operation was aborted");
  error.name = "AbortError";
  return error;
}

export const nothing = () => {};

/** Calls `f` once if `signal` (may be undefined) aborts, until the returned function is called. */
export function onAbort(signal, f) {
  if (signal === undefined) return nothing;
  signal.addEventListener("abort", f, { once: true });
  return () => signal.removeEventListener("abort", f);
}

// Why a store cannot inspect or keep metadata.
export const NO_INSPECT =
  "the lock store cannot say who holds a key, and keeps no hold metadata: it has no inspect method";

/**
 * The error `metadata` earns on `store`: not a string, longer than 1 KiB of UTF-8, or given to
 * a store that would not keep it; undefined when it is good.
 */
export function metadataError(store, metadata) {
  const bad = badMetadata(metadata);
  if (bad !== undefined) return bad;
  if (typeof store.object.inspect !== "function") return new TypeError(`metadata: ${NO_INSPECT}`);
  return undefined;
}

/** Throws the error of bad `metadata`. */
export function checkMetadata(metadata) {
  const bad = badMetadata(metadata);
  if (bad !== undefined) throw bad;
}

/** The error of `metadata` that is not a string of at most 1 KiB of UTF-8; else undefined. */
function badMetadata(metadata) {
  if (typeof metadata !== "string") return new TypeError(`metadata must be a string, got ${typeof metadata}`);
  // UTF-16 units never outnumber UTF-8 bytes, and one unit is at most 3 bytes.
  if (metadata.length * 3 > 1024) {
    const bytes = new TextEncoder().encode(metadata).length;
    if (bytes > 1024) return new RangeError(`metadata is ${bytes} bytes of UTF-8; the limit is 1024`);
  }
  return undefined;
}
