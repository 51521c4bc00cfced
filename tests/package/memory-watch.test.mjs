// The memory store's `watch`: every change of a key's exclusive holder told as it is made, in
// order, with no timer — and so `observe` on the default store sees every leader. Each step
// waits for the state it needs (a report, a queued waiter), never for a length of time.
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { campaign, inspect, lock, observe, semaphore, setLockStore, MemoryLockStore } from "keel-lock";
import { checkLockStore } from "keel-lock/testing";

let n = 0;
const fresh = (label) => `memory-watch:${label}:${process.pid}:${++n}`;
const owner = () => crypto.randomUUID().replaceAll("-", "");

/** A promise with its resolve, for a step of a test to wait on. */
function gate() {
  let open;
  const opened = new Promise((resolve) => (open = resolve));
  return { opened, open };
}

/** `watch(key)` on `store`, collecting reports; `until(count)` resolves once that many came. */
async function collect(store, key) {
  const reports = [];
  const stop = await store.watch(key, (change) => reports.push(change));
  const until = async (count) => {
    while (reports.length < count) await new Promise((resolve) => setImmediate(resolve));
  };
  return { reports, stop, until };
}

/** Resolves once `count` callers wait for `key` (as `inspect` counts them). */
async function waiting(key, count) {
  while ((await inspect(key)).waiting < count) await new Promise((resolve) => setImmediate(resolve));
}

describe("MemoryLockStore.watch", { timeout: 60_000 }, () => {
  it("observe on the default store sees every leader, in order, as it changes (no polling)", async () => {
    setLockStore(new MemoryLockStore());
    const key = fresh("leaders");
    const controller = new AbortController();
    const seen = [];
    let told = null;
    const watching = (async () => {
      // An interval no test waits out: any report must come from the store's push.
      for await (const leader of observe(key, { signal: controller.signal, intervalMs: 3_600_000 })) {
        seen.push(leader);
        told?.();
      }
    })();
    const next = (count) =>
      new Promise((resolve) => {
        told = () => seen.length >= count && resolve();
        told();
      });
    await next(1);
    const a = gate();
    const b = gate();
    const aLeads = campaign(key, async ({ fence }) => (await a.opened, fence), { metadata: "A" });
    await next(2);
    const bLeads = campaign(key, async ({ fence }) => (await b.opened, fence), { metadata: "B" });
    await waiting(key, 1);
    a.open(); // A steps down; B, queued, is handed the key
    const fenceA = await aLeads;
    await next(3);
    b.open();
    const fenceB = await bLeads;
    await next(4);
    controller.abort();
    await watching;
    assert.deepEqual(seen, [null, { metadata: "A", fence: fenceA }, { metadata: "B", fence: fenceB }, null]);
    assert.ok(fenceB > fenceA);
  });

  it("a hold that comes and goes within one turn is still told, grant then end", async () => {
    const store = new MemoryLockStore();
    setLockStore(store);
    const key = fresh("sync");
    const { reports, stop, until } = await collect(store, key);
    const [ran, fence] = await lock(key).run(({ fence }) => fence, { metadata: "quick" });
    assert.equal(ran, true);
    await until(2);
    assert.equal(reports.length, 2);
    assert.deepEqual(reports[1], { fence, held: false });
    assert.equal(reports[0].fence, fence);
    assert.equal(reports[0].held, true);
    assert.equal(reports[0].metadata, "quick");
    assert.ok(reports[0].remainingMs > 0 && reports[0].remainingMs <= 30_000);
    stop();
  });

  it("acquire, release, forceRelease and a hand-over through lock(), each told once; extend is not", async () => {
    const store = new MemoryLockStore();
    setLockStore(store);
    const key = fresh("ops");
    const { reports, stop, until } = await collect(store, key);
    const first = lock(key);
    assert.equal(await first.acquire(), true);
    const firstFence = first.fence;
    const second = lock(key);
    const queued = second.acquire({ timeout: 60_000, metadata: "second" });
    await waiting(key, 1);
    await first.extend();
    assert.equal(await first.release(), true);
    assert.equal(await queued, true);
    await until(3);
    const o = owner();
    assert.equal(store.forceRelease(key), true);
    const grant = store.acquire(key, o, 10_000, "third");
    assert.equal(store.release(key, o), true);
    await until(6);
    assert.deepEqual(reports.map((r) => [r.fence, r.held, r.metadata ?? null]), [
      [firstFence, true, null],
      [firstFence, false, null],
      [reports[2].fence, true, "second"],
      [reports[2].fence, false, null],
      [grant.fence, true, "third"],
      [grant.fence, false, null],
    ]);
    assert.ok(reports[2].fence > reports[0].fence && grant.fence > reports[2].fence);
    stop();
  });

  it("a watch started while the key is held tells that holder's end; stop() ends the reports", async () => {
    const store = new MemoryLockStore();
    const key = fresh("held");
    const o = owner();
    const { fence } = store.acquire(key, o, 10_000);
    const { reports, stop, until } = await collect(store, key);
    store.release(key, o);
    await until(1);
    assert.deepEqual(reports, [{ fence, held: false }]);
    stop();
    stop(); // twice is fine
    const again = store.acquire(key, o, 10_000);
    store.release(key, o);
    assert.ok(again.fence > fence);
    assert.deepEqual(reports, [{ fence, held: false }], "told after stop()");
  });

  it("a set refused part-way is never told; a set taken is told key by key", async () => {
    const store = new MemoryLockStore();
    const [k1, k2] = [fresh("set-1"), fresh("set-2")];
    const one = await collect(store, k1);
    const blocker = owner();
    store.acquire(k2, blocker, 10_000);
    assert.equal(store.acquireMany([k1, k2], [owner(), owner()], 10_000), false);
    assert.deepEqual(one.reports, [], "a key of a refused set was told held");
    store.release(k2, blocker);
    const grants = store.acquireMany([k1, k2], [owner(), owner()], 10_000, ["m1", "m2"]);
    assert.equal(grants.length, 2);
    await one.until(1);
    assert.deepEqual(one.reports.map((r) => [r.fence, r.held, r.metadata]), [[grants[0].fence, true, "m1"]]);
    one.stop();
  });

  it("shared holds (semaphore permits) are not told", async () => {
    const store = new MemoryLockStore();
    setLockStore(store);
    const key = fresh("shared");
    const { reports, stop } = await collect(store, key);
    const permits = semaphore(key, 3);
    await permits.run(async () => {
      await semaphore(key, 3).run(() => {});
    });
    assert.deepEqual(reports, []);
    stop();
  });

  it("a watcher that throws is reported on the console and changes nothing", async () => {
    const store = new MemoryLockStore();
    setLockStore(store);
    const key = fresh("throws");
    const logged = [];
    const error = console.error;
    console.error = (...args) => logged.push(args);
    let stop;
    try {
      stop = await store.watch(key, () => {
        throw new Error("watcher broke");
      });
      assert.deepEqual(await lock(key).run(() => "ran"), [true, "ran"]);
    } finally {
      console.error = error;
      stop?.();
    }
    assert.equal(logged.length, 2);
    assert.match(String(logged[0][0]), /watch callback threw/);
    assert.equal(await lock(key).isLocked(), false);
  });

  it("bad arguments reject with a TypeError", async () => {
    const store = new MemoryLockStore();
    await assert.rejects(store.watch(42, () => {}), TypeError);
    await assert.rejects(store.watch("", () => {}), (e) => e instanceof TypeError || e instanceof RangeError);
    await assert.rejects(store.watch("k", "not a function"), TypeError);
    await assert.rejects(store.watch("k"), TypeError);
  });

  it("the conformance kit holds the memory store to watch_reports_every_change_in_order", async () => {
    // A short TTL of a second: the owner's extend reaches it inside that TTL on any machine.
    const results = await checkLockStore(new MemoryLockStore(), { shortTtlMs: 1_000, settleMs: 50 });
    const watch = results.find((r) => r.property === "watch_reports_every_change_in_order");
    assert.ok(watch, "the kit has no watch property");
    assert.equal(watch.applicable, true, "the memory store's watch was not checked");
    assert.equal(watch.ok, true, watch.message);
    const failed = results.filter((r) => !r.ok);
    assert.deepEqual(failed, []);
  });
});
