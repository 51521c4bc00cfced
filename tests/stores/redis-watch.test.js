// watch(key, onChange) on Redis: redisLockStore (pkg/stores from the source tree) on a real
// redis-server and on a real three-master Redis Cluster started here, through ioredis 5 and 6,
// node-redis 5 and 4 and Valkey GLIDE (and their cluster clients). Every change of a key's
// exclusive holder made by a store operation — a grant (acquire, acquire-many, the enqueue
// script's take, a hand-over by a release, a force-release, the look at the holder's expiry) and
// an end (release, force-release, the withdraw of a handed key) — reaches every watcher once, in
// Redis's order, with its fence and metadata and no owner token; expiry, extend and shared holds
// are not reported; nothing after stop(); a killed pub/sub connection is told as null (GLIDE
// resubscribes without a word: no null), and reports go on.
// Unwatched keys cost nothing: the acquire and release scripts run the commands they ran before.
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { after, before, describe, test } from "node:test";
import IORedis from "ioredis";
import IORedis6 from "ioredis6";
import { createCluster as createNodeRedisCluster } from "redis";
import { createCluster as createNodeRedisCluster4 } from "redis4";
import { GlideClusterClient } from "@valkey/valkey-glide";
import { redisLockStore, WATCH_SCRIPT, WATCH_SHA } from "../../pkg/stores/redis.js";
import { watchReport, WATCH_LEASE_MS } from "../../pkg/stores/redis-watch.js";
import { useRedis } from "./lib/redis-fixture.js";
import { ioredisCluster, nodeRedisCluster, sleep, startRedisCluster } from "./lib/servers.js";

const LONG = 60_000;
const tag = () => randomBytes(4).toString("hex");
// Owner tokens long and random enough that finding one in a report cannot be chance.
const owner = (label = "o") => `${label}-${randomBytes(12).toString("hex")}`;

/** A watcher's reports, as they came. */
function recorder() {
  const reports = [];
  const onChange = (change) => reports.push(change);
  return { reports, onChange };
}

/** Resolves once `reports` holds `count` reports (or rejects after `ms`). */
async function until(reports, count, ms = 20_000) {
  const deadline = Date.now() + ms;
  while (reports.length < count) {
    assert.ok(Date.now() < deadline, `${count} reports never came: ${JSON.stringify(reports)}`);
    await sleep(5);
  }
  await sleep(50); // anything extra shows now
}

const grant = (fence, metadata = null) => ({ fence, held: true, metadata });
const end = (fence) => ({ fence, held: false });
// A report without its remainingMs (checked on its own).
const plain = (r) => (r === null ? null : r.held ? { fence: r.fence, held: true, metadata: r.metadata } : { fence: r.fence, held: r.held });

/** Asserts the reports are `expected` (remainingMs aside), each grant within `ttl`, no owner anywhere. */
function sameReports(reports, expected, owners, ttl = LONG) {
  assert.deepEqual(reports.map(plain), expected);
  const text = JSON.stringify(reports);
  for (const o of owners) assert.ok(!text.includes(o), `an owner token is in ${text}`);
  for (const r of reports) {
    if (r === null) continue;
    assert.deepEqual(Object.keys(r).sort(), r.held ? ["fence", "held", "metadata", "remainingMs"] : ["fence", "held"]);
    if (r.held) assert.ok(r.remainingMs > 0 && r.remainingMs <= ttl, `remainingMs ${r.remainingMs} of a ${ttl} ms hold`);
  }
}

/** Resolves once `count` live waiters are queued for `key`. */
async function waitingFor(store, key, count) {
  const deadline = Date.now() + 10_000;
  for (;;) {
    if ((await store.inspect(key)).waiting >= count) return;
    assert.ok(Date.now() < deadline, `${count} waiters never queued for ${key}`);
    await sleep(5);
  }
}

test("WATCH_SHA is the SHA-1 of WATCH_SCRIPT", () => {
  assert.equal(WATCH_SHA, createHash("sha1").update(WATCH_SCRIPT).digest("hex"));
});

test("a watch message reads as its report; anything else is no report", () => {
  assert.deepEqual(watchReport("+17 30000"), { fence: 17, held: true, metadata: null, remainingMs: 30000 });
  assert.deepEqual(watchReport("+17 30000 "), { fence: 17, held: true, metadata: "", remainingMs: 30000 });
  assert.deepEqual(watchReport("+9007199254740991 5 a b\0c"), { fence: 9007199254740991, held: true, metadata: "a b\0c", remainingMs: 5 });
  assert.deepEqual(watchReport("-3"), { fence: 3, held: false });
  for (const bad of ["", "+", "+1", "+x 10", "+0 10", "-0", "-", "-1.5", "+9007199254740992 1", "+1 -5", "*1 2", "[1,2]"]) {
    assert.equal(watchReport(bad), null, JSON.stringify(bad));
  }
});

// The cases every client runs. `env()` answers { admin (a plain connection for the key space:
// a client or cluster client), storeOf(options) (a store on a new connection of this client) }.
function registerCases(env, label) {
  const key = (what) => `watch:${label}:${what}:${tag()}`;

  test(`${label}: grant, hand-over to a queued waiter, release, force-release, withdraw of a handed key, acquire-many and the enqueue's take: each reported once, in order, to every watcher`, { timeout: 30_000 }, async () => {
    const [s1, s2, s3] = [await env().storeOf(), await env().storeOf(), await env().storeOf()];
    const k = key("order");
    const watchers = [recorder(), recorder(), recorder()];
    // two watches in one store and one in another
    const stops = [await s1.watch(k, watchers[0].onChange), await s1.watch(k, watchers[1].onChange), await s2.watch(k, watchers[2].onChange)];
    const owners = [owner("h0"), owner("w1"), owner("w2"), owner("m3"), owner("t4")];
    const expected = [];
    const g0 = await s3.acquire(k, owners[0], LONG, "holder 0");
    expected.push(grant(g0.fence, "holder 0"));
    const waiting1 = s2.acquireOrWait(k, owners[1], LONG, 20_000, 5_000, "waiter 1");
    await waitingFor(s3, k, 1);
    assert.equal(await s3.release(k, owners[0]), true);
    const g1 = await waiting1;
    expected.push(end(g0.fence), grant(g1.fence, "waiter 1"));
    const waiting2 = s1.acquireOrWait(k, owners[2], LONG, 20_000, 5_000);
    await waitingFor(s3, k, 1);
    assert.equal(await s3.forceRelease(k), true);
    const g2 = await waiting2;
    expected.push(end(g1.fence), grant(g2.fence));
    await s1.withdraw(k, owners[2]);
    expected.push(end(g2.fence));
    const [g3] = await s3.acquireMany([k], [owners[3]], LONG, ["many 3"]);
    expected.push(grant(g3.fence, "many 3"));
    assert.equal(await s3.release(k, owners[3]), true);
    expected.push(end(g3.fence));
    const g4 = await s2.acquireOrWait(k, owners[4], LONG, 1_000, 500, "");
    assert.equal(g4.waitedMs, 0, "taken at once by the enqueue script");
    expected.push(grant(g4.fence, ""));
    assert.equal(await s2.release(k, owners[4]), true);
    expected.push(end(g4.fence));
    for (const { reports } of watchers) {
      await until(reports, expected.length);
      sameReports(reports, expected, owners);
    }
    const fences = expected.filter((r) => r.held).map((r) => r.fence);
    assert.deepEqual([...fences].sort((a, b) => a - b), fences, "grants in fence order");
    for (const stop of stops) await stop();
  });

  test(`${label}: expiry and extend are not reported; the look at the holder's expiry reports the waiter's grant`, { timeout: 30_000 }, async () => {
    const [s1, s2] = [await env().storeOf(), await env().storeOf()];
    const k = key("expiry");
    const { reports, onChange } = recorder();
    const stop = await s1.watch(k, onChange);
    const [a, b, c] = [owner("a"), owner("b"), owner("c")];
    // a is held for its extend (on a loaded machine too), which gives it 300 ms; b's TTL leaves c
    // room to queue behind it.
    const ga = await s1.acquire(k, a, LONG, "short");
    assert.equal(await s1.extend(k, a, 300), true);
    await sleep(450); // a's hold expired, unreported
    const gb = await s2.acquire(k, b, 1_000, "crashes");
    const waiting = s1.acquireOrWait(k, c, LONG, 20_000, 10_000, "after b");
    const gc = await waiting; // handed over by the look at b's expiry
    await until(reports, 3);
    sameReports(reports, [grant(ga.fence, "short"), grant(gb.fence, "crashes"), grant(gc.fence, "after b")], [a, b, c], LONG);
    assert.equal(await s1.release(k, c), true);
    await until(reports, 4);
    assert.deepEqual(reports.slice(3).map(plain), [end(gc.fence)]);
    await stop();
  });

  test(`${label}: shared holds are not reported; an exclusive waiter handed the key by the last reader is`, { timeout: 30_000 }, async () => {
    const [s1, s2] = [await env().storeOf(), await env().storeOf()];
    const k = key("shared");
    const { reports, onChange } = recorder();
    const stop = await s2.watch(k, onChange);
    const [r1, r2, w, r3] = [owner("r1"), owner("r2"), owner("w"), owner("r3")];
    assert.ok(await s1.acquireShared(k, r1, LONG, 1, 4, "reader 1"));
    assert.ok(await s1.acquireShared(k, r2, LONG, 1, 4));
    const waiting = s2.acquireOrWait(k, w, LONG, 20_000, 5_000, "writer");
    await waitingFor(s1, k, 1);
    const reading = s1.acquireSharedOrWait(k, r3, LONG, 1, 4, 20_000, 5_000, "reader 3");
    await waitingFor(s1, k, 2);
    assert.equal(await s1.release(k, r1), true);
    assert.equal(await s1.release(k, r2), true); // the writer is handed the key
    const gw = await waiting;
    assert.equal(await s2.release(k, w), true); // reader 3 is handed it, shared
    const g3 = await reading;
    assert.ok(g3.fence > gw.fence);
    assert.equal(await s1.release(k, r3), true);
    await until(reports, 2);
    sameReports(reports, [grant(gw.fence, "writer"), end(gw.fence)], [r1, r2, w, r3]);
    await stop();
  });

  test(`${label}: stop() stops that watcher only, at once and for good; a second stop() does nothing; the last stop leaves nothing in Redis`, { timeout: 30_000 }, async () => {
    const s1 = await env().storeOf();
    const s2 = await env().storeOf();
    const k = key("stop");
    const [first, second] = [recorder(), recorder()];
    const stopFirst = await s1.watch(k, first.onChange);
    const stopSecond = await s1.watch(k, second.onChange);
    const o = owner();
    const g1 = await s2.acquire(k, o, LONG);
    await until(first.reports, 1);
    await stopFirst();
    assert.equal(await s2.release(k, o), true);
    await until(second.reports, 2);
    assert.deepEqual(first.reports.map(plain), [grant(g1.fence)], "nothing after stop()");
    assert.deepEqual(second.reports.map(plain), [grant(g1.fence), end(g1.fence)]);
    await stopFirst();
    await stopSecond();
    await stopSecond();
    assert.ok(await s2.acquire(k, o, LONG));
    assert.equal(await s2.release(k, o), true);
    await sleep(100);
    assert.equal(second.reports.length, 2, "nothing after the last stop()");
    const { lock } = s1.keys(k);
    assert.equal(await env().admin.exists(`${lock}:watch`), 0, "the watch set is gone");
    assert.equal(await env().admin.exists(`${lock}:waiters`), 0, "and the waiters hash that told the scripts");
    // watched again after stopping: reported again
    const again = recorder();
    const stopAgain = await s1.watch(k, again.onChange);
    const g3 = await s2.acquire(k, o, LONG, "again");
    await until(again.reports, 1);
    assert.deepEqual(again.reports.map(plain), [grant(g3.fence, "again")]);
    await stopAgain();
    assert.equal(await s2.release(k, o), true);
  });

  test(`${label}: a key held when the watch begins: its release is reported`, { timeout: 30_000 }, async () => {
    const [s1, s2] = [await env().storeOf(), await env().storeOf()];
    const k = key("held-before");
    const o = owner();
    const g = await s1.acquire(k, o, LONG, "before");
    const { reports, onChange } = recorder();
    const stop = await s2.watch(k, onChange);
    assert.equal(await s1.release(k, o), true);
    await until(reports, 1);
    sameReports(reports, [end(g.fence)], [o]);
    await stop();
  });

  test(`${label}: bad arguments reject with TypeError and watch nothing`, async () => {
    const store = await env().storeOf();
    for (const bad of ["", null, 42, undefined]) await assert.rejects(store.watch(bad, () => {}), TypeError, `key ${bad}`);
    for (const bad of [null, undefined, "f", {}, 1]) await assert.rejects(store.watch(key("bad"), bad), TypeError, `onChange ${bad}`);
  });
}

describe("watch on a standalone Redis", () => {
  let redis; // the server
  let admin; // a plain ioredis connection for inspecting and poking the server
  const server = useRedis({ admin: true, upstash: true, ready: (started) => ({ redis, admin } = started) });
  const closers = server.closers;
  const CLIENTS = server.clients;
  const storeWith = async (name, options) => {
    const { client, close } = await CLIENTS[name]();
    const store = redisLockStore(client, { prefix: "kw:", ...options });
    closers.push(async () => {
      await store.close?.();
      await close();
    });
    return store;
  };

  for (const name of ["ioredis 5", "ioredis 6", "node-redis 5", "node-redis 4", "valkey-glide"]) {
    registerCases(() => ({ admin, storeOf: (options) => storeWith(name, options) }), name);

    if (name === "valkey-glide") {
      // GLIDE resubscribes by itself and says nothing of it: no null comes; reports go on once
      // the connection is subscribed again (both channels: the hand-over one and the key's).
      test(`${name}: the pub/sub connection killed (CLIENT KILL TYPE pubsub): GLIDE resubscribes, no null comes, and reports go on`, { timeout: 30_000 }, async () => {
        const [s1, s2] = [await storeWith(name), await storeWith(name)];
        const k = `watch:${name}:killed:${tag()}`;
        const watcher = recorder();
        const stop = await s1.watch(k, watcher.onChange);
        const o = owner();
        const g1 = await s2.acquire(k, o, LONG);
        await until(watcher.reports, 1);
        const killed = await admin.client("KILL", "TYPE", "pubsub");
        assert.ok(killed >= 1, "no pub/sub connection to kill");
        const deadline = Date.now() + 20_000;
        while (!/ sub=2 /.test(await admin.client("LIST", "TYPE", "pubsub"))) {
          assert.ok(Date.now() < deadline, "the store's GLIDE client did not subscribe again");
          await sleep(20);
        }
        assert.equal(await s2.release(k, o), true);
        const g2 = await s2.acquire(k, o, LONG);
        await until(watcher.reports, 3);
        assert.deepEqual(watcher.reports.map(plain), [grant(g1.fence), end(g1.fence), grant(g2.fence)]);
        await stop();
        assert.equal(await s2.release(k, o), true);
      });
      continue;
    }
    test(`${name}: the pub/sub connection killed (CLIENT KILL TYPE pubsub): every watcher is told null once it is back, and reports go on`, { timeout: 30_000 }, async () => {
      const [s1, s2] = [await storeWith(name), await storeWith(name)];
      const k = `watch:${name}:killed:${tag()}`;
      const [first, second] = [recorder(), recorder()];
      const stops = [await s1.watch(k, first.onChange), await s1.watch(k, second.onChange)];
      const o = owner();
      const g1 = await s2.acquire(k, o, LONG);
      await until(first.reports, 1);
      const killed = await admin.client("KILL", "TYPE", "pubsub");
      assert.ok(killed >= 1, "no pub/sub connection to kill");
      await until(first.reports, 2);
      await until(second.reports, 2);
      assert.equal(await s2.release(k, o), true);
      const g2 = await s2.acquire(k, o, LONG);
      for (const { reports } of [first, second]) {
        await until(reports, 4);
        assert.deepEqual(reports.map(plain), [grant(g1.fence), null, end(g1.fence), grant(g2.fence)]);
      }
      for (const stop of stops) await stop();
      assert.equal(await s2.release(k, o), true);
    });
  }

  test("an unwatched key costs nothing: acquire and release run the commands they ran before, and publish nothing; watched, they publish", async () => {
    const store = await storeWith("ioredis 5");
    const count = async (op) => {
      await admin.config("RESETSTAT");
      await op();
      const counts = {};
      for (const m of (await admin.info("commandstats")).matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
        if (!["info", "config"].includes(m[1].split("|")[0])) counts[m[1]] = Number(m[2]);
      }
      return counts;
    };
    const k = `watch:cost:${tag()}`;
    const o = owner();
    await store.acquire(k, o, LONG); // the scripts cached
    await store.release(k, o);
    const other = await storeWith("ioredis 5");
    const stopOther = await other.watch(`watch:cost:other:${tag()}`, () => {}); // another key watched
    for (const metadata of [undefined, "who: me"]) {
      assert.deepEqual(await count(() => store.acquire(k, o, LONG, metadata)), { evalsha: 1, set: 1, exists: 1, incr: 1 }, `acquire, metadata ${metadata}`);
      assert.deepEqual(await count(() => store.release(k, o)), { evalsha: 1, get: 1, del: 1 }, `release, metadata ${metadata}`);
    }
    const { reports, onChange } = recorder();
    const stop = await store.watch(k, onChange);
    const watchedAcquire = await count(() => store.acquire(k, o, LONG));
    assert.equal(watchedAcquire.publish, 1, JSON.stringify(watchedAcquire));
    const watchedRelease = await count(() => store.release(k, o));
    assert.equal(watchedRelease.publish, 1, JSON.stringify(watchedRelease));
    await until(reports, 2);
    await stop();
    await stopOther();
    assert.deepEqual(await count(() => store.acquire(k, o, LONG)), { evalsha: 1, set: 1, exists: 1, incr: 1 }, "after stop()");
    await store.release(k, o);
  });

  test("a watching store that dies leaves the key published on for its lease only: the watch set expires with it", async () => {
    const store = await storeWith("ioredis 5");
    const k = `watch:lapse:${tag()}`;
    const { lock } = store.keys(k);
    const watchName = `${lock}:watch`;
    // a store that watched for 2 s and was never heard of again
    assert.equal(await admin.eval(WATCH_SCRIPT, 3, lock, `${lock}:waiters`, watchName, "gone", "2000"), 0);
    const o = owner();
    await store.acquire(k, o, LONG);
    assert.equal((await admin.get(lock))[0], "\0", "a watched key's holder is marked");
    await store.release(k, o);
    await sleep(2_300); // past its lease
    assert.equal(await admin.exists(watchName), 0, "the watch set expired");
    assert.equal(await admin.exists(`${lock}:waiters`), 0, "and the waiters hash that told the scripts");
    await store.acquire(k, o, LONG);
    assert.equal(await admin.get(lock), o, "an unwatched key's holder is not marked");
    await store.release(k, o);
    assert.ok(WATCH_LEASE_MS >= 10_000, "a lease long enough for a renewal to be retried");
  });

  test("a renewal that finds the store's entry gone tells its watchers to look again", { timeout: 30_000 }, async (t) => {
    t.mock.timers.enable({ apis: ["setTimeout"] });
    const store = await storeWith("ioredis 5");
    const k = `watch:renew:${tag()}`;
    const { reports, onChange } = recorder();
    const stop = await store.watch(k, onChange);
    const watchName = `${store.keys(k).lock}:watch`;
    assert.equal(await admin.zcard(watchName), 1);
    await admin.del(watchName); // lost: evicted, flushed, or lapsed while Redis was out of reach
    t.mock.timers.tick(WATCH_LEASE_MS);
    t.mock.timers.reset();
    await until(reports, 1);
    assert.deepEqual(reports, [null]);
    assert.equal(await admin.zcard(watchName), 1, "back in the watch set");
    await stop();
  });

  test("@upstash/redis has no watch (no pub/sub over REST): observe polls", async () => {
    const store = await storeWith("@upstash/redis (REST)");
    assert.equal(store.watch, undefined);
  });

  test("a watch of a closed client rejects with LockStoreClosedError; closing the client ends a live watch", { timeout: 30_000 }, async () => {
    const { client } = await CLIENTS["ioredis 5"]();
    const store = redisLockStore(client, { prefix: "kw:" });
    const k = `watch:closed:${tag()}`;
    const { reports, onChange } = recorder();
    const stop = await store.watch(k, onChange);
    assert.equal(store.subscribed, true);
    client.disconnect();
    const deadline = Date.now() + 20_000;
    while (store.subscriber !== null) {
      assert.ok(Date.now() < deadline, "the pub/sub connection is not closed");
      await sleep(5);
    }
    const other = new IORedis({ port: redis.port, host: "127.0.0.1" });
    const o = owner();
    await redisLockStore(other, { prefix: "kw:" }).acquire(k, o, LONG);
    await sleep(100);
    assert.deepEqual(reports, []);
    other.disconnect();
    await stop();
    await assert.rejects(store.watch(k, onChange), { name: "LockStoreClosedError" });
  });

  test("observe (keel-lock, installed) on a store that watches: every leader is seen at once, without polling", { timeout: 30_000 }, async () => {
    const { lock, observe, setLockStore } = await import("keel-lock");
    const store = await storeWith("ioredis 5", { prefix: `kwo:${tag()}:` });
    let inspected = 0;
    const counted = Object.create(store, { inspect: { value: (k) => (inspected++, store.inspect(k)) } });
    setLockStore(counted);
    const k = `leader:${tag()}`;
    const controller = new AbortController();
    const seen = [];
    const watching = (async () => {
      for await (const leader of observe(k, { signal: controller.signal, intervalMs: 60_000 })) seen.push(leader && leader.metadata);
    })();
    // observe's first look comes once its watch is live.
    for (const deadline = Date.now() + 20_000; seen.length === 0; ) {
      assert.ok(Date.now() < deadline, "observe never looked");
      await sleep(5);
    }
    for (const name of ["a", "b", "c"]) await lock(k, 10_000).run(() => sleep(20), { metadata: name });
    const deadline = Date.now() + 20_000;
    while (seen.at(-1) !== null || seen.filter((s) => s !== null).length < 3) {
      if (Date.now() > deadline) break;
      await sleep(10);
    }
    controller.abort();
    await watching;
    // Every leader, in order, though observe's interval is a minute. A release and the next
    // run's grant told together read as a hand-over (no null between); the end is told.
    assert.deepEqual(seen.filter((s) => s !== null), ["a", "b", "c"], `seen ${JSON.stringify(seen)}`);
    assert.equal(seen[0], null);
    assert.equal(seen.at(-1), null, `seen ${JSON.stringify(seen)}`);
    for (let i = 1; i < seen.length; i++) assert.notEqual(seen[i], seen[i - 1], `seen ${JSON.stringify(seen)}`);
    assert.ok(inspected <= 2, `observe polled inspect ${inspected} times`);
  });
});

describe("watch on a Redis Cluster (three masters)", () => {
  let cluster;
  let admin;
  const closers = [];
  before(async () => {
    cluster = await startRedisCluster({ masters: 3 });
    admin = await ioredisCluster(IORedis, cluster);
  });
  after(async () => {
    for (const close of closers.reverse()) await close();
    admin?.disconnect();
    await cluster?.stop();
  });

  const CLIENTS = {
    "ioredis 5 Cluster": () => ioredisCluster(IORedis, cluster),
    "ioredis 6 Cluster": () => ioredisCluster(IORedis6, cluster),
    "node-redis 5 createCluster": () => nodeRedisCluster(createNodeRedisCluster, cluster),
    "node-redis 4 createCluster": () => nodeRedisCluster(createNodeRedisCluster4, cluster),
    "valkey-glide GlideClusterClient": () =>
      GlideClusterClient.createClient({ addresses: cluster.nodes.map(({ host, port }) => ({ host, port })) }),
  };

  for (const [name, open] of Object.entries(CLIENTS)) {
    const storeOf = async (options) => {
      const client = await open();
      const store = redisLockStore(client, { prefix: "kwc:", ...options });
      closers.push(async () => {
        await store.close?.();
        if (typeof client.disconnect === "function") await client.disconnect();
        else if (typeof client.quit === "function") await client.quit();
        else client.close();
      });
      return store;
    };
    registerCases(() => ({ admin, storeOf }), name);

    test(`${name}: keys spread over the masters are each reported to the one store watching them all`, { timeout: 30_000 }, async () => {
      const [watcher, actor] = [await storeOf(), await storeOf()];
      const keys = Array.from({ length: 6 }, (_, i) => `watch:${name}:spread:${i}:${tag()}`);
      const byKey = new Map(keys.map((k) => [k, recorder()]));
      const stops = [];
      for (const k of keys) stops.push(await watcher.watch(k, byKey.get(k).onChange));
      const o = owner();
      const fences = [];
      for (const [i, k] of keys.entries()) fences.push((await actor.acquire(k, o, LONG, `key ${i}`)).fence);
      for (const k of keys) assert.equal(await actor.release(k, o), true);
      for (const [i, k] of keys.entries()) {
        const { reports } = byKey.get(k);
        await until(reports, 2);
        sameReports(reports, [grant(fences[i], `key ${i}`), end(fences[i])], [o]);
      }
      for (const stop of stops) await stop();
    });
  }
});
