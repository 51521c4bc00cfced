// Waiting without polling on Redis: redisLockStore's acquireOrWait / withdraw / forceRelease /
// close against a real redis-server started here (and a three-master Redis Cluster for the FIFO
// order), through ioredis 5 and 6, node-redis 5 and 4 and Valkey GLIDE. Each store opens its own
// pub/sub connection, so "several processes" are several stores on their own connections.
//
// The checks a broken store must fail are functions (fifoOrder, releaseHandsOver,
// batchedLookHandsOver) run against broken variants too: a LIFO queue, a release that only
// deletes the key, a look that tells every waiter it holds the key, and a store that looks once
// per waiter instead of once for all its waiters.
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { after, afterEach, before, describe, test } from "node:test";
import IORedis from "ioredis";
import IORedis6 from "ioredis6";
import { createClient as createNodeRedis, createCluster as createNodeRedisCluster } from "redis";
import { createClient as createNodeRedis4 } from "redis4";
import { GlideClient, GlideClusterClient } from "@valkey/valkey-glide";
import { Redis as Upstash } from "@upstash/redis";
import * as redisModule from "../../pkg/stores/redis.js";
import { redisLockStore, ACQUIRE_SCRIPT, CHECK_SCRIPT, CHECK_SHA, ENQUEUE_SCRIPT, ENQUEUE_SHA, RELEASE_SCRIPT } from "../../pkg/stores/redis.js";
import { MAX_FENCE } from "../../pkg/stores/args.js";
import { monitorServer } from "./lib/redis-monitor.js";
import { sleep, startRedisCluster, startUpstashFixture } from "./lib/servers.js";
import { useRedis } from "./lib/redis-fixture.js";
import { fenceLedger } from "./lib/sql-suite.js";

const LONG = 60_000;
const owner = (label = "o") => `${label}-${randomBytes(8).toString("hex")}`;
const uniqueKey = (label) => `keel-test:wait:${label}:${randomBytes(4).toString("hex")}`;

// keel-lock as users get it (the tarball scripts/test.d/40-stores.sh installs); KEEL_LOCK_ENTRY
// points at another entry, e.g. pkg/node/index.mjs of the source tree while iterating.
async function importKeelLock() {
  const keel = await import(process.env.KEEL_LOCK_ENTRY || "keel-lock");
  return keel.default?.lock ? keel.default : keel;
}

/** The queue of `key` (owners, oldest first), read with `admin` (a client or cluster client). */
const queueOf = (admin, store, key) => admin.lrange(`${store.keys(key).lock}:queue`, 0, -1);

/** Resolves once `count` callers are queued for `key`. */
async function queued(admin, store, key, count) {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const queue = await queueOf(admin, store, key);
    if (queue.length >= count) return queue;
    assert.ok(Date.now() < deadline, `${count} waiters never queued for ${key} (${queue.length} did)`);
    await sleep(5);
  }
}

/** Resolves once `store`'s pub/sub connection is subscribed (its first waiter subscribes it). */
async function untilSubscribed(store) {
  const deadline = Date.now() + 10_000;
  while (!store.subscribed) {
    assert.ok(Date.now() < deadline, "the store never subscribed");
    await sleep(5);
  }
}

/** Resolves once `ready()` holds (looked at every 5 ms); fails after 20 s, naming `what`. */
async function until(ready, what) {
  const deadline = Date.now() + 20_000;
  while (!ready()) {
    assert.ok(Date.now() < deadline, `no ${what} within 20 s`);
    await sleep(5);
  }
}

/** Whether MONITOR's `args` are a look: the check script, or a variant sent with EVAL (its text starts the same way). */
const isLook = (args) => {
  const command = String(args[0]).toLowerCase();
  return command === "evalsha" ? args[1] === CHECK_SHA : command === "eval" && String(args[1]).startsWith(CHECK_SCRIPT.slice(0, 20));
};

/** The waiting state of `key` left in Redis: queue and waiters keys (both must be gone). */
async function leftovers(admin, store, key) {
  const { lock } = store.keys(key);
  const names = [`${lock}:queue`, `${lock}:waiters`];
  const left = [];
  for (const name of names) if (await admin.exists(name)) left.push(name);
  return left;
}

/**
 * `stores[0]` holds the key; `waiters` callers queue one after another (each queued before the
 * next starts), spread over `stores`; a newcomer's plain acquire is refused; the holder releases.
 * Asserts that they were granted in arrival order — nobody overtakes — with rising fences, and
 * that no queue is left behind.
 */
export async function fifoOrder({ stores, admin, waiters = 12 }) {
  const key = uniqueKey("fifo");
  const holder = owner("holder");
  assert.ok(await stores[0].acquire(key, holder, LONG));
  const ledger = fenceLedger();
  const arrived = [];
  const granted = [];
  const done = [];
  for (let i = 0; i < waiters; i++) {
    const me = owner(`w${i}`);
    const store = stores[i % stores.length];
    arrived.push(me);
    done.push(
      store.acquireOrWait(key, me, LONG, 20_000, 60_000).then(async (answer) => {
        assert.ok(answer, `${me} was not granted the key`);
        ledger.take(key, answer, me);
        granted.push(me);
        await sleep(2);
        assert.equal(await store.release(key, me), true, `${me} could not release`);
      }),
    );
    await queued(admin, stores[0], key, i + 1);
  }
  assert.equal(await stores[stores.length - 1].acquire(key, owner("newcomer"), LONG), false, "a newcomer overtook the queue");
  assert.equal(await stores[0].release(key, holder), true);
  await Promise.all(done);
  const overtakes = granted.filter((o, i) => o !== arrived[i]).length;
  assert.deepEqual(granted, arrived, `granted out of arrival order (${overtakes} out of place)`);
  assert.deepEqual(await leftovers(admin, stores[0], key), [], "queue keys left behind");
  assert.equal(await stores[0].isLocked(key), false);
}

/**
 * A queued waiter whose safety-net poll is a minute away is granted the key when the holder
 * releases: the release itself hands it over (the lock holds the waiter's token once it
 * answers), and the message wakes the waiter (well before its 20 s wait ends).
 */
export async function releaseHandsOver({ holderStore, waiterStore, admin }) {
  const key = uniqueKey("handover");
  const [holder, waiter] = [owner("holder"), owner("waiter")];
  assert.ok(await holderStore.acquire(key, holder, LONG));
  const waiting = waiterStore.acquireOrWait(key, waiter, LONG, 20_000, 60_000);
  await queued(admin, waiterStore, key, 1);
  assert.equal(await holderStore.release(key, holder), true);
  const value = await admin.get(waiterStore.keys(key).lock);
  assert.ok(value !== null && value.includes(waiter), `the release did not hand the key over to the queued waiter: the lock holds ${JSON.stringify(value)}`);
  const answer = await Promise.race([waiting, sleep(15_000).then(() => "no hand-over within 15 s")]);
  assert.ok(answer && typeof answer === "object", `the release did not hand the key over: ${String(answer)}`);
  assert.ok(Number.isInteger(answer.waitedMs) && answer.waitedMs >= 0, `waitedMs ${answer.waitedMs}`);
  assert.equal(await waiterStore.release(key, waiter), true);
}

/**
 * The store's look when no hand-over message arrives. Each store in `stores` queues `perStore`
 * waiters on each of `keys` keys (held by a holder on `stores[0]`), in a known order; then every
 * store stops receiving messages (its pub/sub connection unsubscribes: the messages are lost).
 * Asserts that a single look request lists all of a store's waiters — `covers: "store"` (every
 * key in one request, a single Redis) or `"key"` (one request per key, a cluster), seen through
 * `monitors` (MONITOR connections, one per server) within `lookWithinMs` — and that once the
 * holders release, the looks alone hand every key to every waiter within `drainWithinMs`: in
 * arrival order per key, fences rising, one holder at a time, no queue left.
 */
export async function batchedLookHandsOver({ stores, admin, monitors, keys = 3, perStore = 4, pollMs = 200, covers = "store", lookWithinMs = 10_000, drainWithinMs = 40_000 }) {
  const names = Array.from({ length: keys }, (_, k) => uniqueKey(`batch${k}`));
  const holders = names.map(() => owner("holder"));
  for (let k = 0; k < keys; k++) assert.ok(await stores[0].acquire(names[k], holders[k], LONG));
  const ledger = fenceLedger();
  const arrived = names.map(() => []);
  const granted = names.map(() => []);
  const ownersOf = stores.map(() => []);
  const inside = names.map(() => 0);
  const done = [];
  let failed = null; // the first waiter's check that failed ends this check at once
  for (let k = 0; k < keys; k++) {
    for (let i = 0; i < perStore * stores.length; i++) {
      const s = i % stores.length;
      const me = owner(`k${k}w${i}`);
      arrived[k].push(me);
      ownersOf[s].push(me);
      const turn = stores[s].acquireOrWait(names[k], me, LONG, 60_000, pollMs).then(async (answer) => {
        assert.ok(answer, `${me} was not granted ${names[k]}`);
        assert.equal(++inside[k], 1, `two holders of ${names[k]}`);
        ledger.take(names[k], answer, me);
        granted[k].push(me);
        await sleep(2);
        inside[k]--;
        assert.equal(await stores[s].release(names[k], me), true, `${me} could not release`);
      });
      turn.catch((error) => (failed ??= error));
      done.push(turn);
      await queued(admin, stores[0], names[k], i + 1);
    }
  }
  // Lose every hand-over message from here on.
  const channel = `${stores[0].prefix}keel-lock:handover`;
  for (const store of stores) {
    const deadline = Date.now() + 10_000;
    while (!store.subscribed) {
      assert.ok(Date.now() < deadline, "a store never subscribed");
      await sleep(10);
    }
    // A GLIDE client takes the channels as a collection, and how long to wait for the reply.
    if (store.clientType.startsWith("glide")) await store.subscriber.unsubscribe([channel], 0);
    else await store.subscriber.unsubscribe(channel);
  }
  const listening = await Promise.all(monitors.map((m) => m.client.pubsub("NUMSUB", channel)));
  assert.equal(listening.reduce((n, [, count]) => n + Number(count), 0), 0, "a pub/sub connection still receives the hand-over messages");

  // A look request lists every waiter of a store (of one key, on a cluster).
  const expected = stores.map((_, s) =>
    covers === "store" ? [ownersOf[s]] : names.map((_, k) => arrived[k].filter((o) => ownersOf[s].includes(o))),
  );
  const deadline = Date.now() + lookWithinMs;
  for (;;) {
    const looks = monitors.flatMap((m) => m.looks);
    const missing = expected.flatMap((sets, s) =>
      sets.filter((set) => !looks.some((listed) => set.every((o) => listed.includes(o)))).map((set) => `store ${s}: ${set.length} waiters`),
    );
    if (failed) throw failed;
    if (missing.length === 0) break;
    assert.ok(Date.now() < deadline, `no single look request listed all the waiters of ${missing.join(", ")}`);
    await sleep(20);
  }

  for (let k = 0; k < keys; k++) assert.equal(await stores[0].release(names[k], holders[k]), true);
  const drained = await Promise.race([Promise.all(done).then(() => true), sleep(drainWithinMs).then(() => false)]);
  assert.ok(drained, `without messages the looks handed over only ${granted.flat().length} of ${arrived.flat().length} grants`);
  for (let k = 0; k < keys; k++) {
    assert.deepEqual(granted[k], arrived[k], `${names[k]} granted out of arrival order`);
    assert.deepEqual(await leftovers(admin, stores[0], names[k]), [], "queue keys left behind");
    assert.equal(await stores[0].isLocked(names[k]), false);
  }
}

/** Records the owners each look request (the check script) to `client`'s server lists; `stop()` ends it. */
async function watchLooks(client) {
  const looks = [];
  const monitor = await monitorServer(client.options, (args, source) => {
    if (source === "lua" || !isLook(args)) return;
    const listed = [];
    let at = 3 + Number(args[2]) + 1; // past the keys and the channel
    while (at < args.length) {
      const count = Number(args[at]);
      listed.push(...args.slice(at + 1, at + 1 + count));
      at += 1 + count;
    }
    looks.push(listed);
  });
  return { client, looks, stop: monitor.stop };
}

// A client whose EVALSHA of the script `sha` runs a variant of it instead (ioredis API).
function withScript(client, sha, script) {
  return new Proxy(client, {
    get(target, name) {
      if (name === "evalsha") {
        return (called, ...rest) => (called === sha ? target.eval(script, ...rest) : target.evalsha(called, ...rest));
      }
      const value = target[name];
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}
const withEnqueueScript = (client, script) => withScript(client, ENQUEUE_SHA, script);

// A client that sends each look as one request per waiter, the answers put together as if it
// were one (ioredis API).
function lookingPerWaiter(client) {
  return new Proxy(client, {
    get(target, name) {
      if (name === "evalsha") {
        return async (sha, numkeys, ...rest) => {
          if (sha !== CHECK_SHA) return target.evalsha(sha, numkeys, ...rest);
          const keys = rest.slice(0, numkeys);
          const [channel, ...args] = rest.slice(numkeys);
          const answers = [];
          for (let first = 0, at = 0; first < keys.length; first += 5) {
            const count = Number(args[at]);
            const answer = [];
            for (const o of args.slice(at + 1, at + 1 + count)) {
              const [[pttl, ...state]] = await target.evalsha(CHECK_SHA, 5, ...keys.slice(first, first + 5), channel, "1", o);
              answer[0] = pttl;
              answer.push(...state);
            }
            answers.push(answer);
            at += 1 + count;
          }
          return answers;
        };
      }
      const value = target[name];
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

let redis; // the server
let admin; // a plain ioredis connection for inspecting and poking the server
const server = useRedis({ admin: true, ready: (started) => ({ redis, admin } = started) });
const connections = server.closers; // closed at the end
const made = []; // stores, closed after each test

afterEach(async () => {
  for (const store of made.splice(0)) await store.close();
});

const CLIENTS = {
  "ioredis 5": async () => {
    const client = new IORedis({ port: redis.port, host: "127.0.0.1" });
    connections.push(() => client.disconnect());
    return client;
  },
  "ioredis 6": async () => {
    const Ctor = IORedis6.default ?? IORedis6;
    const client = new Ctor({ port: redis.port, host: "127.0.0.1" });
    connections.push(() => client.disconnect());
    return client;
  },
  "node-redis 5": async () => {
    const client = createNodeRedis({ url: redis.url });
    client.on("error", () => {});
    await client.connect();
    connections.push(() => client.quit());
    return client;
  },
  "node-redis 4": async () => {
    const client = createNodeRedis4({ url: redis.url });
    client.on("error", () => {});
    await client.connect();
    connections.push(() => client.quit());
    return client;
  },
  "valkey-glide": async () => {
    const client = await GlideClient.createClient({ addresses: [{ host: "127.0.0.1", port: redis.port }] });
    connections.push(() => client.close());
    return client;
  },
};

// A store on a fresh connection of `flavour` (each store opens its own pub/sub connection).
async function storeOf(flavour = "ioredis 5", options) {
  const store = redisLockStore(await CLIENTS[flavour](), options);
  made.push(store);
  return store;
}
const everyClientsStore = async () => Promise.all(Object.keys(CLIENTS).map((f) => storeOf(f)));

describe("waiting without polling (Redis): acquireOrWait / withdraw / forceRelease", () => {
  test("every script's SHA is the SHA-1 of its text", () => {
    const names = ["ACQUIRE", "RELEASE", "RELEASE_SHARED", "EXTEND", "ENQUEUE", "CHECK", "LEAVE", "FORCE_RELEASE", "ACQUIRE_SHARED"];
    for (const name of names) {
      const sha = createHash("sha1").update(redisModule[`${name}_SCRIPT`]).digest("hex");
      assert.equal(redisModule[`${name}_SHA`], sha, name);
    }
  });

  test("the store offers acquireOrWait/withdraw/forceRelease/close; a free key is taken at once, with no pub/sub connection", async () => {
    const store = await storeOf();
    for (const m of ["acquireOrWait", "withdraw", "forceRelease", "close", "quit"]) assert.equal(typeof store[m], "function", m);
    const key = uniqueKey("free");
    const me = owner();
    const answer = await store.acquireOrWait(key, me, LONG, 1_000, 50);
    assert.deepEqual(Object.keys(answer).sort(), ["fence", "waitedMs"]);
    assert.equal(answer.waitedMs, 0);
    assert.equal(store.subscriber, null, "a free key opened a pub/sub connection");
    assert.deepEqual(await leftovers(admin, store, key), []);
    assert.equal(await admin.get(store.keys(key).lock), me, "the holder's value is its owner token");
    assert.equal(await store.release(key, me), true);
    await assert.rejects(store.acquireOrWait(key, me, LONG, -1, 50), RangeError);
    await assert.rejects(store.acquireOrWait(key, me, LONG, 100, 0), RangeError);
    await assert.rejects(store.acquireOrWait("", me, LONG, 100, 50), TypeError);
    await assert.rejects(store.acquire(key, "a\0b", LONG), TypeError);
  });

  test("Upstash (REST, no pub/sub) has no acquireOrWait/withdraw — its callers poll — but has forceRelease", async () => {
    const fixture = await startUpstashFixture(redis.port);
    try {
      const store = redisLockStore(new Upstash({ url: fixture.url, token: fixture.token, retry: false }));
      assert.equal(store.acquireOrWait, undefined);
      assert.equal(store.withdraw, undefined);
      const key = uniqueKey("upstash");
      assert.ok(await store.acquire(key, owner(), LONG));
      assert.equal(await store.forceRelease(key), true);
      assert.equal(await store.isLocked(key), false);
    } finally {
      await fixture.stop();
    }
  });

  test("FIFO: 12 waiters on 5 stores (ioredis 5/6, node-redis 5/4, Valkey GLIDE) are granted in arrival order (0 overtakes); a newcomer's acquire waits its turn", { timeout: 60_000 }, async () => {
    await fifoOrder({ stores: await everyClientsStore(), admin, waiters: 12 });
  });

  test("the FIFO check catches a LIFO queue (an enqueue script that pushes on the head)", { timeout: 60_000 }, async () => {
    const lifo = ENQUEUE_SCRIPT.replace('redis.call("RPUSH"', 'redis.call("LPUSH"');
    assert.notEqual(lifo, ENQUEUE_SCRIPT);
    const stores = [];
    for (let i = 0; i < 2; i++) {
      const client = withEnqueueScript(await CLIENTS["ioredis 5"](), lifo);
      const store = redisLockStore(client, { clientType: "ioredis" });
      made.push(store);
      stores.push(store);
    }
    await assert.rejects(
      fifoOrder({ stores, admin, waiters: 4 }),
      (error) => error instanceof assert.AssertionError && /granted out of arrival order \(\d+ out of place\)/.test(error.message),
    );
  });

  test("release hands the key to the waiter (no poll needed), through every client", { timeout: 60_000 }, async () => {
    const stores = await everyClientsStore();
    for (let i = 0; i < stores.length; i++) {
      await releaseHandsOver({ holderStore: stores[i], waiterStore: stores[(i + 1) % stores.length], admin });
    }
  });

  test("the hand-over check catches a release that only deletes the key", async () => {
    const real = await storeOf();
    const broken = { ...real, release: async (key) => (await admin.del(real.keys(key).lock)) === 1 };
    await assert.rejects(
      releaseHandsOver({ holderStore: broken, waiterStore: await storeOf("node-redis 5"), admin }),
      (error) => error instanceof assert.AssertionError && /did not hand the key over/.test(error.message),
    );
  });

  test("a holder gone (expired) with callers queued: a plain acquire and an acquire-or-wait hand the key to the oldest live waiter, or take it when nobody queued still waits", async () => {
    // The scripts run here through `admin` alone, so no store's timers look at the key meanwhile.
    const store = await storeOf();
    const key = uniqueKey("holder-gone");
    const { lock } = store.keys(key);
    const names = [lock, `${lock}:fence`, `${lock}:queue`, `${lock}:waiters`, `${lock}:grant`];
    const enqueue = async (who, waitMs) => (await admin.eval(ENQUEUE_SCRIPT, 5, ...names, who, String(LONG), String(waitMs), "keel-lock:handover")).map(Number);
    const counter = async () => Number(await admin.get(names[1]));

    // A live waiter behind a holder that is gone: a newcomer's acquire answers false and the
    // waiter is handed the key, with the next fence.
    const [holder, waiter, newcomer] = [owner("holder"), owner("waiter"), owner("newcomer")];
    assert.equal((await enqueue(holder, 10_000))[0], 1);
    assert.equal((await enqueue(waiter, 10_000))[0], 0);
    const before = await counter();
    await admin.del(lock); // as at the holder's expiry
    assert.equal(await store.acquire(key, newcomer, LONG), false, "the newcomer overtook the queue");
    assert.equal(await admin.get(lock), waiter, "the waiter was not handed the key");
    assert.equal((await admin.get(names[4])).split(" ")[0], String(before + 1), "the grant record's fence");
    assert.equal(await store.release(key, waiter), true);

    // The same through the acquire-or-wait script: the newcomer queues behind the waiter handed the key.
    const [waiter2, newcomer2] = [owner("waiter2"), owner("newcomer2")];
    assert.equal((await enqueue(holder, 10_000))[0], 1);
    assert.equal((await enqueue(waiter2, 10_000))[0], 0);
    await admin.del(lock);
    assert.equal((await enqueue(newcomer2, 10_000))[0], 0, "the newcomer took the key past the queue");
    assert.equal(await admin.get(lock), "\0" + waiter2, "the waiter was not handed the key (marked: the newcomer queues)");
    assert.deepEqual(await queueOf(admin, store, key), [newcomer2]);
    await admin.del(...names);

    // Nobody queued still waits (the waiter's deadline passed): the newcomer takes the key, with
    // the next fence, and the dead waiter is dropped — through either script.
    for (const via of ["acquire", "acquireOrWait script"]) {
      const [dead, taker] = [owner("dead"), owner("taker")];
      assert.equal((await enqueue(holder, 10_000))[0], 1);
      assert.equal((await enqueue(dead, 10_000))[0], 0);
      await admin.hset(names[3], dead, `1 1 ${LONG}`); // its deadline long past
      await admin.del(lock);
      const next = (await counter()) + 1;
      const fence = via === "acquire" ? (await store.acquire(key, taker, LONG)).fence : (await enqueue(taker, 10_000))[1];
      assert.equal(fence, next, `${via}: the fence`);
      assert.equal(await admin.get(lock), taker, `${via}: the lock's value`);
      assert.deepEqual(await leftovers(admin, store, key), [], `${via}: the queue is gone`);
      assert.equal(await store.release(key, taker), true);
    }
  });

  test("a timeout while queued answers false and leaves the queue clean; the holder is unmarked", async () => {
    const store = await storeOf();
    const key = uniqueKey("timeout");
    const [holder, waiter] = [owner("holder"), owner("waiter")];
    assert.ok(await store.acquire(key, holder, LONG));
    const started = Date.now();
    assert.equal(await store.acquireOrWait(key, waiter, LONG, 300, 60_000), false);
    assert.ok(Date.now() - started >= 290, "answered false before the wait was spent");
    assert.deepEqual(await leftovers(admin, store, key), []);
    assert.equal(store.waitingCount, 0);
    assert.equal(await admin.get(store.keys(key).lock), holder, "the holder's value is still marked");
    assert.equal(await store.release(key, holder), true);
    assert.equal(await store.isLocked(key), false, "the key went to a waiter that had left");
  });

  test("withdraw while queued: the pending call answers false at once, the queue is clean, the next waiter is unaffected", async () => {
    const [a, b] = [await storeOf(), await storeOf("node-redis 5")];
    const key = uniqueKey("withdraw");
    const [holder, w1, w2] = [owner("holder"), owner("w1"), owner("w2")];
    assert.ok(await a.acquire(key, holder, LONG));
    const first = b.acquireOrWait(key, w1, LONG, 20_000, 60_000);
    await queued(admin, a, key, 1);
    const second = b.acquireOrWait(key, w2, LONG, 20_000, 60_000);
    await queued(admin, a, key, 2);
    await b.withdraw(key, w1);
    // At once: long before the wait's 20 s would end it.
    assert.equal(await Promise.race([first, sleep(10_000).then(() => "still pending")]), false);
    assert.deepEqual(await queueOf(admin, a, key), [w2]);
    assert.equal(await admin.hexists(`${a.keys(key).lock}:waiters`, w1), 0);
    assert.equal(await a.release(key, holder), true);
    assert.ok(await second, "the remaining waiter was not granted");
    // Withdraw after the grant releases and hands over: here, to nobody, so the key is free.
    await b.withdraw(key, w2);
    assert.equal(await a.isLocked(key), false);
    assert.deepEqual(await leftovers(admin, a, key), []);
  });

  test("a plain acquire that finds the lock free with callers queued changes nothing itself: the check script hands over, then it tries once more; at the fence limit it answers false", async () => {
    const store = await storeOf();
    const key = uniqueKey("queued-free");
    const { lock } = store.keys(key);
    const names = [lock, `${lock}:fence`, `${lock}:queue`, `${lock}:waiters`, `${lock}:grant`];
    const enqueue = async (who) => (await admin.eval(ENQUEUE_SCRIPT, 5, ...names, who, String(LONG), "10000", "keel-lock:handover")).map(Number);
    const scriptCalls = async () => {
      const stats = await admin.info("commandstats");
      return Number(/cmdstat_evalsha:calls=(\d+)/.exec(stats)?.[1] ?? 0) + Number(/cmdstat_eval:calls=(\d+)/.exec(stats)?.[1] ?? 0);
    };
    const [holder, waiter, newcomer] = [owner("holder"), owner("waiter"), owner("newcomer")];

    // The acquire script alone: -1, and nothing moved.
    assert.equal((await enqueue(holder))[0], 1);
    assert.equal((await enqueue(waiter))[0], 0);
    await admin.del(lock); // as at the holder's expiry
    const fence = await admin.get(names[1]);
    assert.equal(await admin.eval(ACQUIRE_SCRIPT, 4, ...names.slice(0, 4), newcomer, String(LONG)), -1);
    assert.equal(await admin.exists(lock), 0);
    assert.equal(await admin.get(names[1]), fence);
    assert.deepEqual(await queueOf(admin, store, key), [waiter]);

    // Through the store: acquire, check, acquire — the waiter holds the key, the newcomer does not.
    for (const script of [ACQUIRE_SCRIPT, CHECK_SCRIPT]) await admin.script("LOAD", script); // cached, as in steady state
    await admin.config("RESETSTAT");
    assert.equal(await store.acquire(key, newcomer, LONG), false);
    assert.equal(await scriptCalls(), 3, "script calls for an acquire past a gone holder");
    assert.equal(await admin.get(lock), waiter);
    assert.equal(await store.release(key, waiter), true);

    // The fence counter at its limit: nobody can be handed the key, and the newcomer still does
    // not overtake the queue.
    const stuck = owner("stuck");
    assert.equal((await enqueue(holder))[0], 1);
    assert.equal((await enqueue(stuck))[0], 0);
    await admin.del(lock);
    await admin.set(names[1], String(MAX_FENCE));
    assert.equal(await store.acquire(key, newcomer, LONG), false);
    assert.equal(await admin.exists(lock), 0);
    assert.equal(await admin.get(names[1]), String(MAX_FENCE), "the counter moved");
    assert.deepEqual(await queueOf(admin, store, key), [stuck]);
    await admin.del(...names);
  });

  test("a holder that crashes (never releases) is succeeded at its expiry, not at the next poll", { timeout: 30_000 }, async () => {
    const [a, b] = [await storeOf(), await storeOf("node-redis 5")];
    const key = uniqueKey("crash");
    const [holder, waiter] = [owner("holder"), owner("waiter")];
    const ledger = fenceLedger();
    // The holder's TTL: long enough for the waiter to queue behind it on a loaded machine.
    const ttl = 3_000;
    const sentAt = Date.now();
    ledger.take(key, await a.acquire(key, holder, ttl), "the holder");
    const started = Date.now();
    // The safety-net poll is 60 s away and the wait 20 s: only the look at the expiry can grant.
    const answer = await b.acquireOrWait(key, waiter, LONG, 20_000, 60_000);
    const took = Date.now() - started;
    ledger.take(key, answer, "the waiter, at the holder's expiry");
    assert.ok(took < 15_000, `granted after ${took} ms, not at the holder's expiry`);
    // The hold ran at least its TTL from the acquire's sending (one clock, whole ms).
    assert.ok(Date.now() - sentAt >= ttl - 10, `granted ${Date.now() - sentAt} ms after the holder's ${ttl} ms acquire was sent`);
    assert.ok(answer.waitedMs > 0, `waitedMs ${answer.waitedMs}: the waiter did not wait for the holder`);
    assert.equal(await a.release(key, holder), false, "the crashed holder still held the key");
    assert.equal(await b.release(key, waiter), true);
  });

  test("a waiter that crashes once granted holds the key only for its TTL", { timeout: 30_000 }, async () => {
    const store = await storeOf();
    const key = uniqueKey("gone");
    const [holder, ghost, next] = [owner("holder"), owner("ghost"), owner("next")];
    assert.ok(await store.acquire(key, holder, LONG));
    // The ghost queues from its own client, then its process "dies": both connections drop.
    const ghostClient = await CLIENTS["ioredis 5"]();
    const ghostStore = redisLockStore(ghostClient);
    // Its grant's TTL: long enough for the two checks after the release on a loaded machine.
    const ttl = 3_000;
    const ghostWait = ghostStore.acquireOrWait(key, ghost, ttl, 30_000, 60_000).catch(() => "connection closed");
    await queued(admin, store, key, 1);
    await untilSubscribed(ghostStore);
    const deadline = Date.now() + 20_000;
    ghostStore.subscriber.disconnect();
    ghostClient.disconnect();
    // Dead once Redis has dropped its pub/sub connection (a half-closed socket still receives).
    while (/ sub=1 /.test(await admin.client("LIST", "TYPE", "pubsub"))) {
      assert.ok(Date.now() < deadline, "the ghost's pub/sub connection stayed");
      await sleep(10);
    }
    assert.equal(await store.release(key, holder), true);
    assert.equal(await admin.get(store.keys(key).lock), ghost, "the release did not grant the queued waiter");
    assert.equal(await store.acquire(key, next, LONG), false);
    await sleep(ttl + 300);
    assert.equal(await store.isLocked(key), false, "the gone waiter's grant outlived its TTL");
    assert.ok(await store.acquire(key, next, LONG), "the key was not free after the gone waiter's TTL");
    assert.equal(await store.release(key, next), true);
    assert.deepEqual(await leftovers(admin, store, key), []);
    assert.equal(await ghostWait, "connection closed", "the ghost's wait settled otherwise");
    await ghostStore.close().catch(() => {});
  });

  test("a release racing the waiter's timeout: never two holders, never a lost grant (60 rounds, more until both outcomes came)", { timeout: 120_000 }, async () => {
    const [a, b] = [await storeOf(), await storeOf("node-redis 5")];
    const outcomes = { granted: 0, timedOut: 0 };
    const raced = () => outcomes.granted > 0 && outcomes.timedOut > 0;
    for (let round = 0; round < 60 || (!raced() && round < 600); round++) {
      const key = uniqueKey(`race${round}`);
      const [holder, waiter] = [owner("holder"), owner("waiter")];
      assert.ok(await a.acquire(key, holder, LONG));
      const wait = 40 + (round % 20);
      const waiting = b.acquireOrWait(key, waiter, LONG, wait, 60_000);
      await sleep(30 + (round % 7) * 5);
      const released = a.release(key, holder);
      const [answer, wasReleased] = await Promise.all([waiting, released]);
      assert.equal(wasReleased, true, `round ${round}: the holder's release failed`);
      const value = await admin.get(a.keys(key).lock);
      if (answer) {
        outcomes.granted++;
        assert.equal(value, waiter, `round ${round}: granted, but the lock holds ${JSON.stringify(value)}`);
        assert.equal(await b.release(key, waiter), true, `round ${round}`);
      } else {
        outcomes.timedOut++;
        assert.equal(value, null, `round ${round}: the waiter timed out but the key is held by ${JSON.stringify(value)} (a lost grant)`);
      }
      assert.deepEqual(await leftovers(admin, a, key), [], `round ${round}: queue keys left`);
    }
    // Both outcomes happen (otherwise the rounds did not race).
    assert.ok(raced(), JSON.stringify(outcomes));
  });

  test("lost messages: with the subscriber's messages dropped, the safety-net poll still hands over", { timeout: 30_000 }, async () => {
    const [a, b] = [await storeOf(), await storeOf()];
    const key = uniqueKey("lost");
    const [holder, waiter] = [owner("holder"), owner("waiter")];
    // What Redis runs, in the order it runs it: the waiter's looks, and the holder's requests.
    const seen = [];
    const monitor = await monitorServer(admin.options, (args, source) => {
      if (source === "lua") return;
      if (isLook(args) && args.includes(waiter)) seen.push("look");
      else if (args.includes(holder)) seen.push("holder");
      else if (String(args[0]).toLowerCase() === "ping" && args[1] === key) seen.push("marker");
    });
    try {
      assert.ok(await a.acquire(key, holder, LONG));
      const waiting = b.acquireOrWait(key, waiter, LONG, 20_000, 300);
      await queued(admin, a, key, 1);
      await untilSubscribed(b);
      // The look the store makes once subscribed has run, before the release: it found the key held.
      await until(() => seen.includes("look"), "the waiter's first look");
      const sub = b.subscriber;
      assert.ok(sub, "no pub/sub connection");
      let dropped = 0;
      const handlers = sub.listeners("message");
      sub.removeAllListeners("message");
      sub.on("message", () => dropped++);
      const releasedAt = Date.now();
      assert.equal(await a.release(key, holder), true);
      // The safety net looks every second; the wait's end, 20 s away, would be too late.
      const answer = await Promise.race([waiting, sleep(10_000).then(() => "no look handed the key over within 10 s")]);
      assert.ok(answer && typeof answer === "object", `the poll did not pick up the grant: ${String(answer)}`);
      assert.ok(Date.now() - releasedAt < 10_000);
      // Everything Redis ran so far has reached MONITOR once its marker has.
      await admin.ping(key);
      await until(() => seen.includes("marker"), "MONITOR's end marker");
      const released = seen.lastIndexOf("holder");
      assert.ok(seen.slice(released + 1).includes("look"), `granted without a look after the release: ${seen.join(" ")}`);
      await until(() => dropped >= 1, "the grant's message (so nothing was dropped)");
      for (const h of handlers) sub.on("message", h);
      assert.equal(await b.release(key, waiter), true);
    } finally {
      monitor.stop();
    }
  });

  test("lost messages: the subscriber connection is killed (CLIENT KILL); the waiter still gets the key, and the store subscribes again", { timeout: 30_000 }, async () => {
    for (const flavour of ["ioredis 5", "node-redis 5", "valkey-glide"]) {
      const [a, b] = [await storeOf(), await storeOf(flavour)];
      const key = uniqueKey("killed");
      const [holder, waiter] = [owner("holder"), owner("waiter")];
      assert.ok(await a.acquire(key, holder, LONG));
      const waiting = b.acquireOrWait(key, waiter, LONG, 20_000, 500);
      await queued(admin, a, key, 1);
      await untilSubscribed(b);
      const killed = await admin.client("KILL", "TYPE", "pubsub");
      assert.ok(killed >= 1, `${flavour}: no pub/sub connection to kill`);
      assert.equal(await a.release(key, holder), true);
      assert.ok(await waiting, `${flavour}: no hand-over after the pub/sub connection died`);
      assert.equal(await b.release(key, waiter), true);
      // The store's connection resubscribed: a second hand-over needs no poll.
      const deadline = Date.now() + 20_000;
      while (!/ sub=1 /.test(await admin.client("LIST", "TYPE", "pubsub"))) {
        assert.ok(Date.now() < deadline, `${flavour}: the store did not subscribe again`);
        await sleep(20);
      }
      await b.close();
      await a.close();
    }
  });

  test("lost messages, 24 waiters on 3 keys over 2 stores (ioredis 5, node-redis 5): one look request covers all of a store's waiters; the looks alone hand every key over, in arrival order", { timeout: 60_000 }, async () => {
    const stores = [await storeOf("ioredis 5", { prefix: "kb:" }), await storeOf("node-redis 5", { prefix: "kb:" })];
    const monitor = await watchLooks(admin);
    try {
      await batchedLookHandsOver({ stores, admin, monitors: [monitor] });
    } finally {
      monitor.stop();
    }
  });

  test("the batched-look check catches a look that tells every owner asked about that it holds the key", { timeout: 60_000 }, async () => {
    const everyone = CHECK_SCRIPT.replace("if v == owner or v == MARK .. owner then", "if v then");
    assert.notEqual(everyone, CHECK_SCRIPT);
    const stores = [];
    for (let i = 0; i < 2; i++) {
      const store = redisLockStore(withScript(await CLIENTS["ioredis 5"](), CHECK_SHA, everyone), { clientType: "ioredis", prefix: "kb:" });
      made.push(store);
      stores.push(store);
    }
    const monitor = await watchLooks(admin);
    try {
      await assert.rejects(
        batchedLookHandsOver({ stores, admin, monitors: [monitor] }),
        // A waiter told it holds the key finds another inside, or cannot release it, or was
        // handed the fence another waiter told so before it had (whichever the timing shows first).
        (error) => error instanceof assert.AssertionError && /two holders of|could not release|is not greater than the fence/.test(error.message),
      );
    } finally {
      monitor.stop();
    }
  });

  test("the batched-look check catches a store that looks once per waiter", { timeout: 60_000 }, async () => {
    const stores = [];
    for (let i = 0; i < 2; i++) {
      const store = redisLockStore(lookingPerWaiter(await CLIENTS["ioredis 5"]()), { clientType: "ioredis", prefix: "kb:" });
      made.push(store);
      stores.push(store);
    }
    const monitor = await watchLooks(admin);
    try {
      await assert.rejects(
        batchedLookHandsOver({ stores, admin, monitors: [monitor], lookWithinMs: 3_000 }),
        (error) => error instanceof assert.AssertionError && /no single look request listed all the waiters/.test(error.message),
      );
    } finally {
      monitor.stop();
    }
  });

  test("mutual exclusion: 32 waiters over 5 stores, at most one inside at a time, fences rising, queue empty afterwards", { timeout: 60_000 }, async () => {
    const stores = await everyClientsStore();
    const key = uniqueKey("mutex");
    const ledger = fenceLedger();
    let inside = 0;
    let most = 0;
    let entered = 0;
    await Promise.all(
      Array.from({ length: 32 }, async (_, i) => {
        const store = stores[i % stores.length];
        const me = owner(`m${i}`);
        const answer = await store.acquireOrWait(key, me, LONG, 30_000, 10_000);
        assert.ok(answer, `${me} was not granted`);
        ledger.take(key, answer, me);
        inside++;
        entered++;
        most = Math.max(most, inside);
        await sleep(3);
        inside--;
        assert.equal(await store.release(key, me), true);
      }),
    );
    assert.equal(entered, 32);
    assert.equal(most, 1, `${most} holders inside at once`);
    assert.deepEqual(await leftovers(admin, stores[0], key), []);
    assert.equal(await stores[0].isLocked(key), false);
  });

  test("forceRelease: a held key is freed (true; then false); a queued waiter is handed the key; the old holder's extend and release are refused", async () => {
    const [a, b] = [await storeOf(), await storeOf("node-redis 4")];
    const key = uniqueKey("force");
    const [holder, waiter] = [owner("holder"), owner("waiter")];
    const ledger = fenceLedger();
    ledger.take(key, await a.acquire(key, holder, LONG), "the holder");
    assert.equal(await a.forceRelease(key), true);
    assert.equal(await a.isLocked(key), false);
    assert.equal(await a.forceRelease(key), false, "a free key");
    assert.equal(await a.extend(key, holder, LONG), false);

    ledger.take(key, await a.acquire(key, holder, LONG), "the holder again");
    const waiting = b.acquireOrWait(key, waiter, LONG, 20_000, 60_000);
    await queued(admin, a, key, 1);
    assert.equal(await b.forceRelease(key), true);
    const answer = await Promise.race([waiting, sleep(15_000).then(() => "not handed over")]);
    ledger.take(key, answer, "the waiter, after the force-release");
    assert.equal(await admin.get(a.keys(key).lock), waiter);
    assert.equal(await a.extend(key, holder, LONG), false, "the force-released holder extended");
    assert.equal(await a.release(key, holder), false, "the force-released holder released");
    assert.equal(await b.release(key, waiter), true);
    assert.deepEqual(await leftovers(admin, a, key), []);
  });

  test("close() makes pending waits leave their queues and closes the pub/sub connection; the store subscribes again when next needed", async () => {
    const [a, b] = [await storeOf(), await storeOf()];
    const key = uniqueKey("close");
    const [holder, waiter] = [owner("holder"), owner("waiter")];
    assert.ok(await a.acquire(key, holder, LONG));
    const waiting = b.acquireOrWait(key, waiter, LONG, 20_000, 60_000);
    await queued(admin, a, key, 1);
    await untilSubscribed(b);
    assert.ok(b.subscriber);
    await b.quit();
    assert.equal(await waiting, false);
    assert.equal(b.subscriber, null);
    assert.deepEqual(await leftovers(admin, a, key), []);
    assert.equal(await a.release(key, holder), true);
    assert.equal(await a.isLocked(key), false);
    const again = b.acquireOrWait(key, waiter, LONG, 5_000, 60_000);
    assert.ok(await again);
    assert.equal(await b.release(key, waiter), true);
  });
});

describe("through keel-lock (setLockStore(redisLockStore(…)), lock(k).run(fn, { timeout }))", () => {
  // Every request a client sends, from MONITOR (commands run inside scripts are tagged "lua" there
  // and are not requests).
  async function countRequests(body) {
    const seen = [];
    const monitor = await monitorServer(admin.options, (args, source) => source !== "lua" && seen.push(args[0].toLowerCase()));
    try {
      await body();
      await admin.ping("end of count");
      const deadline = Date.now() + 20_000;
      while (!seen.includes("ping")) {
        assert.ok(Date.now() < deadline, "MONITOR never saw the end marker");
        await sleep(5);
      }
      assert.deepEqual(monitor.unparsed, [], "MONITOR lines that were not commands");
    } finally {
      monitor.stop();
    }
    return seen.slice(0, seen.lastIndexOf("ping"));
  }

  test("an uncontended run() with a timeout is two requests: the acquire-or-wait script and the release script", async () => {
    const keel = await importKeelLock();
    const store = await storeOf();
    const previous = keel.getLockStore();
    keel.setLockStore(store);
    try {
      const key = uniqueKey("uncontended");
      for (const script of [ACQUIRE_SCRIPT, ENQUEUE_SCRIPT, RELEASE_SCRIPT]) await admin.script("LOAD", script); // cached, as in steady state
      const seen = await countRequests(async () => {
        assert.deepEqual(await keel.lock(key, LONG).run(() => 42, { timeout: 5_000 }), [true, 42]);
        assert.deepEqual(await keel.lock(key, LONG).run(() => 43), [true, 43]);
      });
      assert.deepEqual(seen, ["evalsha", "evalsha", "evalsha", "evalsha"]);
      assert.equal(store.subscriber, null);
    } finally {
      keel.setLockStore(previous);
    }
  });

  test("40 callers on one key wait in the store — at most 2.5 requests per acquisition, no polling; a polling store is caught", { timeout: 60_000 }, async (t) => {
    const keel = await importKeelLock();
    const callers = 40;
    const runAll = async (store, options, names = store) => {
      const key = uniqueKey("keel-lock");
      const previous = keel.getLockStore();
      keel.setLockStore(store);
      let inside = 0;
      let most = 0;
      const fences = [];
      let seen;
      try {
        seen = await countRequests(async () => {
          const results = await Promise.all(
            Array.from({ length: callers }, () =>
              keel.lock(key, LONG).run(async ({ fence }) => {
                most = Math.max(most, ++inside);
                fences.push(fence);
                await sleep(5);
                inside--;
              }, options),
            ),
          );
          assert.deepEqual(results.map(([ran]) => ran), Array(callers).fill(true), "a caller did not get the lock");
        });
      } finally {
        keel.setLockStore(previous);
      }
      assert.equal(most, 1, `${most} callers inside at once`);
      assert.deepEqual([...fences].sort((x, y) => x - y), fences, "fences out of order");
      assert.deepEqual(await leftovers(admin, names, key), []);
      return seen;
    };
    const byCommand = (seen) => seen.reduce((m, c) => ((m[c] = (m[c] ?? 0) + 1), m), {});

    for (const name of ["ACQUIRE", "ENQUEUE", "CHECK", "LEAVE", "RELEASE"]) await admin.script("LOAD", redisModule[`${name}_SCRIPT`]);
    // The waiting stores' safety net looks once a minute: none is due during a run, however long a
    // loaded machine makes it.
    const waitingStore = await storeOf("ioredis 5", { safetyNetMs: 60_000 });
    const waiting = await runAll(waitingStore, { timeout: 30_000, retryDelay: 5_000 });
    t.diagnostic(`waiting in the store: ${waiting.length / callers} requests per acquisition ${JSON.stringify(byCommand(waiting))}`);
    assert.ok(waiting.length / callers <= 2.5, `${waiting.length} requests for ${callers} acquisitions: ${JSON.stringify(byCommand(waiting))}`);
    assert.equal(waitingStore.waitingCount, 0);
    // A short retryDelay is the polling interval of stores that cannot hand over; this store's
    // safety-net look keeps to its own interval (safetyNetMs), so the count stays the same.
    const shortDelayStore = await storeOf("ioredis 5", { safetyNetMs: 60_000 });
    const shortDelay = await runAll(shortDelayStore, { timeout: 30_000, retryDelay: 10 });
    t.diagnostic(`at retryDelay 10: ${shortDelay.length / callers} requests per acquisition ${JSON.stringify(byCommand(shortDelay))}`);
    assert.ok(shortDelay.length / callers <= 2.5, `${shortDelay.length} requests for ${callers} acquisitions at retryDelay 10: ${JSON.stringify(byCommand(shortDelay))}`);

    // The same callers on a store without acquireOrWait/withdraw: the core polls acquire every
    // retryDelay, and the count shows it.
    const polled = await storeOf();
    const { acquire, release, extend, isLocked, remainingTime } = polled;
    const polling = await runAll({ acquire, release, extend, isLocked, remainingTime }, { timeout: 30_000, retryDelay: 20 }, polled);
    t.diagnostic(`polling: ${polling.length / callers} requests per acquisition`);
    assert.ok(polling.length / callers > 2.5, `the polling store sent only ${polling.length} requests`);
  });

  test("aborting a queued run() withdraws it — the queue is clean and the key goes to the next waiter", { timeout: 30_000 }, async () => {
    const keel = await importKeelLock();
    const store = await storeOf();
    const key = uniqueKey("abort");
    const holder = owner("holder");
    assert.ok(await store.acquire(key, holder, LONG));
    const previous = keel.getLockStore();
    keel.setLockStore(store);
    try {
      const controller = new AbortController();
      const aborted = keel.lock(key, LONG).run(() => "never", { timeout: 20_000, signal: controller.signal });
      await queued(admin, store, key, 1);
      const next = keel.lock(key, LONG).run(() => "next", { timeout: 20_000 });
      await queued(admin, store, key, 2);
      controller.abort(new Error("caller gave up"));
      await assert.rejects(aborted, /caller gave up/);
      assert.equal((await queueOf(admin, store, key)).length, 1, "the aborted caller is still queued");
      assert.equal(await store.release(key, holder), true);
      assert.deepEqual(await next, [true, "next"]);
    } finally {
      keel.setLockStore(previous);
    }
    assert.deepEqual(await leftovers(admin, store, key), []);
    assert.equal(await store.isLocked(key), false);
  });
});

describe("waiting on a Redis Cluster (three masters, started here)", () => {
  let cluster;
  let clusterAdmin;
  const clients = [];

  before(async () => {
    cluster = await startRedisCluster({ masters: 3 });
    clusterAdmin = new IORedis.Cluster(cluster.nodes.map(({ host, port }) => ({ host, port })));
    await new Promise((resolve, reject) => {
      clusterAdmin.once("ready", resolve);
      clusterAdmin.once("error", reject);
    });
  });

  after(async () => {
    for (const close of clients.reverse()) await close();
    clusterAdmin?.disconnect();
    await cluster?.stop();
  });

  async function clusterStores() {
    const io = new IORedis.Cluster(cluster.nodes.map(({ host, port }) => ({ host, port })));
    await new Promise((resolve, reject) => {
      io.once("ready", resolve);
      io.once("error", reject);
    });
    clients.push(async () => io.disconnect());
    const nr = createNodeRedisCluster({ rootNodes: cluster.nodes.map(({ url }) => ({ url })) });
    nr.on("error", () => {});
    await nr.connect();
    clients.push(() => nr.close());
    const glide = await GlideClusterClient.createClient({ addresses: cluster.nodes.map(({ host, port }) => ({ host, port })) });
    clients.push(async () => glide.close());
    const stores = [redisLockStore(io, { prefix: "kw:" }), redisLockStore(nr, { prefix: "kw:" }), redisLockStore(glide, { prefix: "kw:" })];
    made.push(...stores);
    return stores;
  }

  test("FIFO on the cluster: 8 waiters on an ioredis Cluster store, a node-redis createCluster store and a GLIDE cluster store, in arrival order", { timeout: 60_000 }, async () => {
    await fifoOrder({ stores: await clusterStores(), admin: clusterAdmin, waiters: 8 });
  });

  test("on the cluster, lost messages: a look is one request per key, covering all of a store's waiters of it; the looks alone hand every key over", { timeout: 60_000 }, async () => {
    const stores = await clusterStores();
    const monitors = [];
    try {
      for (const { host, port } of cluster.nodes) {
        const node = new IORedis({ host, port });
        clients.push(async () => node.disconnect());
        monitors.push(await watchLooks(node));
      }
      await batchedLookHandsOver({ stores, admin: clusterAdmin, monitors, keys: 3, perStore: 2, covers: "key" });
    } finally {
      for (const m of monitors) m.stop();
    }
  });

  test("on the cluster, release hands over through PUBLISH (no poll) in every direction", { timeout: 30_000 }, async () => {
    const stores = await clusterStores();
    for (const holderStore of stores) {
      for (const waiterStore of stores) {
        if (holderStore !== waiterStore) await releaseHandsOver({ holderStore, waiterStore, admin: clusterAdmin });
      }
    }
  });
});
