// Fencing tokens as checks, for any store whose acquire answers `{ fence }` or `false`: every
// successful acquisition of a key carries a safe integer fence strictly greater than every fence
// handed out before it for that key — across holders, connections, release and expiry.
// Each check takes a context:
//   { stores: [LockStore, …]  — one per connection to the same backend (≥ 1),
//     key(): a fresh key, owner(): a fresh owner token }
// and throws an AssertionError when the store breaks the property. `registerFenceChecks` turns
// them into node:test tests; `runFenceChecks` collects failures (to prove the checks can fail).
//
// The stale-writer story (`staleWriterStory`) plays the reason fences exist against a protected
// resource that accepts a write only with a fence at least as high as the last one it saw.
import assert from "node:assert/strict";
import { test } from "node:test";
import { sleep } from "./servers.js";

const MAX_FENCE = Number.MAX_SAFE_INTEGER;
export const SHORT_TTL = 150; // ms: locks meant to expire during a check
export const SETTLE = 200; // ms past SHORT_TTL before the key must be free
const LONG_TTL = 60_000;
export const CONTENDERS = 50;
const ROUNDS = 5;

/** The fence of a successful acquire, after checking the answer's shape; throws on anything else. */
export function fenceOf(answer, what = "acquire") {
  assert.ok(answer !== null && typeof answer === "object", `${what} answered ${JSON.stringify(answer)}, not { fence }`);
  const { fence } = answer;
  assert.ok(
    Number.isSafeInteger(fence) && fence >= 1 && fence <= MAX_FENCE,
    `${what} answered fence ${JSON.stringify(fence)}, not an integer in 1..2^53-1`,
  );
  return fence;
}

function assertIncreasing(fences, what) {
  for (let i = 1; i < fences.length; i++) {
    assert.ok(
      fences[i] > fences[i - 1],
      `${what}: fence ${fences[i]} (acquisition ${i + 1}) is not greater than ${fences[i - 1]}; all: ${fences.join(", ")}`,
    );
  }
}

export const FENCE_CHECKS = [
  {
    name: "a won acquire answers { fence } with an integer in 1..2^53-1; a lost one answers false",
    async run(ctx) {
      const store = ctx.stores[0];
      const [key, a, b] = [ctx.key(), ctx.owner(), ctx.owner()];
      fenceOf(await store.acquire(key, a, LONG_TTL));
      assert.equal(await store.acquire(key, b, LONG_TTL), false, "acquire of a held key");
      assert.equal(await store.release(key, a), true);
    },
  },
  {
    name: "fences strictly increase across release, whichever connection acquires",
    async run(ctx) {
      const key = ctx.key();
      const fences = [];
      for (let i = 0; i < 6; i++) {
        const store = ctx.stores[i % ctx.stores.length];
        const owner = ctx.owner();
        fences.push(fenceOf(await store.acquire(key, owner, LONG_TTL), `acquire ${i + 1}`));
        assert.equal(await store.release(key, owner), true);
      }
      assertIncreasing(fences, "acquire, release, acquire again");
    },
  },
  {
    name: "fences strictly increase across expiry",
    async run(ctx) {
      const key = ctx.key();
      const fences = [];
      for (let i = 0; i < 3; i++) {
        const store = ctx.stores[i % ctx.stores.length];
        fences.push(fenceOf(await store.acquire(key, ctx.owner(), SHORT_TTL), `acquire ${i + 1}`));
        await sleep(SHORT_TTL + SETTLE);
        assert.equal(await store.isLocked(key), false, "the lock did not expire");
      }
      const owner = ctx.owner();
      fences.push(fenceOf(await ctx.stores[0].acquire(key, owner, LONG_TTL), "acquire after the expiries"));
      assert.equal(await ctx.stores[0].release(key, owner), true);
      assertIncreasing(fences, "acquire, expire, acquire again");
    },
  },
  {
    name: `${CONTENDERS} concurrent acquirers of one key, ${ROUNDS} rounds: one winner a round, each round's fence higher`,
    async run(ctx) {
      const key = ctx.key();
      const fences = [];
      for (let round = 0; round < ROUNDS; round++) {
        const owners = Array.from({ length: CONTENDERS }, () => ctx.owner());
        const answers = await Promise.all(
          owners.map((owner, i) => ctx.stores[i % ctx.stores.length].acquire(key, owner, LONG_TTL)),
        );
        const won = answers.map((answer, i) => [answer, owners[i]]).filter(([answer]) => answer !== false);
        assert.equal(won.length, 1, `round ${round + 1}: ${won.length} of ${CONTENDERS} won`);
        fences.push(fenceOf(won[0][0], `round ${round + 1}'s winner`));
        assert.equal(await ctx.stores[0].release(key, won[0][1]), true);
      }
      assertIncreasing(fences, "successive rounds");
    },
  },
  {
    name: `${CONTENDERS} concurrent acquirers retrying until each has held the key: every holder's fence is above the previous holder's`,
    async run(ctx) {
      const key = ctx.key();
      const held = []; // fences in the order the holders got them (holds never overlap)
      let holding = 0;
      let overlaps = 0;
      await Promise.all(
        Array.from({ length: CONTENDERS }, async (_, i) => {
          const store = ctx.stores[i % ctx.stores.length];
          const owner = ctx.owner();
          for (let attempt = 0; ; attempt++) {
            assert.ok(attempt < 5_000, `contender ${i} never got the lock`);
            const answer = await store.acquire(key, owner, LONG_TTL);
            if (answer === false) {
              await sleep(2);
              continue;
            }
            if (++holding > 1) overlaps++;
            held.push(fenceOf(answer, `contender ${i}`));
            await sleep(1); // hold it across a timer, so the others really try meanwhile
            holding--;
            assert.equal(await store.release(key, owner), true, `contender ${i}'s release`);
            return;
          }
        }),
      );
      assert.equal(overlaps, 0, "two contenders held the key at once");
      assert.equal(held.length, CONTENDERS);
      assertIncreasing(held, "successive holders");
    },
  },
];

/** Registers every fence check as a node:test test; `context()` is called when each runs. */
export function registerFenceChecks(context) {
  for (const check of FENCE_CHECKS) {
    test(check.name, { timeout: 120_000 }, () => check.run(context()));
  }
}

/** Runs every fence check and answers those that failed (name and message). */
export async function runFenceChecks(ctx) {
  const failures = [];
  for (const check of FENCE_CHECKS) {
    try {
      await check.run(ctx);
    } catch (error) {
      failures.push({ name: check.name, message: error.message });
    }
  }
  return failures;
}

/**
 * The stale-writer story against a fenced resource:
 *   A acquires (fence n) and stalls past its TTL; B acquires (fence > n) and writes; A wakes and
 *   writes — the resource must reject A's write and keep B's value.
 * `resource` is { write(fence, value) → true | false (rejected), read() → value | null }.
 * Throws an AssertionError if any step goes otherwise.
 */
export async function staleWriterStory({ storeA, storeB, key, ownerA, ownerB, resource, ttlMs = 300, settleMs = 200 }) {
  const fenceA = fenceOf(await storeA.acquire(key, ownerA, ttlMs), "A's acquire");
  assert.equal(await resource.write(fenceA, "A: first write, while holding the lock"), true, "A's write while it held the lock");

  await sleep(ttlMs + settleMs); // A stalls (a GC pause, a partition) past its TTL

  const fenceB = fenceOf(await storeB.acquire(key, ownerB, LONG_TTL), "B's acquire after A's lock expired");
  assert.ok(fenceB > fenceA, `B's fence ${fenceB} is not above A's ${fenceA}`);
  assert.equal(await resource.write(fenceB, "B"), true, "B's write was rejected");
  assert.equal(await resource.write(fenceB, "B, again"), true, "B's second write under the same lock was rejected");

  // A wakes up and, unaware that it lost the lock, writes.
  assert.equal(await resource.write(fenceA, "A, stale"), false, "the resource accepted the stale holder's write");
  assert.equal(await resource.read(), "B, again", "the resource does not hold B's value");
  assert.equal(await storeA.release(key, ownerA), false, "A's late release answered true");
  assert.equal(await storeB.release(key, ownerB), true, "B's release");
  return { fenceA, fenceB };
}
