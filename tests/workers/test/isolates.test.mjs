// Two Worker scripts (two isolates) bound to one LOCKS namespace race for one key.
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { start } from "../harness.mjs";

const N = 50;
const w = await start();

async function race(mode, key) {
  const runId = `${mode}:${crypto.randomUUID()}`;
  const results = await Promise.all(
    Array.from({ length: N }, (_, i) =>
      w.call(i % 2 === 0 ? "main" : "other", "/contend", { key, mode, n: N, runId }),
    ),
  );
  const stats = await w.call("main", "/stats", { runId });
  return { ran: results.filter((r) => r.ran).length, stats };
}

describe("across isolates", { concurrency: false }, () => {
  after(() => w.dispose());
  it(`${N} concurrent run() from two Workers: exactly one runs`, async () => {
    const { ran, stats } = await race("immediate", `invoice:${crypto.randomUUID()}`);
    assert.equal(ran, 1);
    assert.equal(stats.entered, 1);
    assert.equal(stats.refused, N - 1);
    assert.equal(stats.maxInside, 1);
  });
  it(`${N} concurrent run() with timeouts: all run, one at a time`, async () => {
    const { ran, stats } = await race("wait", `invoice:${crypto.randomUUID()}`);
    assert.equal(ran, N);
    // Holders from both isolates, in the order they entered (recorded by the Counter object),
    // got strictly increasing fences.
    const { fences } = stats;
    assert.equal(fences.length, N);
    assert.ok(fences.every(Number.isSafeInteger), `fences ${fences}`);
    for (let i = 1; i < N; i++) assert.ok(fences[i] > fences[i - 1], `turn ${i}: fence ${fences[i]} after ${fences[i - 1]}`);
    assert.equal(stats.entered, N);
    assert.equal(stats.maxInside, 1, `up to ${stats.maxInside} inside at once`);
    assert.equal(stats.inside, 0);
  });
});
