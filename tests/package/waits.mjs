// Time in the package's tests. A loaded machine can stall a test for a second or more between two
// lines, so no verdict rests on a short stretch of wall-clock time: a test waits for the state it
// needs with `until` (polling up to a deadline far past any stall), and a check that a hold with
// a short TTL is still there is made only while its `stopwatch` says the TTL cannot have run out.
// Only what a browser has too: the browser page runs these tests as well.

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Calls `check()` (it may answer a promise) every `everyMs` until it answers something truthy,
 * and answers that; throws, naming `what`, once `withinMs` passed without.
 */
export async function until(check, what, { withinMs = 20_000, everyMs = 5 } = {}) {
  const deadline = performance.now() + withinMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (performance.now() > deadline) throw new Error(`${what}: not within ${withinMs} ms`);
    await sleep(everyMs);
  }
}

// Room for the stores' own clocks: a JS store counts its TTL on Date.now(), in whole ms.
const CLOCK_SLACK_MS = 5;

/**
 * A stopwatch, started before a hold is asked for (so no later than the store starts its TTL).
 * `within(ttlMs)`: whether less than that TTL has passed since, so the hold is certainly still
 * there; `past(ttlMs)`: the opposite, the TTL may have run out.
 */
export function stopwatch() {
  const started = performance.now();
  const within = (ttlMs) => performance.now() - started < ttlMs - CLOCK_SLACK_MS;
  return { within, past: (ttlMs) => !within(ttlMs), elapsed: () => performance.now() - started };
}
