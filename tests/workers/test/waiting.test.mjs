// Waiting in the Durable Object's queue: acquireOrWait hands the key to waiters in the order they
// queued, from any isolate; timeouts, aborts, crashed holders, releases racing timeouts and object
// resets leave exactly one holder and a clean queue; and an acquisition after waiting costs two
// RPCs (acquireOrWait + release), counted by the Workers' own stores.
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { start } from "../harness.mjs";

const uuid = () => crypto.randomUUID();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Polls the key's object until `waiting` calls are queued in it. */
async function untilQueued(w, key, waiting) {
  const deadline = Date.now() + 20_000;
  let seen;
  while ((seen = (await w.call("main", "/snapshot", { key })).waiting) !== waiting) {
    assert.ok(Date.now() < deadline, `${seen} calls queued, expected ${waiting}`);
    await sleep(10);
  }
}

/** Every RPC both Workers' stores made for `key`, per method. */
async function rpcs(w, key) {
  const total = {};
  for (const worker of ["main", "other"]) {
    for (const [method, n] of Object.entries(await w.call(worker, "/rpcs", { key }))) {
      total[method] = (total[method] ?? 0) + n;
    }
  }
  return total;
}

function assertIncreasing(fences) {
  assert.ok(fences.every(Number.isSafeInteger), `fences ${fences}`);
  for (let i = 1; i < fences.length; i++) {
    assert.ok(fences[i] > fences[i - 1], `turn ${i}: fence ${fences[i]} after ${fences[i - 1]}`);
  }
}

describe("waiting in the Durable Object's queue", { concurrency: false }, async () => {
  const w = await start();
  after(() => w.dispose());

  for (const name of await w.call("main", "/waiting")) {
    it(name, async (t) => {
      const { report } = await w.call("main", "/waiting-case", { name });
      if (report) t.diagnostic(JSON.stringify(report));
    });
  }

  it("waiters from two isolates acquire in the order they queued", async () => {
    const key = `fifo:${uuid()}`;
    const runId = `fifo:${uuid()}`;
    const n = 8;
    const held = await w.call("main", "/hold", { key, ttl: 60_000 });
    assert.equal(held.acquired, true);
    const pending = [];
    for (let i = 0; i < n; i++) {
      const body = { key, mode: "wait", n, runId, label: i, timeout: 20_000 };
      pending.push(w.call(i % 2 === 0 ? "main" : "other", "/contend", body));
      await untilQueued(w, key, i + 1); // the next one queues behind this one
    }
    const released = await w.call("main", "/restore", { serialized: held.serialized, release: true });
    assert.equal(released.released, true);
    const results = await Promise.all(pending);
    assert.deepEqual(results.map((r) => r.ran), Array(n).fill(true));
    const stats = await w.call("main", "/stats", { runId });
    assert.deepEqual(stats.order, [...Array(n).keys()], "the order the waiters entered in");
    assert.equal(stats.maxInside, 1);
    assert.ok(stats.fences[0] > held.fence);
    assertIncreasing(stats.fences);
    assert.equal((await w.call("main", "/snapshot", { key })).waiting, 0);
  });

  it("32 waiters from two isolates: one at a time, two RPCs per acquisition", async (t) => {
    const key = `many:${uuid()}`;
    const runId = `many:${uuid()}`;
    const n = 32;
    const results = await Promise.all(
      Array.from({ length: n }, (_, i) =>
        w.call(i % 2 === 0 ? "main" : "other", "/contend", { key, mode: "wait", n, runId, label: i }),
      ),
    );
    assert.equal(results.filter((r) => r.ran).length, n);
    const stats = await w.call("main", "/stats", { runId });
    assert.equal(stats.entered, n);
    assert.equal(stats.maxInside, 1, `up to ${stats.maxInside} inside at once`);
    assert.equal(stats.inside, 0);
    assertIncreasing(stats.fences);
    const calls = await rpcs(w, key);
    const total = Object.values(calls).reduce((a, b) => a + b, 0);
    t.diagnostic(`RPCs for ${n} acquisitions: ${JSON.stringify(calls)} = ${(total / n).toFixed(2)} per acquisition`);
    // Each waiter made one acquireOrWait call (answered at once or when the key was handed to
    // it) and one release; nobody polled.
    assert.deepEqual(calls, { acquireOrWait: n, release: n });
  });
});

describe("a runtime restart with calls waiting", { concurrency: false }, () => {
  const dir = mkdtempSync(join(tmpdir(), "keel-persist-wait-"));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("the waiting calls fail, the holder keeps the key, and the next waiter gets it at its deadline", async () => {
    const key = `restart-wait:${uuid()}`;
    const ttl = 12_000; // the restart, queueing included, must fit inside it
    let w = await start({ persist: dir });
    let held;
    let deadline;
    const outcomes = [];
    try {
      held = await w.call("main", "/hold", { key, ttl });
      assert.equal(held.acquired, true);
      const runId = `restart-wait:${uuid()}`;
      for (let i = 0; i < 3; i++) {
        const call = w.call(i % 2 === 0 ? "main" : "other", "/contend", { key, mode: "wait", n: 3, runId, label: i });
        outcomes.push(call.then((ok) => ({ ok }), (error) => ({ error })));
      }
      await untilQueued(w, key, 3);
      deadline = (await w.call("main", "/snapshot", { key })).rows[0].expiresAt;
    } finally {
      await w.dispose();
    }
    const settled = await Promise.all(outcomes);
    for (const [i, o] of settled.entries()) {
      assert.ok(o.error !== undefined, `waiter ${i} did not fail with the runtime: ${JSON.stringify(o.ok)}`);
    }

    w = await start({ persist: dir });
    try {
      const snapshot = await w.call("main", "/snapshot", { key });
      assert.equal(snapshot.waiting, 0, "the queue came back after the restart");
      assert.equal(snapshot.rows[0]?.expiresAt, deadline, "the holder's deadline changed across the restart");
      assert.ok(snapshot.now < deadline, "restart took longer than the TTL; cannot judge");
      const next = await w.call("main", "/hold", { key, ttl: 20_000, timeout: 60_000 });
      assert.equal(next.acquired, true);
      assert.ok(next.fence > held.fence, `fence ${next.fence} after ${held.fence}`);
      const granted = (await w.call("main", "/snapshot", { key })).rows[0].expiresAt - 20_000;
      assert.ok(granted >= deadline, `granted at ${granted}, before the holder's deadline ${deadline}`);
      const calls = await rpcs(w, key);
      assert.equal(calls.acquireOrWait, 1, `the new waiter waited in one call: ${JSON.stringify(calls)}`);
    } finally {
      await w.dispose();
    }
  });
});
