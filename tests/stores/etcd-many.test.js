// etcdLockStore's acquireMany against a real three-member etcd cluster: any keys in one
// transaction, all or none (a key held, queued for or held shared refuses the set and changes
// nothing), one fence for the set, metadata per key, a set too big for one transaction answered
// null, the requests on the wire, and lock([...keys]) through keel-lock.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { lock, setLockStore } from "keel-lock";
import { etcdLockStore } from "../../pkg/stores/etcd.js";
import { sleep, startEtcdCluster } from "./lib/servers.js";

let cluster;
let store;
const LONG = 30_000;
let keyNo = 0;
const freshKeys = (name, n) => {
  const base = `etcd-many:${process.pid}:${++keyNo}:${name}`;
  return Array.from({ length: n }, (_, i) => `${base}:${String(i).padStart(2, "0")}`);
};

before(async () => {
  cluster = await startEtcdCluster();
  store = etcdLockStore({ endpoints: cluster.endpoints });
});
after(async () => {
  await cluster?.stop();
});

test("all or none, one fence for the set, metadata per key", async () => {
  const keys = freshKeys("set", 3);
  const owners = ["o0", "o1", "o2"];
  const grants = await store.acquireMany(keys, owners, LONG, ["first", undefined, "third"]);
  assert.equal(grants.length, 3);
  assert.ok(grants.every((g) => g.fence === grants[0].fence && g.fence > 0));
  assert.deepEqual((await store.inspect(keys[0])).holders.map((h) => h.metadata), ["first"]);
  assert.deepEqual((await store.inspect(keys[1])).holders.map((h) => h.metadata), [null]);
  for (let i = 0; i < 3; i++) assert.equal(await store.release(keys[i], owners[i]), true);
});

test("a key held, queued for or held shared refuses the set, and nothing changes", async () => {
  for (const how of ["held", "queued", "shared"]) {
    const keys = freshKeys(how, 3);
    if (how === "shared") {
      assert.ok(await store.acquireShared(keys[2], "reader", LONG, 1, 5));
    } else {
      assert.ok(await store.acquire(keys[2], "holder", LONG));
    }
    let waiting = null;
    if (how === "queued") {
      waiting = store.acquireOrWait(keys[2], "waiter", LONG, LONG, 50);
      const deadline = Date.now() + 20_000;
      while ((await store.inspect(keys[2])).waiting !== 1) {
        assert.ok(Date.now() < deadline, "the waiter queued");
        await sleep(50);
      }
      assert.equal(await store.release(keys[2], "holder"), true);
      assert.ok(await waiting);
      waiting = store.acquireOrWait(keys[2], "second", LONG, LONG, 50);
      while ((await store.inspect(keys[2])).waiting !== 1) {
        assert.ok(Date.now() < deadline, "the second waiter queued");
        await sleep(50);
      }
    }
    assert.equal(await store.acquireMany(keys, ["a", "b", "c"], LONG), false, how);
    assert.equal(await store.isLocked(keys[0]), false, `${how}: a key of a refused set was taken`);
    assert.equal(await store.isLocked(keys[1]), false, `${how}: a key of a refused set was taken`);
    await store.forceRelease(keys[2]);
    if (waiting) {
      assert.ok(await waiting);
      await store.release(keys[2], "second");
    }
  }
});

test("64 keys are too many compares for one transaction: null; 42 keys: one transaction", async () => {
  const counts = new Map();
  const counted = etcdLockStore({
    endpoints: cluster.endpoints,
    fetch: (url, init) => {
      const path = new URL(url).pathname;
      counts.set(path, (counts.get(path) ?? 0) + 1);
      return globalThis.fetch(url, init);
    },
  });
  const many = freshKeys("64", 64);
  assert.equal(await counted.acquireMany(many, many.map((k) => `o:${k}`), LONG), null);
  assert.equal(counts.size, 0, "null is answered before any request");
  const keys = freshKeys("42", 42);
  const grants = await counted.acquireMany(keys, keys.map((k) => `o:${k}`), LONG);
  assert.equal(grants.length, 42);
  assert.deepEqual(Object.fromEntries(counts), { "/v3/lease/grant": 42, "/v3/kv/txn": 1 });
  for (const key of keys) await counted.forceRelease(key);
});

test("lock([...keys]).run through keel-lock excludes per key", async () => {
  setLockStore(store);
  const [a, b, c] = freshKeys("run", 3);
  let inside = 0;
  let most = 0;
  const section = async () => {
    inside++;
    most = Math.max(most, inside);
    await sleep(10);
    inside--;
  };
  const runs = [];
  for (let i = 0; i < 6; i++) runs.push(lock(i % 2 ? [a, b] : [b, c], LONG).run(section, { timeout: 60_000 }));
  const results = await Promise.all(runs);
  assert.ok(results.every(([ok]) => ok));
  assert.equal(most, 1, "two sets sharing key b ran together");
});
