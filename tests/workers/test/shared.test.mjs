// Shared holds in the Durable Object: semaphore permits and read locks beside the exclusive lock,
// in one FIFO queue per key, from one isolate (the cases in workers/main.js) and from two racing.
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { start } from "../harness.mjs";

const uuid = () => crypto.randomUUID();

describe("shared holds in the Durable Object", { concurrency: false }, async () => {
  const w = await start();
  after(() => w.dispose());

  for (const name of await w.call("main", "/shared")) {
    it(name, async (t) => {
      const { report } = await w.call("main", "/shared-case", { name });
      if (report) t.diagnostic(JSON.stringify(report));
    });
  }

  /** `n` contenders, alternating between the two Workers, the `i`th as `body(i)`; answers the Counter's stats. */
  async function race(name, n, body) {
    const key = `${name}:${uuid()}`;
    const runId = `${key}:run`;
    const results = await Promise.all(
      Array.from({ length: n }, (_, i) =>
        w.call(i % 2 === 0 ? "main" : "other", "/contend-shared", { key, runId, label: i, ...body(i) }),
      ),
    );
    assert.deepEqual(results.map((r) => r.ran), Array(n).fill(true), JSON.stringify(results));
    assert.ok(results.every((r) => r.released), "every holder released its own hold");
    const fences = results.map((r) => r.fence);
    assert.equal(new Set(fences).size, n, `fences repeat: ${fences}`);
    const state = await w.call("main", "/snapshot", { key });
    assert.equal(state.waiting, 0);
    assert.deepEqual(state.shared, []);
    return w.call("main", "/stats", { runId });
  }

  it("24 permit holders from two isolates, limit 3: never more than 3 inside", async () => {
    const stats = await race("permits", 24, () => ({ kind: "permit", weight: 1, limit: 3 }));
    assert.ok(stats.maxInside <= 3, `up to ${stats.maxInside} permits inside at once`);
    assert.ok(stats.maxInside >= 2, `the permits never overlapped (max ${stats.maxInside})`);
    assert.equal(stats.inside, 0);
  });

  it("weighted permits from two isolates, limit 4: the weights inside never exceed it", async () => {
    const stats = await race("weighted", 18, (i) => ({ kind: "permit", weight: 1 + (i % 4), limit: 4 }));
    assert.ok(stats.maxInside <= 4, `weights inside reached ${stats.maxInside}`);
    assert.equal(stats.inside, 0);
  });

  it("readers and writers from two isolates: a writer is always alone", async () => {
    const stats = await race("rw", 24, (i) => ({ kind: i % 4 === 3 ? "write" : "read" }));
    assert.equal(stats.clashes, 0, "a writer overlapped another holder");
    assert.ok(stats.maxInside >= 2, `readers never shared (max ${stats.maxInside})`);
    assert.equal(stats.inside, 0);
  });
});
