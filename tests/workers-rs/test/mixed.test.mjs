// A JS Worker (the npm package's workerd build) and the Rust Worker (workers-rs, worker-build)
// share one lock namespace and exclude each other — whichever of them serves the Durable Object
// class — and the rows one build writes are read by the other after a restart.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { race, start } from "../harness.mjs";

const N = 40;
const mixed = ["rust", "js"];

function assertIncreasing(fences, what) {
  for (let i = 1; i < fences.length; i++) {
    assert.ok(fences[i] > fences[i - 1], `${what}: fences out of order: ${fences}`);
  }
}

for (const lockHost of ["rust", "js"]) {
  describe(`JS and Rust Workers, LockDurableObject served by the ${lockHost} script`, { concurrency: false, timeout: 180_000 }, () => {
    let w;
    before(async () => {
      w = await start({ lockHost });
    });
    after(() => w?.dispose());

    it(`${N} concurrent charges, half from each, without waiting: exactly one charges`, async () => {
      const { charged, results, ledger } = await race(w, mixed, { mode: "immediate", n: N });
      assert.equal(results.filter((r) => r.worker === "js").length, N / 2, "half the requests ran in the JS Worker");
      assert.equal(charged.length, 1, `${charged.length} requests charged`);
      assert.equal(ledger.charges, 1);
      assert.equal(ledger.refused, N - 1);
      assert.equal(ledger.maxInside, 1);
    });

    it(`${N} concurrent charges with a timeout: all charge, one at a time, fences increasing across both`, async () => {
      const { charged, ledger } = await race(w, mixed, { mode: "wait", n: N });
      assert.equal(charged.length, N);
      assert.equal(ledger.charges, N);
      assert.equal(ledger.maxInside, 1, `up to ${ledger.maxInside} inside at once`);
      assert.equal(ledger.inside, 0);
      // Fences in the order the ledger booked the charges: strictly increasing, and both
      // Workers' holds are among them.
      assert.equal(ledger.fences.length, N);
      assertIncreasing(ledger.fences, "ledger");
      assert.equal(ledger.stale, 0);
      const byWorker = (name) => charged.filter((r) => r.worker === name).map((r) => r.fence);
      assert.equal(byWorker("js").length, N / 2);
      assert.equal(byWorker("rust").length, N / 2);
      assert.deepEqual(
        [...byWorker("js"), ...byWorker("rust")].sort((a, b) => a - b),
        [...ledger.fences].sort((a, b) => a - b),
        "each Worker's fences are the ones the ledger booked",
      );
    });

    it("a Rust waiter queues in the object and is handed the key when the JS holder's TTL runs out", async () => {
      const key = `invoice:${crypto.randomUUID()}`;
      const run = `handover:${crypto.randomUUID()}`;
      // Held for 5 s: the waiter, sent right after, queues long before the hold runs out.
      assert.deepEqual(await w.call("js", "/hold", { key, ttl: 5_000 }), { acquired: true });
      const waiter = w.call("rust", "/charge", { run, key, mode: "wait" });
      // The Rust Worker's store waits inside the object (acquireOrWait through the example's
      // LockDurableObject), not by polling: the object reports one queued call.
      let state;
      const until = Date.now() + 20_000;
      do state = await w.call("js", "/state", { key });
      while (state.waiting === 0 && Date.now() < until);
      assert.equal(state.waiting, 1, `object state: ${JSON.stringify(state)}`);
      const out = await waiter;
      assert.equal(out.charged, true);
      // Handed the key at the hold's end, not at once (the waiter's request may start late).
      assert.ok(out.waitedMs >= 2_500, `waited ${out.waitedMs} ms for a 5000 ms hold`);
      const after = await w.call("js", "/state", { key });
      assert.equal(after.waiting, 0);
      assert.equal(after.isLocked, false);
    });

    it("hold metadata across Rust and JS: each sees the other's, and a waiter's becomes its grant's", async () => {
      const key = `invoice:${crypto.randomUUID()}`;
      const run = `metadata:${crypto.randomUUID()}`;
      const look = (worker) =>
        worker === "rust" ? w.call("rust", `/inspect?key=${encodeURIComponent(key)}`) : w.call("js", "/inspect", { key });
      /** Polls `worker`'s inspect of the key until `ready(answer)`; answers it. */
      const until = async (worker, ready, what) => {
        const deadline = Date.now() + 20_000;
        for (;;) {
          const answer = await look(worker);
          if (ready(answer)) return answer;
          assert.ok(Date.now() < deadline, `${what}: ${worker} inspect answered ${JSON.stringify(answer)}`);
          await new Promise((r) => setTimeout(r, 10));
        }
      };
      assert.deepEqual(await look("rust"), { holders: [], waiting: 0 }, "a free key, from Rust");
      // A Rust hold with metadata, seen by both Workers' inspect.
      // Each holds 5 s: long enough for the inspects and the queueing below to see it.
      const holder = w.call("rust", "/charge", { run, key, mode: "wait", payMs: 5_000, metadata: "rust: charging" });
      const fromJs = await until("js", (a) => a.holders.length === 1, "the Rust holder");
      assert.equal(fromJs.holders[0].metadata, "rust: charging");
      const fromRust = await look("rust");
      assert.deepEqual(fromRust.holders.map((h) => [h.metadata, h.fence]), [["rust: charging", fromJs.holders[0].fence]]);
      assert.ok(fromRust.holders[0].remainingMs > 0 && fromRust.holders[0].remainingMs <= 30_000, JSON.stringify(fromRust));
      // A JS waiter with metadata queues behind it; the hand-over makes its metadata the hold's.
      const waiter = w.call("js", "/charge", { run, key, mode: "wait", payMs: 5_000, metadata: "js: waiting" });
      await until("rust", (a) => a.waiting === 1, "the JS waiter queued");
      const handed = await until("rust", (a) => a.holders[0]?.metadata === "js: waiting", "the hand-over");
      assert.equal(handed.waiting, 0);
      const [first, second] = await Promise.all([holder, waiter]);
      assert.equal(first.fence, fromJs.holders[0].fence, "the Rust holder's fence, as inspect showed it");
      assert.deepEqual(handed.holders.map((h) => [h.metadata, h.fence]), [["js: waiting", second.fence]]);
      assert.ok(second.fence > first.fence, `fences ${first.fence}, ${second.fence}`);
      assert.deepEqual(await look("js"), { holders: [], waiting: 0 }, "the key after both");
    });

    it("holds alternate between JS and Rust: each fence above the other's last", async () => {
      const key = `invoice:${crypto.randomUUID()}`;
      const run = `alternate:${crypto.randomUUID()}`;
      const fences = [];
      for (let i = 0; i < 8; i++) {
        const worker = mixed[i % 2];
        const out = await w.call(worker, "/charge", { run, key });
        assert.equal(out.charged, true, `${worker} charge ${i}`);
        assert.equal(out.worker, worker);
        fences.push(out.fence);
      }
      assertIncreasing(fences, "alternating holders");
    });
  });
}

describe("row format: rows written by one build are read by the other", { concurrency: false, timeout: 180_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), "keel-workers-rs-persist-"));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("a lock taken while the Rust build served the object is held when the JS build serves it", async () => {
    const key = `invoice:${crypto.randomUUID()}`;
    const first = await start({ lockHost: "rust", persist: dir });
    try {
      assert.deepEqual(await first.call("js", "/hold", { key, ttl: 120_000 }), { acquired: true });
      const before = await first.call("js", "/state", { key });
      assert.equal(before.isLocked, true);
      assert.equal(before.rows.length, 1);
    } finally {
      await first.dispose();
    }
    const second = await start({ lockHost: "js", persist: dir });
    try {
      const after = await second.call("js", "/state", { key });
      assert.equal(after.isLocked, true, "the row survived the switch of builds");
      assert.ok(after.remaining > 60_000 && after.remaining <= 120_000, `remaining ${after.remaining}`);
      const refused = await second.call("rust", "/charge", { run: `persist:${crypto.randomUUID()}`, key });
      assert.equal(refused.charged, false, "the Rust Worker must not charge while the JS hold lasts");
    } finally {
      await second.dispose();
    }
  });
});
