// Several keys at once, `lock([k1, k2, …])` from the installed package, over redisLockStore on a
// real redis-server and on a real three-master Redis Cluster started here, with the keys in
// different slots (on different masters): overlapping sets taken in opposite orders by several
// clients all finish, never two holders of a key; a refusal leaves none of the keys held.
// Then the store's own step, `store.acquireMany` (pkg/stores from the source tree), through every
// client: all or nothing against exclusive, shared, expired and queued holds, checked in Redis
// itself; races of overlapping sets; one script per call; on the cluster, hash-tagged keys in
// one step and keys in different slots answered null without a request.
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { after, before, describe, test } from "node:test";
import IORedis from "ioredis";
import IORedis6 from "ioredis6";
import { createCluster as createNodeRedisCluster } from "redis";
import { createCluster as createNodeRedisCluster4 } from "redis4";
import { lock, setLockStore } from "keel-lock";
import { redisLockStore } from "keel-lock/redis";
import {
  ACQUIRE_MANY_SCRIPT,
  ACQUIRE_MANY_SHA,
  CHECK_SCRIPT,
  CHECK_SHA,
  ENQUEUE_SCRIPT,
  redisLockKeys,
  redisLockStore as sourceStore,
} from "../../pkg/stores/redis.js";
import { keySlot } from "../../pkg/stores/redis-clients.js";
import { useRedis } from "./lib/redis-fixture.js";
import { monitorServer } from "./lib/redis-monitor.js";
import { ioredisCluster as ioredisClusterOf, nodeRedisCluster as nodeRedisClusterOf, sleep, startRedisCluster } from "./lib/servers.js";

const tag = () => randomBytes(4).toString("hex");

/** Runs the shared cases against `stores()` (several stores over separate connections). */
function registerCases(stores) {
  test("overlapping sets in opposite orders from several clients all finish, one holder per key at a time", { timeout: 60_000 }, async () => {
    const t = tag();
    const [a, b, c] = ["a", "b", "c"].map((k) => `multi:${k}:${t}`);
    const sets = [[a, b], [b, a], [c, b, a], [a, c], [b, c]];
    const inside = new Set();
    const callers = Array.from({ length: 10 }, async (_, i) => {
      const keys = sets[i % sets.length];
      const store = stores()[i % stores().length];
      for (let round = 0; round < 3; round++) {
        setLockStore(store);
        const handle = lock(keys, 10_000);
        const [ran] = await handle.run(
          async () => {
            for (const k of keys) {
              assert.ok(!inside.has(k), `two holders of ${k} at once`);
              inside.add(k);
            }
            await sleep(2);
            for (const k of keys) inside.delete(k);
          },
          { timeout: 30_000, retryDelay: 10 },
        );
        assert.equal(ran, true, `${keys} timed out`);
      }
    });
    await Promise.all(callers);
    setLockStore(stores()[0]);
    for (const k of [a, b, c]) assert.equal(await lock(k).isLocked(), false, `${k} left held`);
  });

  test("a refusal leaves none of the keys held; once free, all are taken with a fence each", async () => {
    const [s1, s2] = stores();
    const t = tag();
    const keys = ["w", "x", "y", "z"].map((k) => `multi:${k}:${t}`);
    setLockStore(s1);
    const blocker = lock(keys[2]);
    assert.equal(await blocker.acquire(), true);
    setLockStore(s2);
    const all = lock([...keys].reverse());
    assert.equal(await all.acquire({ timeout: 100, retryDelay: 10 }), false);
    for (const k of [keys[0], keys[1], keys[3]]) assert.equal(await lock(k).isLocked(), false, `${k} left held`);
    assert.equal(await blocker.release(), true);
    assert.equal(await all.acquire(), true);
    const fences = all.fences;
    assert.deepEqual(Object.keys(fences).sort(), [...keys].sort());
    assert.ok(fences[keys[2]] > blocker.fence || blocker.fence === null, "the blocked key's fence rises");
    assert.equal(await all.release(), true);
    for (const k of keys) assert.equal(await lock(k).isLocked(), false);
  });
}

describe("lock([...keys]) on a standalone Redis", () => {
  const server = useRedis();
  const clients = [];
  let stores;
  before(() => {
    server.closers.push(async () => {
      for (const store of stores ?? []) await store.close?.();
      for (const client of clients) client.disconnect();
    });
    stores = Array.from({ length: 3 }, () => {
      const client = new IORedis({ port: server.redis.port, host: "127.0.0.1" });
      clients.push(client);
      return redisLockStore(client);
    });
  });
  registerCases(() => stores);
});

describe("lock([...keys]) on a Redis Cluster (three masters), the keys in different slots", () => {
  let cluster;
  const clients = [];
  let stores;
  before(async () => {
    cluster = await startRedisCluster({ masters: 3 });
    stores = [];
    for (let i = 0; i < 2; i++) {
      const io = new IORedis.Cluster(cluster.nodes.map(({ host, port }) => ({ host, port })));
      await new Promise((resolve, reject) => {
        io.once("ready", resolve);
        io.once("error", reject);
      });
      clients.push(io);
      stores.push(redisLockStore(io));
    }
  });
  after(async () => {
    for (const store of stores ?? []) await store.close?.();
    for (const client of clients) client.disconnect();
    await cluster?.stop();
  });

  test("the test keys spread over several masters (each key's names stay in its own slot)", async () => {
    const slots = new Set();
    for (const k of ["a", "b", "c", "w", "x", "y", "z"]) {
      slots.add(await clients[0].cluster("KEYSLOT", stores[0].keys(`multi:${k}:0000`).lock));
    }
    assert.ok(slots.size >= 3, `the keys share slots: ${[...slots]}`);
  });

  registerCases(() => stores);
});

// ---------------------------------------------------------------------------------------------
// store.acquireMany: the store's one step for a set of keys.

const sha1 = (text) => createHash("sha1").update(text).digest("hex");
const ownersOf = (keys, t) => keys.map((_, i) => `owner:${t}:${i}`);
const MAX_FENCE = Number.MAX_SAFE_INTEGER;

// What Redis holds for each of `keys` under `store`'s names: the lock name's type and value (a
// string's owner token, a sorted set's members and scores), the fence counter, the queue.
async function snapshot(admin, store, keys) {
  const state = {};
  for (const key of keys) {
    const { lock, fence } = store.keys(key);
    const type = await admin.type(lock);
    const value = type === "string" ? await admin.get(lock) : type === "zset" ? await admin.zrange(lock, 0, -1, "WITHSCORES") : null;
    state[key] = { type, value, fence: await admin.get(fence), queue: await admin.lrange(`${lock}:queue`, 0, -1) };
  }
  return state;
}

// Scripts run (EVALSHA and EVAL calls, failed ones included) on `servers` since their RESETSTAT.
async function resetStats(servers) {
  for (const server of servers) await server.config("RESETSTAT");
}
async function scriptCalls(servers) {
  let calls = 0;
  for (const server of servers) {
    const info = await server.info("commandstats");
    for (const m of info.matchAll(/^cmdstat_(?:evalsha|eval):calls=(\d+)/gm)) calls += Number(m[1]);
  }
  return calls;
}

// Each key's owner token and PTTL, read in Redis.
async function heldBy(admin, store, keys) {
  return Promise.all(keys.map(async (key) => [await admin.get(store.keys(key).lock), await admin.pttl(store.keys(key).lock)]));
}

test("ACQUIRE_MANY_SHA is the SHA-1 of ACQUIRE_MANY_SCRIPT", () => {
  assert.equal(ACQUIRE_MANY_SHA, sha1(ACQUIRE_MANY_SCRIPT));
});

test("with hashTags, a key with a tag of its own is named by it: one slot per tag, names still one-to-one", () => {
  assert.deepEqual(redisLockKeys("{acct:1}:debit", "lock:", { hashTags: true }), {
    lock: "lock:{acct:1}{%7Bacct:1%7D:debit}",
    fence: "lock:{acct:1}{%7Bacct:1%7D:debit}:fence",
  });
  // keys without a tag of their own (none, empty, unclosed) keep the usual names
  for (const key of ["plain", "{}", "a{}b", "{", "}{", "}x{"]) {
    assert.deepEqual(redisLockKeys(key, "p:", { hashTags: true }), redisLockKeys(key, "p:"), key);
  }
  assert.equal(keySlot(redisLockKeys("{acct:1}:debit", "", { hashTags: true }).lock), keySlot("{acct:1}:balance"));
  assert.equal(keySlot(redisLockKeys("x{a{b}y", "", { hashTags: true }).lock), keySlot("{a{b}"));
  assert.throws(() => redisLockKeys("k", "", { hashTags: "yes" }), TypeError);
  assert.throws(() => sourceStore(new IORedis({ lazyConnect: true }), { hashTags: 1 }), TypeError);
  const seen = new Map();
  const keys = ["x", "{x}", "{x}{x}", "{x}:fence", "{x}}", "{x}%7D", "%7Bx%7D", "{x%}", "{{x}", "a{x}", "{x}a", "{x}{", "{", "}", "{}", "ünï{κλειδί}"];
  for (const prefix of ["", "p:", "{p}", "}{"]) {
    for (const key of keys) {
      const { lock, fence } = redisLockKeys(key, prefix, { hashTags: true });
      for (const name of [lock, fence, `${lock}:queue`, `${lock}:waiters`, `${lock}:grant`]) {
        const who = `${JSON.stringify(prefix)} + ${JSON.stringify(key)}`;
        assert.ok(!seen.has(name), `${name} is used by ${seen.get(name)} and ${who}`);
        seen.set(name, who);
        // the lock's names share the slot of the key's own tag, or of the whole escaped key
        assert.equal(keySlot(name), keySlot(lock), name);
      }
    }
  }
});

describe("store.acquireMany on a standalone Redis", () => {
  const server = useRedis({ admin: true, upstash: true });
  let admin; // a plain ioredis connection for inspecting and poking the server
  let s; // an ioredis 5 store, for the cases that do not depend on the client
  const closers = server.closers;

  before(async () => {
    ({ admin } = server);
    s = sourceStore((await connect("ioredis 5")).client);
  });

  const CLIENTS = server.clients;

  async function connect(name) {
    const opened = await CLIENTS[name]();
    closers.push(opened.close);
    return opened;
  }

  for (const name of Object.keys(CLIENTS)) {
    test(`${name}: every key free: all granted in one script, fences from each key's counter, each released by its own owner`, async () => {
      const store = sourceStore((await connect(name)).client);
      assert.equal(typeof store.acquireMany, "function");
      const t = tag();
      const keys = ["a", "b", "c"].map((k) => `many:${k}:${t}`);
      const owners = ownersOf(keys, t);
      const before = await store.acquire(keys[1], "before", 10_000);
      assert.equal(await store.release(keys[1], "before"), true);
      await admin.script("LOAD", ACQUIRE_MANY_SCRIPT);
      await resetStats([admin]);
      const got = await store.acquireMany(keys, owners, 60_000);
      assert.equal(await scriptCalls([admin]), 1, "one script for the set");
      assert.deepEqual(got, [{ fence: 1 }, { fence: before.fence + 1 }, { fence: 1 }]);
      for (const [i, [value, pttl]] of (await heldBy(admin, store, keys)).entries()) {
        assert.equal(value, owners[i], `${keys[i]} held by its owner`);
        assert.ok(pttl > 50_000 && pttl <= 60_000, `${keys[i]} has the TTL asked for: ${pttl}`);
      }
      assert.equal(await store.release(keys[0], owners[1]), false, "another key's owner does not release it");
      for (let i = 0; i < keys.length; i++) assert.equal(await store.release(keys[i], owners[i]), true);
      for (const key of keys) assert.equal(await store.isLocked(key), false);
    });

    test(`${name}: one key held: false and nothing changed; NOSCRIPT falls back to EVAL`, async () => {
      const store = sourceStore((await connect(name)).client);
      const t = tag();
      const keys = ["a", "b", "c", "d"].map((k) => `many:${k}:${t}`);
      const owners = ownersOf(keys, t);
      await store.acquire(keys[0], "earlier", 10_000); // a counter that exists, for the check below
      await store.release(keys[0], "earlier");
      const blocker = await store.acquire(keys[2], "blocker", 10_000);
      assert.ok(blocker);
      const before = await snapshot(admin, store, keys);
      assert.equal(await store.acquireMany(keys, owners, 10_000), false);
      assert.deepEqual(await snapshot(admin, store, keys), before, "a refused set changes nothing");
      await admin.script("FLUSH");
      assert.equal(await store.acquireMany(keys, owners, 10_000), false);
      assert.deepEqual(await snapshot(admin, store, keys), before);
      assert.equal(await store.release(keys[2], "blocker"), true);
      await admin.script("FLUSH");
      const got = await store.acquireMany(keys, owners, 10_000);
      assert.deepEqual(got, [{ fence: 2 }, { fence: 1 }, { fence: blocker.fence + 1 }, { fence: 1 }]);
      for (let i = 0; i < keys.length; i++) assert.equal(await store.release(keys[i], owners[i]), true);
    });
  }

  test("a key held shared (a read lock, a semaphore's permit) is not free: false, nothing changed", async () => {
    const t = tag();
    const keys = [`shared:a:${t}`, `shared:b:${t}`];
    const owners = ownersOf(keys, t);
    const permit = await s.acquireShared(keys[1], "reader", 10_000, 1, 5);
    assert.ok(permit && permit.fence >= 1);
    const before = await snapshot(admin, s, keys);
    assert.equal(before[keys[1]].type, "zset");
    assert.equal(await s.acquireMany(keys, owners, 10_000), false);
    assert.deepEqual(await snapshot(admin, s, keys), before);
    assert.equal(await s.release(keys[1], "reader"), true);
    const got = await s.acquireMany(keys, owners, 10_000);
    assert.ok(got && got[1].fence > permit.fence, "the fence rises past the shared hold's");
    assert.deepEqual((await heldBy(admin, s, keys)).map(([value]) => value), owners);
    for (let i = 0; i < keys.length; i++) assert.equal(await s.release(keys[i], owners[i]), true);
  });

  test("an expired hold counts as free: its key is granted with a greater fence and the new TTL", async () => {
    const t = tag();
    const keys = [`expired:a:${t}`, `expired:b:${t}`];
    const owners = ownersOf(keys, t);
    const old = await s.acquire(keys[0], "stale", 50);
    await sleep(120);
    const got = await s.acquireMany(keys, owners, 30_000);
    assert.ok(got, "the expired hold did not block the set");
    assert.ok(got[0].fence > old.fence);
    const held = await heldBy(admin, s, keys);
    assert.deepEqual(held.map(([value]) => value), owners);
    for (const [, pttl] of held) assert.ok(pttl > 20_000 && pttl <= 30_000, `TTL ${pttl}`);
    assert.equal(await s.release(keys[0], "stale"), false, "the expired holder releases nothing");
    for (let i = 0; i < keys.length; i++) assert.equal(await s.release(keys[i], owners[i]), true);
  });

  test("fences rise per key across acquire, acquireMany, release and expiry", async () => {
    const t = tag();
    const keys = [`rise:a:${t}`, `rise:b:${t}`, `rise:c:${t}`];
    let last = [0, 0, 0];
    for (let round = 0; round < 5; round++) {
      // a single acquire of one key in between
      const one = await s.acquire(keys[round % 3], `single:${round}`, round === 4 ? 40 : 10_000);
      assert.ok(one.fence > last[round % 3]);
      last[round % 3] = one.fence;
      if (round === 4) await sleep(100);
      else await s.release(keys[round % 3], `single:${round}`);
      const owners = keys.map((_, i) => `set:${round}:${i}`);
      const got = await s.acquireMany(keys, owners, 10_000);
      assert.ok(got, `round ${round}`);
      for (let i = 0; i < 3; i++) {
        assert.ok(got[i].fence > last[i], `${keys[i]}: ${got[i].fence} after ${last[i]}`);
        last[i] = got[i].fence;
        assert.equal(await s.release(keys[i], owners[i]), true);
      }
    }
  });

  test("64 keys in one script; 65 are refused", async () => {
    const t = tag();
    const keys = Array.from({ length: 64 }, (_, i) => `sixty-four:${t}:${String(i).padStart(2, "0")}`);
    const owners = ownersOf(keys, t);
    await resetStats([admin]);
    const got = await s.acquireMany(keys, owners, 10_000);
    assert.ok(got && got.length === 64 && got.every((g) => g.fence === 1));
    assert.ok((await scriptCalls([admin])) <= 2, "EVALSHA, or EVAL after NOSCRIPT");
    assert.deepEqual((await heldBy(admin, s, keys)).map(([value]) => value), owners);
    for (let i = 0; i < keys.length; i++) assert.equal(await s.release(keys[i], owners[i]), true);
    const more = [...keys, `sixty-four:${t}:z`];
    await assert.rejects(s.acquireMany(more, ownersOf(more, t), 10_000), RangeError);
  });

  test("a waiter queued by acquireOrWait is not overtaken, even once the key it waits for is free", async () => {
    const t = tag();
    const keys = [`queued:a:${t}`, `queued:b:${t}`];
    const owners = ownersOf(keys, t);
    const holder = await s.acquire(keys[1], "holder", 60_000);
    // The waiter's store looks only when told to (its holder's expiry is a minute away), and
    // once when it has subscribed: MONITOR shows when Redis has run that look.
    let looked = false;
    const monitor = await monitorServer(admin.options, (args, source) => {
      const command = String(args[0]).toLowerCase();
      const look = command === "evalsha" ? args[1] === CHECK_SHA : command === "eval" && String(args[1]).startsWith(CHECK_SCRIPT.slice(0, 20));
      if (source !== "lua" && look && args.includes("waiter")) looked = true;
    });
    const waiter = sourceStore((await connect("ioredis 5")).client, { safetyNetMs: 600_000 });
    const waiting = waiter.acquireOrWait(keys[1], "waiter", 10_000, 30_000, 600_000);
    const { lock } = s.keys(keys[1]);
    try {
      const deadline = Date.now() + 20_000;
      while (!waiter.subscribed || !looked || (await admin.lrange(`${lock}:queue`, 0, -1)).length === 0) {
        assert.ok(Date.now() < deadline, "the waiter never queued, subscribed and looked");
        await sleep(5);
      }
    } finally {
      monitor.stop();
    }
    assert.equal(await s.acquireMany(keys, owners, 10_000), false);
    // The holder's hold ends with nobody looking, as its TTL running out would: the key is free
    // and the waiter still queued, so the check script would hand it to the waiter.
    await admin.del(lock);
    const before = await snapshot(admin, s, keys);
    assert.deepEqual(before[keys[1]], { type: "none", value: null, fence: String(holder.fence), queue: ["waiter"] });
    assert.equal(await s.acquireMany(keys, owners, 10_000), false, "the set overtook a queued waiter");
    assert.deepEqual(await snapshot(admin, s, keys), before, "a refused set changes nothing");
    // A plain acquire hands the key to the waiter, and it holds it.
    assert.equal(await s.acquire(keys[1], "newcomer", 10_000), false);
    const got = await waiting;
    assert.ok(got && got.fence === holder.fence + 1, `the waiter was handed the key: ${JSON.stringify(got)}`);
    assert.equal(await admin.get(lock), "waiter");
    assert.equal(await s.acquireMany(keys, owners, 10_000), false);
    assert.equal(await s.isLocked(keys[0]), false);
    assert.equal(await waiter.release(keys[1], "waiter"), true);
    const all = await s.acquireMany(keys, owners, 10_000);
    assert.ok(all && all[1].fence === got.fence + 1);
    for (let i = 0; i < keys.length; i++) assert.equal(await s.release(keys[i], owners[i]), true);
    await waiter.close();
  });

  test("waiters past their deadline do not block the set: their queue is dropped with the grant", async () => {
    const t = tag();
    const keys = [`ghost:a:${t}`, `ghost:b:${t}`];
    const owners = ownersOf(keys, t);
    const holder = await s.acquire(keys[1], "holder", 60_000);
    const { lock } = s.keys(keys[1]);
    const names = [lock, `${lock}:fence`, `${lock}:queue`, `${lock}:waiters`, `${lock}:grant`];
    // A waiter that queued for 1 ms and then died (its process gone, nobody to leave the queue).
    const queued = await admin.eval(ENQUEUE_SCRIPT, names.length, ...names, "ghost", "10000", "1", "keel-lock:handover");
    assert.equal(Number(queued[0]), 0);
    await admin.del(lock);
    await sleep(10);
    assert.equal(await admin.exists(`${lock}:queue`), 1);
    const got = await s.acquireMany(keys, owners, 10_000);
    assert.ok(got, "a dead waiter blocked the set");
    assert.equal(got[1].fence, holder.fence + 1);
    assert.equal(await admin.exists(`${lock}:queue`, `${lock}:waiters`), 0, "the dead waiters are dropped");
    assert.deepEqual((await heldBy(admin, s, keys)).map(([value]) => value), owners);
    for (let i = 0; i < keys.length; i++) assert.equal(await s.release(keys[i], owners[i]), true);
  });

  test("a fence counter that cannot give a fence: rejected, and every counter left as it was", async () => {
    const t = tag();
    const keys = [`counter:a:${t}`, `counter:b:${t}`, `counter:c:${t}`];
    const owners = ownersOf(keys, t);
    const [a, b, c] = keys.map((k) => s.keys(k).fence);
    await admin.set(b, "5");
    for (const [value, error] of [
      [String(MAX_FENCE), /outside 1\.\.9007199254740991/],
      ["-1", /outside 1\.\.9007199254740991/],
      ["x", /not an integer/],
    ]) {
      await admin.set(c, value);
      await assert.rejects(s.acquireMany(keys, owners, 10_000), error);
      assert.equal(await admin.exists(a), 0, "a counter that did not exist still does not");
      assert.equal(await admin.get(b), "5");
      assert.equal(await admin.get(c), value);
      for (const key of keys) assert.equal(await s.isLocked(key), false);
    }
    await admin.del(c);
    assert.deepEqual(await s.acquireMany(keys, owners, 10_000), [{ fence: 1 }, { fence: 6 }, { fence: 1 }]);
    for (let i = 0; i < keys.length; i++) assert.equal(await s.release(keys[i], owners[i]), true);
  });

  test("bad arguments are rejected, naming acquireMany, before anything is sent", async () => {
    const ok = ["a", "b"];
    const cases = [
      [["b", "a"], ["1", "2"], 1000, TypeError],
      [["a", "a"], ["1", "2"], 1000, TypeError],
      [[], [], 1000, RangeError],
      [Array.from({ length: 65 }, (_, i) => `k${String(i).padStart(2, "0")}`), Array.from({ length: 65 }, (_, i) => `o${i}`), 1000, RangeError],
      ["a", ["1"], 1000, TypeError],
      [null, ["1"], 1000, TypeError],
      [ok, "12", 1000, TypeError],
      [ok, ["1"], 1000, RangeError],
      [ok, ["1", "1"], 1000, TypeError],
      [["a", ""], ["1", "2"], 1000, TypeError],
      [["a", 5], ["1", "2"], 1000, TypeError],
      [ok, ["1", ""], 1000, TypeError],
      [ok, ["1", 2], 1000, TypeError],
      [ok, ["1", "x\0"], 1000, TypeError],
      // U+FFFF before U+10000 by code point, after it by UTF-16 code unit
      [["\u{10000}", "\uffff"], ["1", "2"], 1000, TypeError],
      [ok, ["1", "2"], 0, RangeError],
      [ok, ["1", "2"], 1.5, RangeError],
      [ok, ["1", "2"], 2 ** 31, RangeError],
      [ok, ["1", "2"], "1000", RangeError],
    ];
    await resetStats([admin]);
    for (const [keys, owners, ttlMs, Type] of cases) {
      await assert.rejects(
        s.acquireMany(keys, owners, ttlMs),
        (error) => error instanceof Type && /acquireMany/.test(error.message),
        `${JSON.stringify([keys, owners, ttlMs])} should be a ${Type.name}`,
      );
    }
    assert.equal(await scriptCalls([admin]), 0);
    // code-point order is what is asked for
    const t = tag();
    const keys = [`\uffff:${t}`, `\u{10000}:${t}`];
    const got = await s.acquireMany(keys, ["1", "2"], 1000);
    assert.ok(got);
    for (let i = 0; i < keys.length; i++) assert.equal(await s.release(keys[i], String(i + 1)), true);
  });

  test("racing overlapping sets and single acquires over six connections: no key granted twice, no partial set, one fence per grant", { timeout: 120_000 }, async () => {
    const stores = [];
    for (const name of ["ioredis 5", "ioredis 5", "ioredis 6", "node-redis 5", "node-redis 5", "node-redis 4"]) {
      stores.push(sourceStore((await connect(name)).client));
    }
    const t = tag();
    const pool = ["p", "q", "r", "s", "u", "v"].map((k) => `race:${k}:${t}`);
    const lockOf = (key) => s.keys(key).lock;
    const holder = new Map();
    const fences = new Map(pool.map((k) => [k, []]));
    let sets = 0;
    let refused = 0;
    const take = (keys, owners, got) => {
      for (let i = 0; i < keys.length; i++) {
        assert.ok(!holder.has(keys[i]), `${keys[i]} granted to ${owners[i]} while ${holder.get(keys[i])} holds it`);
        holder.set(keys[i], owners[i]);
        fences.get(keys[i]).push(got[i].fence);
      }
    };
    const worker = async (w) => {
      const store = stores[w % stores.length];
      for (let round = 0; round < 40; round++) {
        if (w % 6 === 5) {
          const key = pool[(w + round) % pool.length];
          const owner = `single:${w}:${round}`;
          const got = await store.acquire(key, owner, 10_000);
          if (got) {
            take([key], [owner], [got]);
            await sleep(round % 3);
            holder.delete(key);
            assert.equal(await store.release(key, owner), true);
          }
          continue;
        }
        const keys = pool.filter((_, i) => (w * 7 + round * 13 + i * 5) % 3 !== 0 || i === round % pool.length);
        const owners = keys.map((_, i) => `set:${w}:${round}:${i}`);
        const got = await store.acquireMany(keys, owners, 10_000);
        if (got) {
          sets++;
          take(keys, owners, got);
          assert.deepEqual(await admin.mget(keys.map(lockOf)), owners, "every key of the set held by its owner, in Redis");
          await sleep(round % 3);
          for (const key of keys) holder.delete(key);
          for (let i = 0; i < keys.length; i++) assert.equal(await store.release(keys[i], owners[i]), true);
        } else {
          refused++;
          for (const value of await admin.mget(keys.map(lockOf))) {
            assert.ok(!owners.includes(value), `a refused set left ${value} holding a key`);
          }
        }
      }
    };
    await Promise.all(Array.from({ length: 24 }, (_, w) => worker(w)));
    assert.ok(sets > 0 && refused > 0, `sets granted ${sets}, refused ${refused}: the race did not overlap`);
    for (const key of pool) {
      const drawn = fences.get(key);
      assert.deepEqual([...drawn].sort((x, y) => x - y), Array.from({ length: drawn.length }, (_, i) => i + 1), `${key}: one fence per grant`);
      assert.equal(Number(await admin.get(s.keys(key).fence)), drawn.length, `${key}: the counter moved only for grants`);
      assert.equal(await s.isLocked(key), false);
    }
  });
});

describe("store.acquireMany on a Redis Cluster (three masters)", () => {
  let cluster;
  let admin; // an ioredis Cluster, for reading the data
  let masters; // a plain connection per master, for per-node counts
  const closers = [];

  before(async () => {
    cluster = await startRedisCluster({ masters: 3 });
    admin = await ioredisCluster(IORedis);
    closers.push(() => admin.disconnect());
    masters = [];
    for (const node of cluster.nodes) {
      const client = new IORedis({ host: node.host, port: node.port });
      closers.push(() => client.disconnect());
      masters.push(client);
    }
  });
  after(async () => {
    for (const close of closers.reverse()) await close();
    await cluster?.stop();
  });

  const ioredisCluster = (Module) => ioredisClusterOf(Module, cluster);
  const nodeRedisCluster = (create) => nodeRedisClusterOf(create, cluster);

  const CLIENTS = {
    "ioredis 5 Cluster": () => ioredisCluster(IORedis),
    "ioredis 6 Cluster": () => ioredisCluster(IORedis6),
    "node-redis 5 createCluster": () => nodeRedisCluster(createNodeRedisCluster),
    "node-redis 4 createCluster": () => nodeRedisCluster(createNodeRedisCluster4),
  };
  async function connect(name) {
    const client = await CLIENTS[name]();
    closers.push(() => (typeof client.disconnect === "function" ? client.disconnect() : client.quit()));
    return client;
  }

  test("the store's slot of a name is Redis's (CLUSTER KEYSLOT), hash tags and braces included", async () => {
    const keys = ["plain", "{tag}", "{}", "}", "{", "a{b}c", "a{}b", "{a}{b}", "}{", "%7B", "100%", "ünïcødé {κλειδί}", "\u{1F512}", "{acct:1}:x"];
    for (const prefix of ["", "lock:", "{p}"]) {
      for (const hashTags of [false, true]) {
        for (const key of keys) {
          for (const name of Object.values(redisLockKeys(key, prefix, { hashTags }))) {
            assert.equal(keySlot(name), await masters[0].cluster("KEYSLOT", name), name);
          }
        }
      }
    }
  });

  for (const name of Object.keys(CLIENTS)) {
    test(`${name}, hashTags: keys sharing a hash tag in one script; keys in different slots answer null with no request`, async () => {
      const store = sourceStore(await connect(name), { hashTags: true });
      const t = tag();
      const keys = ["credit", "debit", "fee"].map((k) => `{acct:${t}}:${k}`);
      const owners = ownersOf(keys, t);
      for (const m of masters) await m.script("LOAD", ACQUIRE_MANY_SCRIPT);
      const blocker = await store.acquire(keys[1], "blocker", 10_000);
      const before = await snapshot(admin, store, keys);
      await resetStats(masters);
      assert.equal(await store.acquireMany(keys, owners, 10_000), false);
      assert.equal(await scriptCalls(masters), 1, "one script, with no redirection");
      assert.deepEqual(await snapshot(admin, store, keys), before, "a refused set changes nothing");
      assert.equal(await store.release(keys[1], "blocker"), true);
      await resetStats(masters);
      const got = await store.acquireMany(keys, owners, 60_000);
      assert.deepEqual(got, [{ fence: 1 }, { fence: blocker.fence + 1 }, { fence: 1 }]);
      assert.equal(await scriptCalls(masters), 1, "one script, with no redirection");
      const held = await heldBy(admin, store, keys);
      assert.deepEqual(held.map(([value]) => value), owners);
      for (const [, pttl] of held) assert.ok(pttl > 50_000 && pttl <= 60_000, `TTL ${pttl}`);
      for (let i = 0; i < keys.length; i++) assert.equal(await store.release(keys[i], owners[i]), true);

      // Different tags, different slots: null, nothing sent, nothing held.
      const spread = [`{a:${t}}:x`, `{b:${t}}:x`, `{c:${t}}:x`];
      const slots = new Set(spread.map((k) => keySlot(store.keys(k).lock)));
      assert.ok(slots.size > 1);
      await resetStats(masters);
      assert.equal(await store.acquireMany(spread, ownersOf(spread, t), 10_000), null);
      assert.equal(await scriptCalls(masters), 0, "null is answered without a request");
      for (const key of spread) assert.equal(await store.isLocked(key), false);
      // A tag-less key next to tagged ones has a slot of its own.
      assert.equal(await store.acquireMany([`untagged:${t}`, keys[0]], ["1", "2"], 10_000), null);
      for (const key of keys) assert.equal(await store.isLocked(key), false);
    });
  }

  test("without hashTags each key has its own slot: tagged keys answer null, keys whose slots happen to match are one script", async () => {
    const client = await connect("ioredis 5 Cluster");
    const store = sourceStore(client);
    const t = tag();
    const tagged = [`{acct:${t}}:a`, `{acct:${t}}:b`];
    if (keySlot(store.keys(tagged[0]).lock) !== keySlot(store.keys(tagged[1]).lock)) {
      assert.equal(await store.acquireMany(tagged, ["1", "2"], 10_000), null);
    }
    // Two keys whose names (each its own tag) share a slot by chance.
    const first = `same-slot:${t}:0`;
    const slot = keySlot(store.keys(first).lock);
    let second = null;
    for (let i = 1; second === null; i++) {
      const key = `same-slot:${t}:${i}`;
      if (keySlot(store.keys(key).lock) === slot) second = key;
    }
    const keys = [first, second].sort();
    assert.equal(await masters[0].cluster("KEYSLOT", store.keys(keys[0]).lock), await masters[0].cluster("KEYSLOT", store.keys(keys[1]).lock));
    const got = await store.acquireMany(keys, ["1", "2"], 10_000);
    assert.deepEqual(got, [{ fence: 1 }, { fence: 1 }]);
    assert.deepEqual((await heldBy(admin, store, keys)).map(([value]) => value), ["1", "2"]);
    for (let i = 0; i < keys.length; i++) assert.equal(await store.release(keys[i], String(i + 1)), true);
  });

  test("racing sets of one tag from the four cluster clients: no key granted twice, no partial set", { timeout: 120_000 }, async () => {
    const stores = [];
    for (const name of Object.keys(CLIENTS)) stores.push(sourceStore(await connect(name), { hashTags: true }));
    const t = tag();
    const pool = ["a", "b", "c", "d"].map((k) => `{race:${t}}:${k}`);
    const holder = new Map();
    let sets = 0;
    let refused = 0;
    await Promise.all(
      Array.from({ length: 12 }, async (_, w) => {
        const store = stores[w % stores.length];
        for (let round = 0; round < 25; round++) {
          const keys = pool.filter((_, i) => (w + round + i) % 3 !== 0);
          const owners = keys.map((_, i) => `set:${w}:${round}:${i}`);
          const got = await store.acquireMany(keys, owners, 10_000);
          if (got) {
            sets++;
            for (let i = 0; i < keys.length; i++) {
              assert.ok(!holder.has(keys[i]), `${keys[i]} granted twice`);
              holder.set(keys[i], owners[i]);
            }
            await sleep(1);
            for (const key of keys) holder.delete(key);
            for (let i = 0; i < keys.length; i++) assert.equal(await store.release(keys[i], owners[i]), true);
          } else {
            refused++;
            for (const [value] of await heldBy(admin, store, keys)) assert.ok(!owners.includes(value), "a refused set left a key held");
          }
        }
      }),
    );
    assert.ok(sets > 0 && refused > 0, `sets granted ${sets}, refused ${refused}`);
    for (const key of pool) assert.equal(await stores[0].isLocked(key), false);
  });
});
