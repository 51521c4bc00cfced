// Store-specific checks, next to the general LockStore properties, which live in one place: the
// Rust conformance kit (src/conformance/), run against every store through keel-lock/testing
// by conformance.test.js. What stays here is what the kit cannot see from inside the seam: that
// a store never consults the caller's clock, and that the store's own methods refuse bad
// arguments before reaching the backend. Each check takes a context:
//   { stores: [LockStore, …]  — one per connection to the same backend (≥ 1),
//     key(): a fresh key, owner(): a fresh owner token }
// and throws an AssertionError when the store breaks it. `registerContract` turns them into
// node:test tests; `runChecks` runs them and collects failures (to prove they can fail).
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { test } from "node:test";
import { sleep } from "./servers.js";

export const SHORT_TTL = 150; // ms: locks meant to expire during a check
export const SETTLE = 200; // ms past SHORT_TTL before the key must be free
const LONG_TTL = 60_000;

/** Did an acquire succeed? Stores answer `true`, or `{ fence }` when they hand out fences. */
export function acquired(answer) {
  return answer === true || (typeof answer === "object" && answer !== null && Number.isInteger(answer.fence));
}

export function newContext(stores, prefix = "contract") {
  const tag = randomBytes(4).toString("hex");
  let n = 0;
  return {
    stores,
    store: stores[0],
    key: () => `keel-test:${prefix}:${tag}:${++n}`,
    owner: () => randomBytes(16).toString("hex"),
  };
}


// A Date whose "now" is `skewMs` off the real clock, for proving a store never consults it.
function skewedDate(RealDate, skewMs) {
  return class SkewedDate extends RealDate {
    constructor(...args) {
      if (args.length === 0) super(RealDate.now() + skewMs);
      else super(...args);
    }
    static now() {
      return RealDate.now() + skewMs;
    }
  };
}

export const CHECKS = [
  {
    name: "the caller's clock is never consulted (Date skewed ±1 h)",
    async run(ctx) {
      const { store } = ctx;
      const RealDate = globalThis.Date;
      for (const skew of [3_600_000, -3_600_000]) {
        const [key, short, a, b] = [ctx.key(), ctx.key(), ctx.owner(), ctx.owner()];
        globalThis.Date = skewedDate(RealDate, skew);
        try {
          assert.equal(acquired(await store.acquire(key, a, LONG_TTL)), true);
          assert.equal(await store.isLocked(key), true, `a 60 s lock reads as free with the caller ${skew} ms off`);
          const left = await store.remainingTime(key);
          assert.ok(left !== null && left > LONG_TTL - 10_000 && left <= LONG_TTL, `remainingTime ${left} (skew ${skew})`);
          assert.equal(await store.acquire(key, b, LONG_TTL), false, `a held key was taken (skew ${skew})`);
          assert.equal(await store.extend(key, a, LONG_TTL), true, `extend failed (skew ${skew})`);
          assert.equal(await store.release(key, a), true);
          assert.equal(acquired(await store.acquire(short, a, SHORT_TTL)), true);
          await sleep(SHORT_TTL + SETTLE);
          assert.equal(await store.isLocked(short), false, `an expired key reads as held (skew ${skew})`);
          assert.equal(acquired(await store.acquire(short, b, LONG_TTL)), true, `an expired key could not be taken (skew ${skew})`);
          assert.equal(await store.release(short, b), true);
        } finally {
          globalThis.Date = RealDate;
        }
      }
    },
  },
  {
    name: "invalid arguments are refused before reaching the backend",
    async run(ctx) {
      const { store } = ctx;
      const [key, a] = [ctx.key(), ctx.owner()];
      for (const ttl of [0, -1, 1.5, Number.NaN, Infinity, "100", 2 ** 31]) {
        await assert.rejects(async () => store.acquire(key, a, ttl), RangeError, `ttl ${String(ttl)} accepted`);
      }
      await assert.rejects(async () => store.acquire("", a, 1000), TypeError);
      await assert.rejects(async () => store.acquire(key, "", 1000), TypeError);
      await assert.rejects(async () => store.release(key, undefined), TypeError);
      await assert.rejects(async () => store.isLocked(42), TypeError);
      assert.equal(await store.isLocked(key), false, "a refused call left a lock behind");
    },
  },
];

/** Registers every check as a node:test test; `context()` is called when each test runs. */
export function registerContract(context, { skip = [] } = {}) {
  for (const check of CHECKS) {
    test(check.name, { skip: skip.includes(check.name) && "not applicable", timeout: 60_000 }, () =>
      check.run(context()),
    );
  }
}

/** Runs every check and answers the names of those that failed (with their messages). */
export async function runChecks(ctx) {
  const failures = [];
  for (const check of CHECKS) {
    try {
      await check.run(ctx);
    } catch (error) {
      failures.push({ name: check.name, message: error.message });
    }
  }
  return failures;
}
