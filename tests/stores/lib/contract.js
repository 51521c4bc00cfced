// The LockStore contract as plain checks (phase 1: our own assertions; the Rust conformance kit
// joins them through keel-lock/testing later). Each check takes a context:
//   { stores: [LockStore, …]  — one per connection to the same backend (≥ 1),
//     key(): a fresh key, owner(): a fresh owner token }
// and throws an AssertionError when the store breaks the contract. `registerContract` turns them
// into node:test tests; `runChecks` runs them and collects failures (to prove they can fail).
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { test } from "node:test";
import { sleep } from "./servers.js";

export const SHORT_TTL = 150; // ms: locks meant to expire during a check
export const SETTLE = 200; // ms past SHORT_TTL before the key must be free
// For a lock that must still be live a few round trips after acquiring it, even on a slow or
// loaded backend, and then outlived: long enough for the steps, short enough to wait out.
const MEDIUM_TTL = 1_000;
const LONG_TTL = 60_000;
const CONTENDERS = 50;

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

async function race(ctx, key, owners, ttl) {
  // Spread the contenders over every connection, fire them all at once.
  const results = await Promise.all(
    owners.map((owner, i) => ctx.stores[i % ctx.stores.length].acquire(key, owner, ttl)),
  );
  return owners.filter((_, i) => acquired(results[i]));
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
    name: "acquire is set-if-absent: a held key cannot be acquired, not even by its holder",
    async run(ctx) {
      const { store } = ctx;
      const [key, a, b] = [ctx.key(), ctx.owner(), ctx.owner()];
      assert.equal(acquired(await store.acquire(key, a, LONG_TTL)), true, "acquire of a free key");
      assert.equal(await store.acquire(key, b, LONG_TTL), false, "a second owner acquired a held key");
      assert.equal(await store.acquire(key, a, LONG_TTL), false, "the holder re-acquired its held key");
      assert.equal(await store.isLocked(key), true);
      assert.equal(await store.release(key, a), true);
    },
  },
  {
    name: `exactly one of ${CONTENDERS} concurrent acquirers of a free key wins`,
    async run(ctx) {
      const key = ctx.key();
      const owners = Array.from({ length: CONTENDERS }, () => ctx.owner());
      const winners = await race(ctx, key, owners, LONG_TTL);
      assert.equal(winners.length, 1, `${winners.length} of ${CONTENDERS} concurrent acquires won`);
      // The winner is the one the store remembers: every loser's release fails, the winner's works.
      for (const owner of owners.filter((o) => o !== winners[0])) {
        assert.equal(await ctx.store.release(key, owner), false, "a loser could release the winner's lock");
      }
      assert.equal(await ctx.store.release(key, winners[0]), true, "the winner could not release");
    },
  },
  {
    name: `exactly one of ${CONTENDERS} concurrent acquirers of an expired key wins`,
    async run(ctx) {
      const key = ctx.key();
      assert.equal(acquired(await ctx.store.acquire(key, ctx.owner(), SHORT_TTL)), true);
      await sleep(SHORT_TTL + SETTLE);
      const owners = Array.from({ length: CONTENDERS }, () => ctx.owner());
      const winners = await race(ctx, key, owners, LONG_TTL);
      assert.equal(winners.length, 1, `${winners.length} of ${CONTENDERS} took over the expired key`);
      assert.equal(await ctx.store.release(key, winners[0]), true);
    },
  },
  {
    name: "release is owner-conditional: a stranger's release fails and changes nothing",
    async run(ctx) {
      const { store } = ctx;
      const [key, a, b] = [ctx.key(), ctx.owner(), ctx.owner()];
      assert.equal(await store.release(key, a), false, "release of a free key answered true");
      assert.equal(acquired(await store.acquire(key, a, LONG_TTL)), true);
      assert.equal(await store.release(key, b), false, "a stranger's release answered true");
      assert.equal(await store.isLocked(key), true, "a stranger's release freed the key");
      assert.equal(await store.acquire(key, b, LONG_TTL), false, "the key is free after a stranger's release");
      assert.equal(await store.release(key, a), true, "the owner's release answered false");
      assert.equal(await store.release(key, a), false, "a second release answered true");
      assert.equal(await store.isLocked(key), false, "isLocked after release");
      assert.equal(await store.remainingTime(key), null, "remainingTime after release");
      assert.equal(acquired(await store.acquire(key, b, LONG_TTL)), true, "a released key could not be acquired");
      assert.equal(await store.release(key, b), true);
    },
  },
  {
    name: "extend is owner-conditional and pushes the expiry out",
    async run(ctx) {
      const { store } = ctx;
      const [key, a, b] = [ctx.key(), ctx.owner(), ctx.owner()];
      assert.equal(await store.extend(key, a, LONG_TTL), false, "extend of a free key answered true");
      assert.equal(await store.isLocked(key), false, "extend of a free key created it");
      assert.equal(acquired(await store.acquire(key, a, MEDIUM_TTL)), true);
      assert.equal(await store.extend(key, b, LONG_TTL), false, "a stranger's extend answered true");
      assert.equal(await store.extend(key, a, LONG_TTL), true, "the owner's extend answered false");
      await sleep(MEDIUM_TTL + SETTLE);
      assert.equal(await store.isLocked(key), true, "the key expired at its old deadline despite extend");
      const left = await store.remainingTime(key);
      assert.ok(left !== null && left > LONG_TTL - 10_000 && left <= LONG_TTL, `remainingTime ${left} after extend`);
      assert.equal(await store.acquire(key, b, LONG_TTL), false, "an extended lock was taken");
      assert.equal(await store.release(key, a), true);
    },
  },
  {
    name: "an expired key is free: unheld, no remaining time, acquirable by anyone",
    async run(ctx) {
      const { store } = ctx;
      const [key, a, b] = [ctx.key(), ctx.owner(), ctx.owner()];
      assert.equal(acquired(await store.acquire(key, a, SHORT_TTL)), true);
      await sleep(SHORT_TTL + SETTLE);
      assert.equal(await store.isLocked(key), false, "isLocked after the TTL passed");
      assert.equal(await store.remainingTime(key), null, "remainingTime after the TTL passed");
      assert.equal(acquired(await store.acquire(key, b, LONG_TTL)), true, "an expired key could not be acquired");
      assert.equal(await store.release(key, b), true);
    },
  },
  {
    name: "extend of an expired lock fails and does not revive it",
    async run(ctx) {
      const { store } = ctx;
      const [key, a] = [ctx.key(), ctx.owner()];
      assert.equal(acquired(await store.acquire(key, a, SHORT_TTL)), true);
      await sleep(SHORT_TTL + SETTLE);
      assert.equal(await store.extend(key, a, LONG_TTL), false, "extend of an expired lock answered true");
      assert.equal(await store.isLocked(key), false, "extend revived an expired lock");
      assert.equal(await store.remainingTime(key), null);
    },
  },
  {
    name: "an expired holder's late release and extend leave the new holder's lock in place",
    async run(ctx) {
      const { store } = ctx;
      const [key, a, b] = [ctx.key(), ctx.owner(), ctx.owner()];
      assert.equal(acquired(await store.acquire(key, a, SHORT_TTL)), true);
      await sleep(SHORT_TTL + SETTLE);
      assert.equal(acquired(await store.acquire(key, b, LONG_TTL)), true, "the expired key could not be taken over");
      assert.equal(await store.release(key, a), false, "the expired holder's release answered true");
      assert.equal(await store.extend(key, a, LONG_TTL), false, "the expired holder's extend answered true");
      assert.equal(await store.isLocked(key), true, "the late release freed the new holder's lock");
      assert.equal(await store.acquire(key, a, LONG_TTL), false, "the old holder got back in");
      assert.equal(await store.release(key, b), true, "the new holder could not release");
    },
  },
  {
    name: "remainingTime is null when unheld and within the TTL when held; isLocked agrees",
    async run(ctx) {
      const { store } = ctx;
      const [key, a] = [ctx.key(), ctx.owner()];
      assert.equal(await store.isLocked(key), false);
      assert.equal(await store.remainingTime(key), null);
      const ttl = 10_000;
      assert.equal(acquired(await store.acquire(key, a, ttl)), true);
      assert.equal(await store.isLocked(key), true);
      const left = await store.remainingTime(key);
      assert.equal(typeof left, "number");
      assert.ok(left > ttl - 2_000 && left <= ttl, `remainingTime ${left} for a ${ttl} ms lock`);
      assert.equal(await store.release(key, a), true);
      assert.equal(await store.remainingTime(key), null);
      assert.equal(await store.isLocked(key), false);
    },
  },
  {
    name: "keys are independent",
    async run(ctx) {
      const { store } = ctx;
      const [k1, k2, a, b] = [ctx.key(), ctx.key(), ctx.owner(), ctx.owner()];
      assert.equal(acquired(await store.acquire(k1, a, LONG_TTL)), true);
      assert.equal(await store.isLocked(k2), false);
      assert.equal(acquired(await store.acquire(k2, b, LONG_TTL)), true);
      assert.equal(await store.release(k1, b), false);
      assert.equal(await store.release(k2, a), false);
      assert.equal(await store.release(k1, a), true);
      assert.equal(await store.isLocked(k2), true);
      assert.equal(await store.release(k2, b), true);
    },
  },
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
