// The checks the test Workers' cases are written with, and the few waits they share: a failed
// check throws, and the route answers it as an error.
import { sleep } from "./shared.js";

export class Failure extends Error {}
export function check(cond, message) {
  if (!cond) throw new Failure(message);
}
export function eq(actual, expected, what) {
  check(
    JSON.stringify(actual) === JSON.stringify(expected),
    `${what}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)}`,
  );
}
export async function rejects(promise, cls, pattern, what) {
  try {
    await promise;
  } catch (e) {
    check(e instanceof cls || e?.name === cls.name, `${what}: expected ${cls.name}, got ${e?.name}: ${e?.message}`);
    check(pattern.test(String(e?.message)), `${what}: message ${JSON.stringify(e?.message)} does not match ${pattern}`);
    return e;
  }
  throw new Failure(`${what}: did not reject`);
}
export async function throwsSync(fn, cls, pattern, what) {
  return rejects((async () => fn())(), cls, pattern, what);
}
/** Waits (polling the store) until `l`'s key is free; the DO's clock decides. */
export async function untilFree(l, limitMs = 10_000) {
  const deadline = Date.now() + limitMs;
  while (await l.isLocked()) {
    check(Date.now() < deadline, `${l.key} still locked after ${limitMs} ms`);
    await sleep(20);
  }
}
export const unique = (name) => `${name}:${crypto.randomUUID()}`;
export const stubFor = (env, key) => env.LOCKS.get(env.LOCKS.idFromName(key));

/** Polls the key's object until `waiting` calls are queued in it. */
export async function untilQueued(env, key, waiting, limitMs = 10_000) {
  const deadline = Date.now() + limitMs;
  let seen;
  while ((seen = (await stubFor(env, key).snapshot()).waiting) !== waiting) {
    check(Date.now() < deadline, `${key}: ${seen} calls queued after ${limitMs} ms, expected ${waiting}`);
    await sleep(5);
  }
}

/** `promise`, with `settled` telling whether it has settled yet. */
export function watched(promise) {
  const w = { settled: false, promise };
  promise.then(() => (w.settled = true), () => (w.settled = true));
  return w;
}
/** Checks a store answer is a grant: `{ fence }` (plus `waitedMs` after a wait); answers the fence. */
export function fenceOf(answer, what) {
  check(Number.isSafeInteger(answer?.fence) && answer.fence >= 1, `${what}: answered ${JSON.stringify(answer)}`);
  return answer.fence;
}
export function increasing(fences, what) {
  for (let i = 1; i < fences.length; i++) check(fences[i] > fences[i - 1], `${what}: fence ${fences[i]} after ${fences[i - 1]}`);
}
