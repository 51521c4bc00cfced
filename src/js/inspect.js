// Who holds a key, as a store answers it (`inspect`) and reports it (`watch`): read from the
// known fields alone, so an owner token a store put anywhere else never reaches the caller.

import { ELAPSED, answerWithin } from "./calls.js";
import { LockStoreTimeoutError } from "./errors.js";
import { NO_INSPECT } from "./options.js";

/** Whether `fence` is one: a whole number from 1 to 2^53 - 1. */
export function isFence(fence) {
  return Number.isInteger(fence) && fence >= 1 && fence <= Number.MAX_SAFE_INTEGER;
}

/** Whether a holder's `metadata` (null: none) and `remainingMs` are what the seam answers. */
export function isHolder(metadata, remainingMs) {
  return (metadata === null || typeof metadata === "string") && remainingMs >= 0 && remainingMs <= 2147483647;
}

/**
 * `key`'s live holds and waiters from `store`, within `bound` ms: `{ key, held, holders:
 * [{ metadata, fence, remainingMs }], waiting }`.
 */
export async function inspectOn(store, key, bound) {
  const object = store.object;
  if (typeof object.inspect !== "function") throw new TypeError(`inspect: ${NO_INSPECT}`);
  const answer = await answerWithin(object.inspect(key), bound);
  if (answer === ELAPSED) throw new LockStoreTimeoutError(key, "inspect", bound);
  const broken = () =>
    new TypeError("lock store's inspect() must answer { holders: [{ metadata, fence, remainingMs }], waiting }");
  if (answer === null || typeof answer !== "object" || !Array.isArray(answer.holders)) throw broken();
  const holders = answer.holders.map((h) => {
    if (h === null || typeof h !== "object") throw broken();
    const { metadata = null, fence, remainingMs } = h;
    if (!((fence === null || isFence(fence)) && isHolder(metadata, remainingMs))) throw broken();
    return { metadata, fence, remainingMs: Math.ceil(remainingMs) };
  });
  holders.sort((a, b) => (a.fence ?? 0) - (b.fence ?? 0));
  const waiting = answer.waiting ?? null;
  if (!(waiting === null || (Number.isInteger(waiting) && waiting >= 0))) throw broken();
  return { key, held: holders.length > 0, holders, waiting };
}
