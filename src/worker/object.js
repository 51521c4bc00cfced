// The Durable Object's promises as plain steps, so that its handlers run no wasm future: a
// queued call's promise, the timer of its next look, and answers sent once an alarm call has
// landed.

/** A queued call's promise and the functions that settle it: `[promise, resolve, reject]`. */
export function opened() {
  let resolve;
  let reject;
  const promise = new Promise((yes, no) => {
    resolve = yes;
    reject = no;
  });
  return [promise, resolve, reject];
}

/** Calls `look(key, id)` after `ms`; answers the timer, for `stopLooking`. */
export function lookLater(ms, look, key, id) {
  return setTimeout(() => look(key, id), ms);
}

export function stopLooking(timer) {
  clearTimeout(timer);
}

/** `value` once `call` (a storage promise) has landed; what `failed(error)` answers if it fails. */
export function after(call, value, failed) {
  return call.then(() => value, failed);
}

/**
 * `out` with `out.alarm` set from the alarm `read` answers (its time in epoch ms, or null);
 * what `failed(error)` answers if the read fails.
 */
export function withAlarm(read, out, failed) {
  return read.then((at) => {
    out.alarm = typeof at === "number" && at >= 0 && at < Infinity ? Math.trunc(at) : null;
    return out;
  }, failed);
}

/**
 * `inspect`'s answer, `{ holders: [{ metadata, fence, remainingMs }], waiting }`, from the
 * `[fence, metadata, ms left]` rows of a key's live holds (in fence order); a row's missing
 * fence or metadata is `null`.
 */
export function inspected(rows, waiting) {
  const holders = [];
  for (const [fence, metadata, remainingMs] of rows) {
    holders.push({ metadata: metadata ?? null, fence: fence ?? null, remainingMs });
  }
  return { holders, waiting };
}

/**
 * The diagnostics `snapshot` answers, but for its alarm (see `withAlarm`): the `[key,
 * expiresAt]` rows of the lock table and the `[key, expiresAt, weight, limit]` ones of the
 * shared holds, the object's clock and how many calls it has queued.
 */
export function snapshotOf(rows, shared, now, waiting) {
  const out = { now, alarm: null, rows: [], shared: [], waiting };
  for (const [key, expiresAt] of rows) out.rows.push({ key, expiresAt });
  for (const [key, expiresAt, weight, limit] of shared) out.shared.push({ key, expiresAt, weight, limit });
  return out;
}
