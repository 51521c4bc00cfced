// Several keys at once, `lock([k1, k2, …])` from the installed package, over redisLockStore on a
// real redis-server and on a real three-master Redis Cluster started here, with the keys in
// different slots (on different masters): overlapping sets taken in opposite orders by several
// clients all finish, never two holders of a key; a refusal leaves none of the keys held.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, test } from "node:test";
import IORedis from "ioredis";
import { lock, setLockStore } from "keel-lock";
import { redisLockStore } from "keel-lock/redis";
import { sleep, startRedis, startRedisCluster } from "./lib/servers.js";

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
  let redis;
  const clients = [];
  let stores;
  before(async () => {
    redis = await startRedis();
    stores = Array.from({ length: 3 }, () => {
      const client = new IORedis({ port: redis.port, host: "127.0.0.1" });
      clients.push(client);
      return redisLockStore(client);
    });
  });
  after(async () => {
    for (const store of stores ?? []) await store.close?.();
    for (const client of clients) client.disconnect();
    await redis?.stop();
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
