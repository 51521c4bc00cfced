// keel-lock/indexeddb in one page: the store's contract over one connection and several (each
// store is a connection of its own, as another tab's would be), the conformance kit, keel-lock's
// lock() over it, and the errors of a bad environment. Run by idb.mjs (`?role=units`).
import { describe, it } from "./node-test.mjs";
import assert from "./assert.mjs";
import { inspect, lock, LockNotHeldError, setLockStore } from "keel-lock";
import { checkLockStore } from "keel-lock/testing";
import { IndexedDbStoreError, indexedDbLockStore } from "keel-lock/indexeddb";
import { until } from "../waits.mjs";

const fresh = () => `keel-lock-test-${Math.random().toString(36).slice(2)}`;
const done = (request) =>
  new Promise((resolve, reject) => {
    request.onsuccess = () => resolve(request.result);
    request.onerror = () => reject(request.error);
  });

describe("indexedDbLockStore", () => {
  it("bad options and arguments are TypeErrors and RangeErrors; no IndexedDB is an IndexedDbStoreError", async () => {
    assert.throws(() => indexedDbLockStore(null), TypeError);
    assert.throws(() => indexedDbLockStore({ name: 5 }), TypeError);
    assert.throws(() => indexedDbLockStore({ name: "" }), RangeError);
    assert.throws(() => indexedDbLockStore({ indexedDB: {} }), TypeError);
    assert.throws(() => indexedDbLockStore({ indexedDB: null }), IndexedDbStoreError);
    const store = indexedDbLockStore({ name: fresh() });
    assert.throws(() => store.acquire("", "o", 1000), TypeError);
    assert.throws(() => store.acquire(7, "o", 1000), TypeError);
    assert.throws(() => store.acquire("k", "", 1000), TypeError);
    assert.throws(() => store.acquire("k", "o", 0), RangeError);
    assert.throws(() => store.acquire("k", "o", 2 ** 31), RangeError);
    assert.throws(() => store.acquire("k", "o", 1.5), RangeError);
    assert.throws(() => store.acquire("k", "o", 1000, "x".repeat(1025)), RangeError);
    assert.throws(() => store.acquire("k", "o", 1000, 5), TypeError);
    assert.throws(() => store.extend("k", "o", -1), RangeError);
    assert.throws(() => store.isLocked(""), TypeError);
    store.close();
  });

  it("acquire, release and extend act only for the owner, across two connections", async () => {
    const name = fresh();
    const a = indexedDbLockStore({ name });
    const b = indexedDbLockStore({ name });
    const first = await a.acquire("k", "owner-a", 60_000, "host a");
    assert.equal(first.fence, 1);
    assert.equal(await b.acquire("k", "owner-b", 60_000), false);
    assert.equal(await a.acquire("k", "owner-a", 60_000), false, "not reentrant");
    assert.equal(await b.release("k", "owner-b"), false);
    assert.equal(await b.extend("k", "owner-b", 60_000), false);
    assert.equal(await b.isLocked("k"), true);
    const left = await b.remainingTime("k");
    assert.ok(left > 0 && left <= 60_000, `remainingTime ${left}`);
    const seen = await b.inspect("k");
    assert.deepEqual(Object.keys(seen.holders[0]).sort(), ["fence", "metadata", "remainingMs"]);
    assert.equal(seen.holders[0].metadata, "host a");
    assert.equal(seen.holders[0].fence, 1);
    assert.equal(seen.waiting, null);
    assert.ok(!JSON.stringify(seen).includes("owner-a"), "inspect shows no owner token");
    assert.equal(await a.extend("k", "owner-a", 90_000), true);
    assert.ok((await b.remainingTime("k")) > 60_000);
    assert.equal(await a.release("k", "owner-a"), true);
    assert.equal(await a.release("k", "owner-a"), false);
    assert.equal(await b.isLocked("k"), false);
    assert.equal(await b.remainingTime("k"), null);
    assert.deepEqual(await b.inspect("k"), { holders: [], waiting: null });
    assert.deepEqual(await b.acquire("k", "owner-b", 60_000), { fence: 2 });
    assert.equal(await a.forceRelease("k"), true);
    assert.equal(await a.forceRelease("k"), false);
    assert.equal(await b.extend("k", "owner-b", 60_000), false, "a force-released holder learns at its extend");
    assert.deepEqual(await a.acquire("other", "owner-a", 60_000), { fence: 1 }, "fences are per key");
    a.close();
    b.close();
  });

  it("an expired hold is free; the old owner can neither extend nor release the new one's; fences keep rising", async () => {
    const name = fresh();
    const a = indexedDbLockStore({ name });
    const b = indexedDbLockStore({ name });
    const { fence } = await a.acquire("k", "owner-a", 60_000);
    // Taken long, shortened just before it is waited out.
    assert.equal(await a.extend("k", "owner-a", 200), true);
    await until(async () => !(await b.isLocked("k")), "the hold expired");
    assert.equal(await a.extend("k", "owner-a", 60_000), false);
    const next = await b.acquire("k", "owner-b", 60_000);
    assert.ok(next.fence > fence, `${next.fence} > ${fence}`);
    assert.equal(await a.release("k", "owner-a"), false);
    assert.equal(await b.isLocked("k"), true);
    assert.equal(await b.release("k", "owner-b"), true);
    a.close();
    b.close();
    // The counter lives in the database: a new store (a reloaded page) goes on from it.
    const c = indexedDbLockStore({ name });
    assert.deepEqual(await c.acquire("k", "owner-c", 60_000), { fence: next.fence + 1 });
    c.close();
  });

  it("a dedicated worker's hold: the page can neither release nor extend it; once expired the page takes it, the worker's extend and release answer false", async () => {
    const name = fresh();
    const worker = new Worker(new URL("./idb-worker.mjs", import.meta.url), { type: "module" });
    const ask = (message) =>
      new Promise((resolve, reject) => {
        worker.onmessage = ({ data }) => (data.ok ? resolve(data.result) : reject(new Error(`worker: ${data.error}`)));
        worker.postMessage({ db: name, key: "k", owner: "worker", ...message });
      });
    try {
      const page = indexedDbLockStore({ name });
      const { fence } = await ask({ task: "acquire", ttlMs: 60_000 });
      assert.equal(await page.acquire("k", "page", 60_000), false);
      assert.equal(await page.release("k", "page"), false);
      assert.equal(await page.extend("k", "page", 60_000), false);
      assert.equal(await page.isLocked("k"), true);
      // Taken long, shortened just before it is waited out.
      assert.equal(await ask({ task: "extend", ttlMs: 200 }), true);
      await until(async () => !(await page.isLocked("k")), "the worker's hold expired");
      const next = await page.acquire("k", "page", 60_000);
      assert.ok(next.fence > fence, `${next.fence} > ${fence}`);
      assert.equal(await ask({ task: "extend", ttlMs: 60_000 }), false);
      assert.equal(await ask({ task: "release" }), false);
      assert.equal(await page.release("k", "page"), true);
      page.close();
    } finally {
      worker.terminate();
    }
  });

  it("of 40 concurrent acquires over four connections exactly one wins", async () => {
    const name = fresh();
    const stores = [0, 1, 2, 3].map(() => indexedDbLockStore({ name }));
    const answers = await Promise.all(Array.from({ length: 40 }, (_, i) => stores[i % 4].acquire("k", `owner-${i}`, 60_000)));
    assert.deepEqual(answers.filter((x) => x !== false), [{ fence: 1 }]);
    for (const s of stores) s.close();
  });

  it("passes the conformance kit", async () => {
    const store = indexedDbLockStore({ name: fresh() });
    const results = await checkLockStore(store, { shortTtlMs: 1_000, settleMs: 50, contenders: 10 });
    assert.ok(results.length >= 10, `${results.length} properties`);
    const fences = results.find((r) => r.property === "fences_increase");
    assert.ok(fences?.ok && fences.applicable === true, `fences are checked: ${JSON.stringify(fences)}`);
    store.close();
  });

  it("lock().run over it: fences, metadata and inspect(), forceRelease()", async () => {
    const store = indexedDbLockStore({ name: fresh() });
    setLockStore(store);
    const [ran, seen] = await lock("job", 30_000).run(async ({ fence }) => ({ fence, info: await inspect("job") }), { metadata: "tab 1" });
    assert.equal(ran, true);
    assert.equal(seen.fence, 1);
    assert.deepEqual(seen.info.holders.map((h) => [h.metadata, h.fence]), [["tab 1", 1]]);
    const held = lock("job", 30_000);
    assert.equal(await held.acquire(), true);
    assert.equal(held.fence, 2);
    assert.equal(await lock("job").forceRelease(), true);
    await assert.rejects(held.extend(), LockNotHeldError);
    store.close();
  });

  it("close(): calls after it reject with IndexedDbStoreError", async () => {
    const store = indexedDbLockStore({ name: fresh() });
    const inFlight = store.acquire("k", "o", 60_000);
    await store.isLocked("k");
    store.close();
    assert.deepEqual(await inFlight, { fence: 1 });
    await assert.rejects(store.isLocked("k"), (e) => e instanceof IndexedDbStoreError && /closed/.test(e.message));
  });

  it("the database deleted under the store: it lets the delete through and fails from then on", async () => {
    const name = fresh();
    const store = indexedDbLockStore({ name });
    await store.acquire("k", "o", 60_000);
    await done(indexedDB.deleteDatabase(name));
    await assert.rejects(store.acquire("k2", "o", 60_000), (e) => e instanceof IndexedDbStoreError && /deleted/.test(e.message));
    await assert.rejects(store.isLocked("k"), IndexedDbStoreError);
  });

  it("a newer version, or another app's database of that name, is a clear error", async () => {
    const newer = fresh();
    (await done(indexedDB.open(newer, 2))).close();
    await assert.rejects(indexedDbLockStore({ name: newer }).isLocked("k"), (e) => e instanceof IndexedDbStoreError && /newer version/.test(e.message));
    const foreign = fresh();
    const request = indexedDB.open(foreign, 1);
    request.onupgradeneeded = () => request.result.createObjectStore("todos");
    (await done(request)).close();
    await assert.rejects(indexedDbLockStore({ name: foreign }).isLocked("k"), (e) => e instanceof IndexedDbStoreError && /another app/.test(e.message));
  });

  it("an open that is blocked, or refused, rejects at once rather than hang", async () => {
    const blocking = {
      open() {
        const request = {};
        setTimeout(() => request.onblocked?.({}), 0);
        return request;
      },
    };
    await assert.rejects(indexedDbLockStore({ indexedDB: blocking }).acquire("k", "o", 1000), (e) => e instanceof IndexedDbStoreError && /blocked/.test(e.message));
    const refusing = {
      open() {
        throw new DOMException("denied", "SecurityError");
      },
    };
    await assert.rejects(indexedDbLockStore({ indexedDB: refusing }).isLocked("k"), (e) => e instanceof IndexedDbStoreError && /refused/.test(e.message) && e.cause?.name === "SecurityError");
  });
});
