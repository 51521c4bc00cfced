// Several keys at once, `lock([k1, k2, …])`, on the Durable Object store (one object per key):
// overlapping sets in opposite orders from two isolates all finish with one holder per key at a
// time, and an uncontended run costs one acquire and one release RPC per key; and over D1 from
// inside a Worker, where the set is one acquireMany.
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { start } from "../harness.mjs";

const uuid = () => crypto.randomUUID();

describe("lock([...keys]) on the Durable Object store", { concurrency: false }, async () => {
  const w = await start();
  after(() => w.dispose());

  it("overlapping sets in opposite orders from two isolates all finish, one holder per key at a time", async () => {
    const [a, b, c] = ["a", "b", "c"].map((k) => `multi:${k}:${uuid()}`);
    const sets = [[a, b], [b, a], [b, c], [c, a], [c, b, a]];
    const runId = `multi:${uuid()}`;
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) => w.call(i % 2 === 0 ? "main" : "other", "/contend-multi", { keys: sets[i % sets.length], runId })),
    );
    assert.deepEqual(results.map((r) => r.ran), Array(20).fill(true), JSON.stringify(results));
    for (const key of [a, b, c]) {
      const stats = await w.call("main", "/stats", { runId: `${runId}:${key}` });
      assert.equal(stats.clashes, 0, `${key}: two holders at once`);
      assert.ok(stats.entered >= 8, `${key} entered ${stats.entered} times`);
      const fences = results.flatMap((r) => (r.fences && key in r.fences ? [r.fences[key]] : []));
      assert.equal(new Set(fences).size, fences.length, `${key}: a fence repeats`);
    }
  });

  it("over D1 inside the Worker: one acquireMany and a release per key uncontended; overlapping sets all finish", async () => {
    const keys = ["a", "b", "c"].map((k) => `d1multi:${k}:${uuid()}`).sort();
    const out = await w.call("main", "/d1-multi", { keys });
    assert.equal(out.ran, true);
    assert.deepEqual(out.uncontended, { acquireMany: 1, release: 3 }, JSON.stringify(out.uncontended));
    assert.deepEqual(Object.keys(out.fences).sort(), keys);
    assert.ok(Object.values(out.fences).every((f) => Number.isInteger(f) && f >= 1), JSON.stringify(out.fences));
    assert.equal(out.allRan, true, "a run over D1 gave up");
    assert.equal(out.clashes, 0, "two holders of a key at once");
    assert.deepEqual(out.left, [], "keys left held");
  });

  it("an uncontended run: one acquire and one release RPC per key", async () => {
    const keys = [`multi:x:${uuid()}`, `multi:y:${uuid()}`];
    const { ran } = await w.call("main", "/contend-multi", { keys, runId: `multi:${uuid()}`, holdMs: 0, timeout: 0 });
    assert.equal(ran, true);
    for (const key of keys) {
      const counts = await w.call("main", "/rpcs", { key });
      const calls = Object.values(counts).reduce((x, y) => x + y, 0);
      assert.equal(calls, 2, `${key}: ${JSON.stringify(counts)}`);
      assert.equal(counts.release, 1, `${key}: ${JSON.stringify(counts)}`);
    }
  });
});
