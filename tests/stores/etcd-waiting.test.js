// etcdLockStore's waiting without polling (acquireOrWait, withdraw) against a real three-member
// etcd cluster: first come first served, a plain acquire never passes a queued waiter, a release
// wakes only the next waiter (counted on the wire, per store), the requests an acquisition costs,
// a holder's expiry hands the key to the head waiter, a waiter's timeout and withdraw leave the
// queue (and the one behind moves up), a waiter whose lease lapsed loses its place rather than
// taking the key, metadata goes with the hand-over, lock().run({ timeout }) excludes, and with
// the leader SIGKILLed under them the waiters' watches move on and the queue still hands over.
// Every wait for a state has a deadline of 20 s; holds that must not run out last 30 s.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { lock, setLockStore } from "keel-lock";
import { etcdLockStore } from "../../pkg/stores/etcd.js";
import { etcdCall, sleep, startEtcdCluster, until } from "./lib/servers.js";

let cluster;
const LONG = 30_000;
let keyNo = 0;
const freshKey = (name) => `etcd-wait:${process.pid}:${++keyNo}:${name}`;

before(async () => {
  cluster = await startEtcdCluster();
});
after(async () => {
  await cluster?.stop();
});

/** A store whose requests are counted by path (`/v3/kv/txn`, `/v3/watch`, …). */
function countedStore(options = {}) {
  const counts = new Map();
  const fetch = (url, init) => {
    const path = new URL(url).pathname;
    counts.set(path, (counts.get(path) ?? 0) + 1);
    return globalThis.fetch(url, init);
  };
  const store = etcdLockStore({ endpoints: cluster.endpoints, fetch, safetyNetMs: 60_000, ...options });
  const total = () => [...counts.values()].reduce((a, b) => a + b, 0);
  return { store, counts, total };
}


const waitingOn = (store, key, n) => until(`${n} waiting on ${key}`, async () => (await store.inspect(key)).waiting === n);

describe("acquireOrWait", () => {
  test("first come first served; a plain acquire never passes a queued waiter; fences increase", async () => {
    const store = etcdLockStore({ endpoints: cluster.endpoints });
    const key = freshKey("fifo");
    const first = await store.acquire(key, "holder", LONG);
    assert.ok(first && first.fence > 0);
    const order = [];
    const waiters = [];
    for (let i = 0; i < 5; i++) {
      const owner = `w${i}`;
      waiters.push(store.acquireOrWait(key, owner, LONG, LONG, 50).then((grant) => (order.push(owner), grant)));
      await waitingOn(store, key, i + 1);
    }
    assert.equal(await store.acquire(key, "newcomer", LONG), false, "a plain acquire passed the queue");
    assert.equal(await store.release(key, "holder"), true);
    let last = first.fence;
    for (let i = 0; i < 5; i++) {
      const grant = await waiters[i];
      assert.ok(grant && grant.fence > last, `w${i} got ${JSON.stringify(grant)}`);
      assert.ok(Number.isInteger(grant.waitedMs) && grant.waitedMs >= 0);
      last = grant.fence;
      assert.deepEqual(order, Array.from({ length: i + 1 }, (_, j) => `w${j}`));
      assert.equal(await store.release(key, `w${i}`), true);
    }
    assert.equal((await store.inspect(key)).waiting, 0);
    assert.equal(await store.isLocked(key), false);
  });

  test("a free key is taken at once, with waitMs 0 as with more", async () => {
    const { store, total } = countedStore();
    const key = freshKey("free");
    const grant = await store.acquireOrWait(key, "a", LONG, 5_000, 50);
    assert.equal(grant.waitedMs, 0);
    assert.equal(total(), 2, "lease grant + one transaction");
    assert.equal(await store.acquireOrWait(key, "b", LONG, 0, 50), false);
    assert.equal(await store.release(key, "a"), true);
    const again = await store.acquireOrWait(key, "b", LONG, 0, 50);
    assert.ok(again.fence > grant.fence);
    assert.equal(await store.release(key, "b"), true);
  });

  test("a release wakes only the next waiter; the requests per acquisition, on the wire", async () => {
    const key = freshKey("wake");
    // A 90 s TTL: no keep-alive of a waiting lease (every 30 s) falls inside the count.
    const TTL = 90_000;
    const holder = countedStore();
    await holder.store.acquire(key, "holder", TTL);
    const stores = [];
    const grants = [];
    for (let i = 0; i < 4; i++) {
      const s = countedStore();
      stores.push(s);
      grants.push(s.store.acquireOrWait(key, `w${i}`, TTL, LONG, 50));
      await waitingOn(holder.store, key, i + 1);
    }
    // Queued: each waiter has sent a lease grant and one transaction, and opened its watch.
    await until("every waiter watching", () => stores.every((s) => s.counts.get("/v3/watch") === 1));
    const queued = stores.map((s) => s.total());
    for (const n of queued) assert.equal(n, 3, `a queued waiter sent ${n} requests (grant, transaction, watch)`);
    await holder.store.release(key, "holder");
    await grants[0];
    // w0 took the key: a transaction and a keep-alive. Its queue key's deletion, in the same
    // revision as the lock key's creation, tells w1 it is first in line: it goes on watching,
    // with no request; nobody further back hears of it.
    assert.equal(stores[0].total() - queued[0], 2, "the grantee: one transaction and one keep-alive");
    assert.deepEqual(
      stores.slice(1).map((s) => s.total()),
      queued.slice(1),
      "a waiter whose turn it was not sent a request",
    );
    for (let i = 0; i < 4; i++) {
      await grants[i];
      await stores[i].store.release(key, `w${i}`);
    }
    // Each waiter, whole: a lease grant, three transactions (join, take, release), one keep-alive
    // (the TTL runs from the hand-over), the lease revoke after its release, and one watch.
    await until("the releases' revokes sent", () => stores.every((s) => s.counts.get("/v3/lease/revoke") === 1));
    for (const [i, s] of stores.entries()) {
      assert.deepEqual(
        Object.fromEntries([...s.counts].sort()),
        { "/v3/kv/txn": 3, "/v3/lease/grant": 1, "/v3/lease/keepalive": 1, "/v3/lease/revoke": 1, "/v3/watch": 1 },
        `w${i}`,
      );
    }
    const byPath = {};
    for (const s of stores) for (const [path, n] of s.counts) byPath[path] = (byPath[path] ?? 0) + n;
    const requests = Object.entries(byPath).reduce((n, [path, count]) => n + (path === "/v3/watch" ? 0 : count), 0) / 4;
    console.log(`# etcd: 4 waited acquisitions (release included) sent ${JSON.stringify(byPath)}: ${requests} requests each, besides watches`);
    assert.equal(requests, 6);
  });

  test("a holder's expiry hands the key to the head waiter, no release needed", async () => {
    const store = etcdLockStore({ endpoints: cluster.endpoints });
    const key = freshKey("expiry");
    await store.acquire(key, "gone", LONG);
    const waited = store.acquireOrWait(key, "next", LONG, LONG, 50);
    await waitingOn(store, key, 1);
    // Shortened just before it is waited out: a 1 s lease (etcd's minimum applies).
    assert.equal(await store.extend(key, "gone", 1_000), true);
    const grant = await waited;
    assert.ok(grant && grant.fence > 0);
    assert.equal(await store.release(key, "gone"), false);
    assert.equal(await store.release(key, "next"), true);
  });

  test("a waiter's timeout leaves the queue, and the one behind moves up", async () => {
    const store = etcdLockStore({ endpoints: cluster.endpoints });
    const key = freshKey("timeout");
    await store.acquire(key, "holder", LONG);
    const started = Date.now();
    const short = store.acquireOrWait(key, "short", LONG, 1_000, 50);
    await waitingOn(store, key, 1);
    const patient = store.acquireOrWait(key, "patient", LONG, LONG, 50);
    assert.equal(await short, false);
    assert.ok(Date.now() - started >= 1_000, "answered false before waitMs was spent");
    await waitingOn(store, key, 1);
    await store.release(key, "holder");
    const grant = await patient;
    assert.ok(grant && grant.fence > 0);
    assert.equal(await store.release(key, "patient"), true);
    assert.equal((await store.inspect(key)).waiting, 0);
  });

  test("withdraw leaves the queue at once; a grant that raced it is given back", async () => {
    const store = etcdLockStore({ endpoints: cluster.endpoints });
    const key = freshKey("withdraw");
    await store.acquire(key, "holder", LONG);
    const waited = store.acquireOrWait(key, "w", LONG, LONG, 50);
    await waitingOn(store, key, 1);
    await store.withdraw(key, "w");
    assert.equal(await waited, false);
    assert.equal((await store.inspect(key)).waiting, 0);
    await store.release(key, "holder");
    assert.equal(await store.isLocked(key), false);
    // Handed over, then withdrawn: the key is freed (withdraw of a caller not waiting releases).
    const held = await store.acquireOrWait(key, "late", LONG, LONG, 50);
    assert.ok(held);
    await store.withdraw(key, "late");
    assert.equal(await store.isLocked(key), false);
  });

  test("a withdraw that comes before the waiter has queued still leaves", async () => {
    const store = etcdLockStore({ endpoints: cluster.endpoints });
    const key = freshKey("withdraw-early");
    await store.acquire(key, "holder", LONG);
    const started = Date.now();
    const waited = store.acquireOrWait(key, "w", LONG, 60_000, 50);
    await store.withdraw(key, "w"); // before its lease grant has even been answered
    assert.equal(await waited, false);
    assert.ok(Date.now() - started < 30_000, "the waiter stayed until its waitMs");
    assert.equal((await store.inspect(key)).waiting, 0);
    // And a free key taken as the withdraw came is given back.
    await store.release(key, "holder");
    const raced = store.acquireOrWait(key, "x", LONG, 60_000, 50);
    await store.withdraw(key, "x");
    assert.equal(await raced, false);
    await until("the raced grant given back", async () => !(await store.isLocked(key)));
  });

  test("a waiter whose lease lapsed loses its place and never takes the key", async () => {
    const store = etcdLockStore({ endpoints: cluster.endpoints });
    const key = freshKey("lapsed");
    await store.acquire(key, "holder", LONG);
    const waited = store.acquireOrWait(key, "w", LONG, LONG, 50);
    await waitingOn(store, key, 1);
    // The waiter's lease, as if it had lapsed: revoked behind the store's back.
    const queue = store.keys(key).queue;
    const range = await etcdCall(cluster.endpoints[0], "/v3/kv/range", {
      key: Buffer.from(queue).toString("base64"),
      range_end: Buffer.from(queue.slice(0, -1) + "0").toString("base64"),
    });
    await etcdCall(cluster.endpoints[0], "/v3/lease/revoke", { ID: range.kvs[0].lease });
    await store.release(key, "holder");
    assert.equal(await waited, false);
    assert.equal(await store.isLocked(key), false);
  });

  test("metadata goes with the hand-over", async () => {
    const store = etcdLockStore({ endpoints: cluster.endpoints });
    const key = freshKey("meta");
    await store.acquire(key, "holder", LONG, "first");
    const waited = store.acquireOrWait(key, "w", LONG, LONG, 50, "second");
    await waitingOn(store, key, 1);
    await store.release(key, "holder");
    const grant = await waited;
    const info = await store.inspect(key);
    assert.deepEqual(info.holders.map((h) => [h.metadata, h.fence]), [["second", grant.fence]]);
    await store.release(key, "w");
  });

  test("arguments are checked", async () => {
    const store = etcdLockStore({ endpoints: cluster.endpoints });
    await assert.rejects(store.acquireOrWait("k", "o", 1000, -1, 50), RangeError);
    await assert.rejects(store.acquireOrWait("k", "o", 1000, 10, 0), RangeError);
    await assert.rejects(store.acquireOrWait("", "o", 1000, 10, 50), TypeError);
    assert.throws(() => etcdLockStore({ endpoints: cluster.endpoints, safetyNetMs: 0 }), RangeError);
  });
});

describe("lock().run({ timeout }) on etcd", () => {
  test("callers waiting by hand-over exclude one another and all get their turn", async () => {
    const stores = Array.from({ length: 3 }, () => etcdLockStore({ endpoints: cluster.endpoints }));
    const key = freshKey("run");
    let inside = 0;
    let most = 0;
    let done = 0;
    const runs = [];
    for (let i = 0; i < 12; i++) {
      setLockStore(stores[i % stores.length]);
      runs.push(
        lock(key, LONG).run(
          async () => {
            inside++;
            most = Math.max(most, inside);
            await sleep(10);
            inside--;
            done++;
          },
          { timeout: 60_000 },
        ),
      );
    }
    const results = await Promise.all(runs);
    assert.ok(results.every(([ok]) => ok === true));
    assert.equal(done, 12);
    assert.equal(most, 1);
  });
});

describe("the leader SIGKILLed while callers wait", () => {
  test("the waiters' watches move to another member and the queue still hands over, in order", async () => {
    // The waiting store's current endpoint is the leader, the member that dies.
    const leader = await cluster.leader();
    const first = cluster.endpoints[leader];
    const rest = cluster.endpoints.filter((u) => u !== first);
    const waiting = etcdLockStore({ endpoints: [first, ...rest], timeoutMs: 1_000 });
    const other = etcdLockStore({ endpoints: rest, timeoutMs: 1_000 });
    const key = freshKey("failover");
    const held = await other.acquire(key, "holder", LONG);
    const order = [];
    const grants = [];
    for (let i = 0; i < 3; i++) {
      grants.push(waiting.acquireOrWait(key, `w${i}`, LONG, 90_000, 50).then((grant) => (order.push(`w${i}`), grant)));
      await waitingOn(other, key, i + 1);
    }
    await cluster.members[leader].kill("SIGKILL");
    // Released once the two left have a leader; each step judged by state, retried through the election.
    const gone = async (store, owner, fence) => {
      await until(
        `${owner}'s hold released`,
        async () => {
          await store.release(key, owner).catch(() => false);
          const info = await store.inspect(key).catch(() => null);
          return info !== null && !info.holders.some((h) => h.fence === fence);
        },
        30_000,
      );
    };
    await gone(other, "holder", held.fence);
    let last = held.fence;
    for (let i = 0; i < 3; i++) {
      const grant = await grants[i];
      assert.ok(grant && grant.fence > last, `w${i} got ${JSON.stringify(grant)}`);
      last = grant.fence;
      await gone(other, `w${i}`, grant.fence);
    }
    assert.deepEqual(order, ["w0", "w1", "w2"]);
    assert.equal((await other.inspect(key)).waiting, 0);

    cluster.members[leader].start();
    await until("three members agree on a leader", async () => {
      try {
        await cluster.leader({ timeoutMs: 2_000 });
        return true;
      } catch {
        return false;
      }
    });
  });
});
