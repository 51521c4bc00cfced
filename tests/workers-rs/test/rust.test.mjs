// The Rust Worker (examples/workers-rs, built with worker-build) against itself: two scripts,
// two isolates, one lock namespace served by the example's own LockDurableObject.
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { race, start } from "../harness.mjs";

const N = 40;
const w = await start({ lockHost: "rust" });
const rustOnly = ["rust", "rust-b"];

after(() => w.dispose());

describe("Rust Worker, two isolates", { concurrency: false, timeout: 180_000 }, () => {
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
    const said = await w.request("rust", "/charge", { key: `said:${crypto.randomUUID()}`, metadata: "é".repeat(513) });
    assert.equal(said.status, 500);
    assert.match(String(said.body), /metadata is 1026 bytes of UTF-8; the limit is 1024/);
  });

  it("a Rust hold keeps its metadata, shown by inspect from the other isolate until it ends", async () => {
    const key = `said:${crypto.randomUUID()}`;
    const look = () => w.call("rust-b", `/inspect?key=${encodeURIComponent(key)}`);
    const run = `said:${crypto.randomUUID()}`;
    // Held 5 s: long enough for a look from the other isolate to find it.
    const charge = w.call("rust", "/charge", { run, key, mode: "wait", payMs: 5_000, metadata: "rust isolate a" });
    let seen;
    const deadline = Date.now() + 20_000;
    while ((seen = await look()).holders.length === 0) {
      assert.ok(Date.now() < deadline, "the hold never showed");
      await new Promise((r) => setTimeout(r, 10));
    }
    const { fence } = await charge;
    assert.deepEqual(seen.holders.map((h) => [h.metadata, h.fence]), [["rust isolate a", fence]]);
    assert.equal(seen.waiting, 0);
    assert.deepEqual(await look(), { holders: [], waiting: 0 }, "after the charge released");
  });
});

describe("Rust Worker, shared holds through the Rust API", { concurrency: false, timeout: 180_000 }, () => {
  const shared = (name, body) => w.call(name, "/shared", body);
  const ledger = (run) => w.call("rust", `/ledger?run=${encodeURIComponent(run)}`);
  const fresh = (what) => ({ run: `${what}:${crypto.randomUUID()}`, key: `${what}:${crypto.randomUUID()}` });

  it("24 concurrent semaphore requests on a limit of 3, from two isolates: never more than 3 inside", async () => {
    const { run, key } = fresh("sem");
    const results = await Promise.all(
      Array.from({ length: 24 }, (_, i) =>
        shared(rustOnly[i % 2], { run, key, kind: "semaphore", limit: 3, timeoutMs: 60_000, holdMs: 20 }),
      ),
    );
    assert.ok(results.every((r) => r.ran === true), JSON.stringify(results));
    const fences = results.map((r) => r.fence);
    assert.equal(new Set(fences).size, fences.length, `every grant its own fence: ${fences}`);
    const l = await ledger(run);
    assert.equal(l.charges, 24);
    assert.equal(l.maxInside, 3, `up to ${l.maxInside} inside at once on a limit of 3`);
    assert.equal(l.inside, 0);
  });

  it("weighted permits: 12 requests of 1 or 2 permits on a limit of 4 stay within it", async () => {
    const { run, key } = fresh("weighted");
    const results = await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        shared(rustOnly[i % 2], { run, key, kind: "semaphore", limit: 4, permits: 1 + (i % 2), timeoutMs: 60_000, holdMs: 20 }),
      ),
    );
    assert.ok(results.every((r) => r.ran === true), JSON.stringify(results));
    const l = await ledger(run);
    assert.ok(l.maxInside <= 4 && l.maxInside >= 3, `up to ${l.maxInside} permits inside at once on a limit of 4`);
    assert.equal(l.inside, 0);
  });

  it("another limit on a held key is Error::LimitMismatch, never granted", async () => {
    const { run, key } = fresh("mismatch");
    // Held 5 s: still there for the two requests below.
    const holder = shared("rust", { run, key, kind: "semaphore", limit: 3, holdMs: 5_000 });
    while ((await ledger(run)).inside === 0) await new Promise((r) => setTimeout(r, 20));
    const other = await shared("rust-b", { run, key, kind: "semaphore", limit: 4, timeoutMs: 200 });
    assert.deepEqual(other, { heldLimit: 3, limit: 4 });
    const reader = await shared("rust-b", { run, key, kind: "read" });
    assert.deepEqual(reader, { heldLimit: 3, limit: 2 ** 32 - 1 }, "a read lock is a semaphore of 2^32 - 1");
    assert.equal((await holder).ran, true);
    const after = await shared("rust-b", { run, key, kind: "semaphore", limit: 4 });
    assert.equal(after.ran, true, "another limit is fine once the key is free");
    assert.equal((await ledger(run)).maxInside, 1);
  });

  it("readers share the key; a writer waits for every reader and excludes them", async () => {
    const { run, key } = fresh("rw");
    // Held 5 s: still there for the two requests below.
    const reader = shared("rust", { run, key, kind: "read", holdMs: 5_000 });
    while ((await ledger(run)).inside === 0) await new Promise((r) => setTimeout(r, 20));
    assert.equal((await shared("rust-b", { run, key, kind: "write" })).ran, false, "a writer beside a reader");
    assert.equal((await shared("rust-b", { run, key, kind: "read" })).ran, true, "a second reader beside the first");
    assert.equal((await reader).ran, true);

    // Readers and writers at once from two isolates: a writer books 1000, a reader 1, so any
    // overlap with a writer shows as more than 1000 inside.
    const mixed = fresh("rw-mixed");
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        shared(rustOnly[i % 2], { ...mixed, kind: i % 5 === 0 ? "write" : "read", timeoutMs: 60_000, holdMs: 15 }),
      ),
    );
    assert.ok(results.every((r) => r.ran === true), JSON.stringify(results));
    const l = await ledger(mixed.run);
    assert.equal(l.charges, 20);
    assert.equal(l.maxInside, 1_000, `up to ${l.maxInside} inside: a writer overlapped someone`);
    assert.equal(l.inside, 0);
  });

  it("bad shared terms reach the handler as a worker::Error with keel-lock's message", async () => {
    const { run, key } = fresh("bad");
    const zero = await w.request("rust", "/shared", { run, key, kind: "semaphore", limit: 0 });
    assert.equal(zero.status, 500);
    assert.match(String(zero.body), /a semaphore limit must be a whole number between 1 and 4294967295, got 0/);
    const over = await w.request("rust-b", "/shared", { run, key, kind: "semaphore", limit: 2, permits: 3 });
    assert.equal(over.status, 500);
    assert.match(String(over.body), /permits must be a whole number between 1 and the limit, 2, got 3/);
  });
});

describe("Rust Worker, transfers under a MultiLock of two accounts", { concurrency: false, timeout: 180_000 }, () => {
  const transfer = (name, body) => w.call(name, "/transfer", body);
  const ledger = (run) => w.call("rust", `/ledger?run=${encodeURIComponent(run)}`);

  it("36 concurrent transfers in both directions over overlapping pairs, from two isolates: all move, never two on an account", async () => {
    const run = `transfers:${crypto.randomUUID()}`;
    const accounts = ["a", "b", "c"].map((n) => `account:${n}:${crypto.randomUUID()}`);
    const [a, b, c] = accounts;
    const pairs = [[a, b], [b, a], [b, c], [c, b], [c, a], [a, c]];
    const orders = Array.from({ length: 36 }, (_, i) => {
      const [from, to] = pairs[i % pairs.length];
      return { run, from, to, amount: i + 1, mode: "wait", holdMs: 10 };
    });
    const results = await Promise.all(orders.map((order, i) => transfer(rustOnly[i % 2], order)));
    assert.ok(results.every((r) => r.moved === true), JSON.stringify(results.filter((r) => !r.moved)));
    const expected = Object.fromEntries(accounts.map((k) => [k, 0]));
    for (const [i, { from, to, amount }] of orders.entries()) {
      expected[from] -= amount;
      expected[to] += amount;
      // A fence per key: both accounts of this transfer, and no other.
      assert.deepEqual(Object.keys(results[i].fences).sort(), [from, to].sort());
      assert.ok(Object.values(results[i].fences).every((f) => Number.isSafeInteger(f) && f > 0), JSON.stringify(results[i]));
    }
    for (const account of accounts) {
      const l = await ledger(`${run}/${account}`);
      const touching = orders.filter((o) => o.from === account || o.to === account).length;
      assert.equal(l.charges, touching, `${account}: ${l.charges} transfers booked of ${touching}`);
      assert.equal(l.maxInside, 1, `${account}: up to ${l.maxInside} transfers inside at once`);
      assert.equal(l.inside, 0);
      assert.equal(l.stale, 0);
      // Each key's fences increase in the order its holds were taken (the ledger books while held).
      for (let i = 1; i < l.fences.length; i++) {
        assert.ok(l.fences[i] > l.fences[i - 1], `${account}: fences out of order: ${l.fences}`);
      }
      const fromAnswers = results.map((r) => r.fences[account]).filter((f) => f !== undefined);
      assert.deepEqual([...fromAnswers].sort((x, y) => x - y), l.fences, `${account}: the answers' fences are the ledger's`);
      // Balances read and written across a delay: an overlap would lose an update.
      assert.equal(l.balance, expected[account], `${account}: balance ${l.balance}, expected ${expected[account]}`);
    }
  });

  it("an immediate transfer refused on one account leaves the other free, then moves once both are", async () => {
    const run = `refused:${crypto.randomUUID()}`;
    const id = crypto.randomUUID();
    // Sorted, `first` is taken before `second`: refused on `second`, it must give `first` back.
    const first = `account:1:${id}`;
    const second = `account:2:${id}`;
    // Held 5 s: still there for the three requests below.
    const holder = w.call("rust", "/shared", { run, key: second, kind: "write", holdMs: 5_000 });
    while ((await ledger(run)).inside === 0) await new Promise((r) => setTimeout(r, 20));
    const refused = await transfer("rust-b", { run, from: first, to: second, amount: 5, mode: "immediate" });
    assert.deepEqual(refused, { moved: false, fences: {}, balances: {}, worker: "rust" });
    const other = await w.call("rust", "/shared", { run: `${run}:probe`, key: first, kind: "write" });
    assert.equal(other.ran, true, `${first} was left held by the refused transfer`);
    assert.ok((await ledger(run)).inside > 0, "the holder of the second key is still inside");
    assert.equal((await holder).ran, true);
    const moved = await transfer("rust-b", { run, from: first, to: second, amount: 5, mode: "immediate" });
    assert.equal(moved.moved, true);
    assert.deepEqual(moved.balances, { [first]: -5, [second]: 5 });
  });

  it("a bad key set reaches the handler as a worker::Error with keel-lock's message", async () => {
    const same = await w.request("rust", "/transfer", { from: "account:x", to: "account:x" });
    assert.equal(same.status, 500);
    assert.match(String(same.body), /a multi-key lock needs 1 to 64 distinct keys: a key given twice/);
    const empty = await w.request("rust-b", "/transfer", { from: "", to: "account:x" });
    assert.equal(empty.status, 500);
    assert.match(String(empty.body), /lock key must be a non-empty string/);
  });
});
