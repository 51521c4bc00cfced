// The Rust Worker (examples/workers-rs, built with worker-build) against itself: two scripts,
// two isolates, one lock namespace served by the example's own LockDurableObject.
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { race, start } from "../harness.mjs";

const N = 40;
const w = await start({ lockHost: "rust" });
const rustOnly = ["rust", "rust-b"];

describe("Rust Worker, two isolates", { concurrency: false, timeout: 180_000 }, () => {
  after(() => w.dispose());

  it(`${N} concurrent charges without waiting: exactly one charges`, async () => {
    const { charged, results, ledger } = await race(w, rustOnly, { mode: "immediate", n: N });
    assert.equal(charged.length, 1, `${charged.length} requests charged`);
    assert.ok(results.every((r) => r.worker === "rust"));
    assert.equal(ledger.charges, 1);
    assert.equal(ledger.refused, N - 1);
    assert.equal(ledger.maxInside, 1);
  });

  it(`${N} concurrent charges with a timeout: all charge, one at a time`, async () => {
    const { charged, ledger } = await race(w, rustOnly, { mode: "wait", n: N });
    assert.equal(charged.length, N);
    assert.equal(ledger.charges, N);
    assert.equal(ledger.maxInside, 1, `up to ${ledger.maxInside} inside at once`);
    assert.equal(ledger.inside, 0);
  });

  it("every charge carries a fence, and the fences increase in the order the holds were taken", async () => {
    const { charged, ledger, key } = await race(w, rustOnly, { mode: "wait", n: 12 });
    const fences = charged.map((r) => r.fence);
    assert.ok(fences.every((f) => Number.isSafeInteger(f) && f > 0), `fences ${fences}`);
    assert.equal(new Set(fences).size, fences.length, `repeated fences: ${fences}`);
    assert.equal(ledger.fences.length, 12);
    for (let i = 1; i < ledger.fences.length; i++) {
      assert.ok(ledger.fences[i] > ledger.fences[i - 1], `fences out of order: ${ledger.fences}`);
    }
    assert.equal(ledger.stale, 0);
    // A later hold on the same key gets a higher fence still.
    const next = await w.call("rust-b", "/charge", { run: `next:${crypto.randomUUID()}`, key });
    assert.ok(next.fence > Math.max(...fences), `fence ${next.fence} after ${fences}`);
  });

  it("the loss signal from Rust: a hold is told when its TTL passes without an extend", async () => {
    const key = `lost:${crypto.randomUUID()}`;
    const loss = await w.call("rust", "/hold-until-lost", { key, ttlMs: 300 });
    assert.equal(loss.reason, "Expired");
    assert.ok(loss.afterMs >= 300, `told after ${loss.afterMs} ms, before the TTL`);
  });

  it("the loss signal from Rust: a force-release is noticed at the next keep-alive extend", async () => {
    const key = `forced:${crypto.randomUUID()}`;
    const loss = await w.call("rust-b", "/hold-until-lost", { key, ttlMs: 10_000, keepAliveMs: 50, forceAfterMs: 100 });
    assert.equal(loss.reason, "Refused");
    assert.ok(loss.afterMs < 5_000, `told after ${loss.afterMs} ms: not at an extend but near the TTL`);
  });

  it("bad input reaches the handler as a worker::Error with keel-lock's message", async () => {
    const empty = await w.request("rust", "/charge", { key: "" });
    assert.equal(empty.status, 500);
    assert.match(String(empty.body), /lock key must be a non-empty string/);
    const long = await w.request("rust-b", "/charge", { key: "k".repeat(600) });
    assert.equal(long.status, 500);
    assert.match(String(long.body), /600 bytes of UTF-8; the limit is 512/);
  });
});
