// etcdLockStore's shared holds (acquireShared, acquireSharedOrWait) against a real three-member
// etcd cluster: permits within the limit (also when many stores race for them), a second limit
// refused, shared and exclusive holds exclude each other, release / extend / isLocked /
// remainingTime / inspect / forceRelease over both kinds, the one FIFO queue (nobody passes a
// queued waiter; one writer's release lets several readers in), and semaphore() / readLock() /
// writeLock() through keel-lock. Every wait for a state has a 20 s deadline; holds that must not
// run out last 30 s.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { readLock, semaphore, setLockStore, writeLock } from "keel-lock";
import { etcdLockStore } from "../../pkg/stores/etcd.js";
import { sleep, startEtcdCluster, until } from "./lib/servers.js";

let cluster;
let store;
const LONG = 30_000;
let keyNo = 0;
const freshKey = (name) => `etcd-shared:${process.pid}:${++keyNo}:${name}`;

before(async () => {
  cluster = await startEtcdCluster();
  store = etcdLockStore({ endpoints: cluster.endpoints });
});
after(async () => {
  await cluster?.stop();
});

const waitingOn = (key, n) => until(`${n} waiting on ${key}`, async () => (await store.inspect(key)).waiting === n);

describe("acquireShared", () => {
  test("permits within the limit; another limit is refused; shared and exclusive exclude", async () => {
    const key = freshKey("permits");
    const a = await store.acquireShared(key, "a", LONG, 2, 3, "permit a");
    const b = await store.acquireShared(key, "b", LONG, 1, 3);
    assert.ok(a.fence > 0 && b.fence > a.fence);
    assert.equal(await store.acquireShared(key, "c", LONG, 1, 3), false, "a fourth permit of three");
    assert.deepEqual(await store.acquireShared(key, "c", LONG, 1, 5), { heldLimit: 3 });
    assert.equal(await store.acquire(key, "w", LONG), false, "an exclusive hold beside shared ones");
    assert.equal(await store.isLocked(key), true);
    const info = await store.inspect(key);
    assert.deepEqual(info.holders.map((h) => [h.metadata, h.fence]), [["permit a", a.fence], [null, b.fence]]);
    assert.equal(info.waiting, 0);
    // extend and release act on the owner's shared hold; remainingTime is the last to expire.
    assert.equal(await store.extend(key, "b", 60_000), true);
    assert.ok((await store.remainingTime(key)) > 30_000);
    assert.equal(await store.extend(key, "nobody", LONG), false);
    assert.equal(await store.release(key, "a"), true);
    assert.equal(await store.release(key, "a"), false);
    const c = await store.acquireShared(key, "c", LONG, 2, 3);
    assert.ok(c.fence > b.fence);
    assert.equal(await store.forceRelease(key), true);
    assert.equal(await store.isLocked(key), false);
    assert.equal(await store.remainingTime(key), null);
    // Held exclusively: a share is refused.
    const w = await store.acquire(key, "w", LONG);
    assert.ok(w.fence > c.fence);
    assert.equal(await store.acquireShared(key, "r", LONG, 1, 3), false);
    assert.equal(await store.release(key, "w"), true);
  });

  test("many stores racing for 3 permits: never more than 3 granted", async () => {
    const key = freshKey("race");
    const stores = Array.from({ length: 8 }, () => etcdLockStore({ endpoints: cluster.endpoints }));
    const answers = await Promise.all(stores.map((s, i) => s.acquireShared(key, `o${i}`, LONG, 1, 3)));
    const granted = answers.filter((a) => a && "fence" in a);
    assert.ok(granted.length >= 1 && granted.length <= 3, `${granted.length} permits of 3`);
    assert.equal((await store.inspect(key)).holders.length, granted.length);
    await store.forceRelease(key);
  });
});

describe("acquireSharedOrWait: the one FIFO queue", () => {
  test("a single permit that would fit does not pass a waiter queued for two", async () => {
    const key = freshKey("heavy");
    await store.acquireShared(key, "a", LONG, 1, 3);
    await store.acquireShared(key, "b", LONG, 1, 3);
    const heavy = store.acquireSharedOrWait(key, "heavy", LONG, 2, 3, LONG, 50);
    await waitingOn(key, 1);
    assert.equal(await store.acquireShared(key, "newcomer", LONG, 1, 3), false);
    assert.equal(await store.release(key, "a"), true);
    const grant = await heavy;
    assert.ok(grant && grant.fence > 0 && grant.waitedMs >= 0);
    assert.deepEqual(await store.acquireSharedOrWait(key, "x", LONG, 1, 7, LONG, 50), { heldLimit: 3 });
    await store.forceRelease(key);
  });

  test("readers behind a queued writer wait; the writer's release lets them all in", async () => {
    const key = freshKey("rw");
    const READ = 4_294_967_295;
    await store.acquireShared(key, "r0", LONG, 1, READ);
    const writer = store.acquireOrWait(key, "w", LONG, LONG, 50);
    await waitingOn(key, 1);
    const readers = [];
    for (let i = 1; i <= 3; i++) {
      readers.push(store.acquireSharedOrWait(key, `r${i}`, LONG, 1, READ, LONG, 50));
      await waitingOn(key, i + 1);
    }
    assert.equal(await store.acquireShared(key, "late", LONG, 1, READ), false, "a reader passed the queued writer");
    await store.release(key, "r0");
    const w = await writer;
    assert.ok(w && w.fence > 0);
    assert.equal(await store.release(key, "w"), true);
    const grants = await Promise.all(readers);
    for (const g of grants) assert.ok(g && g.fence > w.fence);
    assert.equal((await store.inspect(key)).holders.length, 3);
    await store.forceRelease(key);
  });
});

describe("semaphore / readLock / writeLock through keel-lock", () => {
  test("at most `limit` inside a semaphore; writers alone, readers together", async () => {
    setLockStore(store);
    const key = freshKey("sem");
    let inside = 0;
    let most = 0;
    const section = async () => {
      inside++;
      most = Math.max(most, inside);
      await sleep(20);
      inside--;
    };
    const runs = Array.from({ length: 8 }, () => semaphore(key, 2, LONG).run(section, { timeout: 60_000 }));
    assert.ok((await Promise.all(runs)).every(([ok]) => ok));
    assert.ok(most <= 2 && most >= 1, `${most} inside a semaphore of 2`);

    const rw = freshKey("rw-lock");
    let readers = 0;
    let writers = 0;
    let bad = false;
    const read = () =>
      readLock(rw, LONG).run(
        async () => {
          readers++;
          if (writers > 0) bad = true;
          await sleep(10);
          readers--;
        },
        { timeout: 60_000 },
      );
    const write = () =>
      writeLock(rw, LONG).run(
        async () => {
          writers++;
          if (writers > 1 || readers > 0) bad = true;
          await sleep(10);
          writers--;
        },
        { timeout: 60_000 },
      );
    const all = await Promise.all([read(), write(), read(), read(), write(), read()]);
    assert.ok(all.every(([ok]) => ok));
    assert.equal(bad, false, "a writer overlapped another hold");
  });
});
