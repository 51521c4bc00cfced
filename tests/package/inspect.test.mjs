// Who holds it: hold metadata, `inspect(key)`, `campaign` and `observe`, from the installed
// package, over a JS store that keeps metadata (it has `inspect`); and the clear errors for bad
// metadata and for stores that keep none. Needs nothing of Node beyond `process.pid`.
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { campaign, inspect, lock, observe, semaphore, setLockStore, MemoryLockStore, LockNotHeldError } from "keel-lock";
import { mapInspectStore, mapLockStore } from "./stores.mjs";
import { sleep, until } from "./waits.mjs";

let n = 0;
const fresh = (name) => `${name}:${process.pid}:${++n}`;

describe("hold metadata and inspect", () => {
  it("run({ metadata }) hands the store the metadata; inspect shows it with the fence, never the token", async () => {
    const store = mapInspectStore();
    setLockStore(store);
    const key = fresh("job");
    const [ran, seen] = await lock(key, 5_000).run(async ({ fence }) => ({ fence, info: await inspect(key) }), { metadata: "host-a pid 7" });
    assert.equal(ran, true);
    assert.deepEqual(store.calls.at(-1).slice(3), ["host-a pid 7"]);
    const { info } = seen;
    assert.equal(info.key, key);
    assert.equal(info.held, true);
    assert.equal(info.waiting, null);
    assert.equal(info.holders.length, 1);
    assert.deepEqual({ ...info.holders[0], remainingMs: 0 }, { metadata: "host-a pid 7", fence: seen.fence, remainingMs: 0 });
    assert.ok(info.holders[0].remainingMs > 0 && info.holders[0].remainingMs <= 5_000);
    const owner = store.calls.at(-1)[1];
    assert.ok(!JSON.stringify(info).includes(owner), "inspect leaked the owner token");
    assert.deepEqual(await inspect(key), { key, held: false, holders: [], waiting: null });
  });

  it("a run without metadata sends acquire exactly its three arguments", async () => {
    const store = mapInspectStore();
    setLockStore(store);
    await lock(fresh("plain")).run(() => 1);
    assert.equal(store.calls.at(-1).length, 3);
  });

  it("acquire/hold take metadata too; a handle's inspect() reads its own key", async () => {
    setLockStore(mapInspectStore());
    const l = lock(fresh("held"));
    await l.hold({ metadata: "nightly migration" });
    const info = await l.inspect();
    assert.equal(info.holders[0].metadata, "nightly migration");
    assert.equal(info.holders[0].fence, l.fence);
    await l.release();
  });

  it("bad metadata, and metadata or inspect on a store that keeps none, are clear errors", async () => {
    setLockStore(mapInspectStore());
    const l = lock(fresh("bad"));
    await assert.rejects(l.run(() => 1, { metadata: 42 }), TypeError);
    await assert.rejects(l.run(() => 1, { metadata: "é".repeat(513) }), RangeError);
    assert.deepEqual(await l.run(() => "ok", { metadata: "x".repeat(1024) }), [true, "ok"]);
    for (const store of [mapLockStore()]) {
      setLockStore(store);
      const k = fresh("none");
      await assert.rejects(lock(k).run(() => 1, { metadata: "m" }), { name: "TypeError", message: /no inspect method/ });
      await assert.rejects(inspect(k), { name: "TypeError", message: /no inspect method/ });
      assert.equal(await lock(k).isLocked(), false, "refused metadata left the key held");
    }
    await assert.rejects(inspect(""), RangeError);
  });

  it("an inspect answer outside the contract is a TypeError", async () => {
    const store = mapInspectStore();
    store.inspect = async () => ({ holders: [{ metadata: 5, fence: 1, remainingMs: 10 }], waiting: null });
    setLockStore(store);
    await assert.rejects(inspect(fresh("broken")), { name: "TypeError", message: /inspect\(\) must answer/ });
  });
});

describe("hold metadata and inspect on the memory store", () => {
  it("run, acquire and hold keep metadata per hold; inspect shows holds in fence order and the waiters", async () => {
    setLockStore(new MemoryLockStore());
    const key = fresh("mem");
    const first = lock(key, 60_000);
    await first.acquire({ metadata: "first" });
    const held = await inspect(key);
    assert.deepEqual({ ...held, holders: held.holders.map((h) => ({ ...h, remainingMs: h.remainingMs > 0 && h.remainingMs <= 60_000 })) }, {
      key,
      held: true,
      holders: [{ metadata: "first", fence: first.fence, remainingMs: true }],
      waiting: 0,
    });
    // Two waiters queue behind the holder; the release hands the key to the oldest, whose
    // metadata inspect shows at once.
    const second = lock(key, 60_000).run(async ({ fence }) => ({ fence, info: await inspect(key) }), { timeout: 60_000, metadata: "second" });
    const third = lock(key, 60_000).run(() => "third", { timeout: 60_000 });
    await until(async () => (await inspect(key)).waiting === 2, "two waiters queued");
    await first.release();
    const after = await inspect(key);
    assert.equal(after.holders[0].metadata, "second");
    assert.equal(after.waiting, 1);
    const [, { fence, info }] = await second;
    assert.ok(fence > first.fence);
    assert.deepEqual(info.holders.map((h) => [h.metadata, h.fence]), [["second", fence]]);
    assert.deepEqual(await third, [true, "third"]);
    assert.deepEqual(await inspect(key), { key, held: false, holders: [], waiting: 0 });
    // A later hold without metadata shows none, not an earlier hold's.
    const plain = lock(key);
    await plain.acquire();
    assert.equal((await plain.inspect()).holders[0].metadata, null);
    await plain.release();
  });

  it("semaphore permits each keep their own metadata; the answer never carries a token", async () => {
    const store = new MemoryLockStore();
    setLockStore(store);
    const key = fresh("permits");
    const a = semaphore(key, 3);
    const b = semaphore(key, 3);
    await a.acquire({ metadata: "worker a" });
    await b.acquire({ metadata: "worker b", permits: 2 });
    const info = await inspect(key);
    assert.deepEqual(info.holders.map((h) => [h.metadata, h.fence]), [["worker a", a.fence], ["worker b", b.fence]]);
    // The serialized hold carries the owner token, base64url, as its sixth field.
    const owner = atob(a.serialize().split(":")[5].replace(/-/g, "+").replace(/_/g, "/"));
    assert.ok(owner.length > 8 && !JSON.stringify(info).includes(owner), "inspect leaked an owner token");
    await a.release();
    assert.deepEqual((await inspect(key)).holders.map((h) => h.metadata), ["worker b"]);
    await b.release();
  });

  it("the store's own methods take metadata as their last argument and check it", async () => {
    const store = new MemoryLockStore();
    const key = fresh("seam");
    const grant = store.acquire(key, "owner-1", 60_000, "by hand");
    const { holders, waiting } = await store.inspect(key);
    assert.deepEqual([holders.length, holders[0].metadata, holders[0].fence, waiting], [1, "by hand", grant.fence, 0]);
    assert.ok(holders[0].remainingMs > 0 && holders[0].remainingMs <= 60_000);
    assert.equal(store.acquire(key, "owner-2", 60_000, "refused"), false);
    assert.equal((await store.inspect(key)).holders[0].metadata, "by hand");
    assert.equal(store.release(key, "owner-1"), true);
    assert.throws(() => store.acquire(key, "owner-3", 1_000, 7), TypeError);
    assert.throws(() => store.acquire(key, "owner-3", 1_000, "x".repeat(1025)), RangeError);
    assert.equal(store.isLocked(key), false, "a refused metadata took the key");
    const grants = store.acquireMany([`${key}:a`, `${key}:b`], ["o-a", "o-b"], 60_000, ["a", "b"]);
    assert.equal((await store.inspect(`${key}:b`)).holders[0].metadata, "b");
    assert.equal(grants.length, 2);
    const shared = store.acquireShared(key, "o-s", 60_000, 1, 2, "reader");
    assert.equal((await store.inspect(key)).holders[0].fence, shared.fence);
    assert.equal((await store.inspect(key)).holders[0].metadata, "reader");
    await assert.rejects(store.inspect(""), RangeError);
  });

  it("the kept metadata is swept of holds that are gone, never of live ones", async () => {
    const store = new MemoryLockStore();
    setLockStore(store);
    const live = lock("pile:live", 60_000);
    await live.acquire({ metadata: "still here" });
    // Hundreds of holds with metadata come and go: the kept metadata is swept several times.
    for (let i = 0; i < 300; i++) await lock(`pile:${i}`).run(() => {}, { metadata: `m${i}` });
    assert.equal(store.size, 1);
    assert.deepEqual((await inspect("pile:live")).holders.map((h) => h.metadata), ["still here"]);
    // A key taken again shows only its new hold's metadata.
    await lock("pile:0").acquire();
    assert.deepEqual((await inspect("pile:0")).holders.map((h) => h.metadata), [null]);
    await live.release();
  });

  it("campaign and observe over the memory store: each leader with its metadata, in turn", async () => {
    setLockStore(new MemoryLockStore());
    const key = fresh("mem-leader");
    const controller = new AbortController();
    const seen = [];
    const watching = (async () => {
      for await (const leader of observe(key, { signal: controller.signal, intervalMs: 10 })) seen.push(leader);
    })();
    const order = [];
    // Each leader stays until observe has seen it lead.
    const term = (name) =>
      campaign(key, async ({ fence }) => {
        order.push(name);
        await until(() => seen.some((s) => s?.metadata === name), `observe saw ${name} lead`);
        return fence;
      }, { metadata: name });
    const fences = await Promise.all([term("a"), term("b")]);
    await until(() => seen.at(-1) === null, "observe saw nobody lead");
    controller.abort();
    await watching;
    assert.deepEqual(order, ["a", "b"]);
    assert.ok(fences[1] > fences[0]);
    assert.deepEqual(seen.filter((s) => s !== null), [{ metadata: "a", fence: fences[0] }, { metadata: "b", fence: fences[1] }]);
    assert.equal(seen.at(-1), null);
  });
});

describe("campaign and observe", () => {
  it("one leader at a time, in turn; observe sees each, with its metadata, then nobody", async () => {
    setLockStore(mapInspectStore());
    const key = fresh("leader");
    const controller = new AbortController();
    const seen = [];
    const watching = (async () => {
      for await (const leader of observe(key, { signal: controller.signal, intervalMs: 10 })) seen.push(leader);
    })();
    let inside = 0;
    // Each leader stays a while, and until observe has seen it lead.
    const term = (name) =>
      campaign(
        key,
        async ({ fence }) => {
          inside++;
          assert.equal(inside, 1, "two leaders at once");
          await sleep(80);
          await until(() => seen.some((s) => s?.metadata === name), `observe saw ${name} lead`);
          inside--;
          return [name, fence];
        },
        { metadata: name, ttlMs: 10_000 },
      );
    const results = await Promise.all([term("a"), term("b")]);
    await until(() => seen.at(-1) === null, "observe saw nobody lead");
    controller.abort();
    await watching;
    assert.deepEqual(results.map(([name]) => name).sort(), ["a", "b"]);
    assert.ok(results[0][1] !== results[1][1]);
    const leaders = seen.filter((s) => s !== null).map((s) => s.metadata);
    assert.deepEqual([...new Set(leaders)].sort(), ["a", "b"], JSON.stringify(seen));
    assert.equal(seen.at(-1), null, "nobody leads once both returned");
  });

  it("leadership lost while leading: the signal aborts and the campaign rejects with the loss", async () => {
    const store = mapInspectStore();
    setLockStore(store);
    const key = fresh("lost");
    const leading = campaign(
      key,
      async ({ signal }) => {
        store.rows.delete(key); // an operator, or an expiry the keep-alive could not stop
        await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
        return "finished anyway";
      },
      { ttlMs: 120 },
    );
    await assert.rejects(leading, LockNotHeldError);
  });

  it("leadership lost: the campaign rejects even while fn never settles", async () => {
    const store = mapInspectStore();
    setLockStore(store);
    const key = fresh("lost-deaf");
    const leading = campaign(
      key,
      async () => {
        store.rows.delete(key);
        await new Promise(() => {}); // never settles, never looks at its signal
      },
      { ttlMs: 120 },
    );
    await assert.rejects(leading, LockNotHeldError);
  });

  it("a campaign stops waiting when its signal aborts; bad arguments are clear errors", async () => {
    setLockStore(mapInspectStore());
    const key = fresh("abort");
    const holder = lock(key);
    await holder.acquire();
    const controller = new AbortController();
    const waiting = campaign(key, () => "never", { signal: controller.signal });
    await sleep(30);
    controller.abort(new Error("stand down"));
    await assert.rejects(waiting, /stand down/);
    await holder.release();
    await assert.rejects(campaign(key, "nope"), TypeError);
    await assert.rejects(observe(key, { intervalMs: 1 }).next(), RangeError);
  });
});
