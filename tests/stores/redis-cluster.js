// redisLockStore on a real Redis Cluster: three masters (redis-server --cluster-enabled yes, joined
// by redis-cli --cluster create) started here on free ports and stopped at the end. Through the
// cluster clients of ioredis 5 and 6 (Redis.Cluster), node-redis 5 and 4 (createCluster) and Valkey
// GLIDE (GlideClusterClient): the lock contract (and keel-lock/testing's kit), fencing tokens,
// keys with braces spread over all three masters, one command per operation with no
// redirections, NOSCRIPT on every master, and the stale-writer story.
// Imported by redis.test.js, so `node --test redis.test.js` runs these too.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import IORedis from "ioredis";
import IORedis6 from "ioredis6";
import { createCluster as createNodeRedisCluster } from "redis";
import { createCluster as createNodeRedisCluster4 } from "redis4";
import { GlideClusterClient } from "@valkey/valkey-glide";
import { redisLockStore, detectRedisClient, ACQUIRE_SCRIPT, RELEASE_SCRIPT, EXTEND_SCRIPT } from "../../pkg/stores/redis.js";
import { ioredisCluster as ioredisClusterOf, nodeRedisCluster as nodeRedisClusterOf, startRedisCluster } from "./lib/servers.js";
import { newContext, registerContract } from "./lib/contract.js";
import { fenceOf, registerFenceChecks, runFenceChecks, FENCE_CHECKS, staleWriterStory } from "./lib/fence-checks.js";
import { fencedResource } from "./lib/fenced-resource.js";
import { BROKEN_FENCES } from "./lib/broken-fences.js";

const CONNECTIONS = 3; // cluster clients per flavour; contenders are spread over them

// Keys with braces in every position, a leading "}", an empty "{}", and escape-like text.
const BRACED_KEYS = ["{tag}", "{}", "}", "{", "}leading", "a{b}c", "a{}b", "{a}{b}", "}{", "%7B", "x%", "{κλειδί}"];

describe("Redis Cluster (three masters, started here)", () => {
  let cluster;
  let admin; // an ioredis Cluster for inspecting the data
  let masters; // one plain ioredis connection per master, for per-node state and stats
  const cleanups = [];

  before(async () => {
    cluster = await startRedisCluster({ masters: 3 });
    admin = await ioredisCluster(IORedis);
    masters = [];
    for (const node of cluster.nodes) {
      const client = new IORedis({ host: node.host, port: node.port, lazyConnect: true });
      await client.connect();
      masters.push(client);
    }
  });

  after(async () => {
    for (const cleanup of cleanups.reverse()) {
      try {
        await cleanup();
      } catch {
        // keep closing the rest
      }
    }
    admin?.disconnect();
    for (const client of masters ?? []) client.disconnect();
    await cluster?.stop();
  });

  const ioredisCluster = (Module) => ioredisClusterOf(Module, cluster);

  const nodeRedisCluster = (create) => nodeRedisClusterOf(create, cluster);

  // Which master serves each slot, from CLUSTER SLOTS: [[from, to, port], …].
  async function slotOwners() {
    const ranges = await masters[0].cluster("SLOTS");
    return ranges.map(([from, to, [, port]]) => [from, to, port]);
  }
  async function masterOf(name) {
    const slot = await masters[0].cluster("KEYSLOT", name);
    const [, , port] = (await slotOwners()).find(([from, to]) => slot >= from && slot <= to);
    return masters[cluster.nodes.findIndex((n) => n.port === port)];
  }

  // Commands executed on all masters since `resetStats()`, from INFO commandstats, with failed
  // and rejected calls (a MOVED redirection is a rejected call) counted separately.
  async function resetStats() {
    for (const m of masters) await m.config("RESETSTAT");
  }
  async function executed() {
    const counts = {};
    for (const m of masters) {
      for (const line of (await m.info("commandstats")).split("\n")) {
        const match = /^cmdstat_([^:]+):calls=(\d+)/.exec(line.trim());
        if (!match || ["info", "config"].includes(match[1].split("|")[0])) continue;
        const add = (name, n) => n > 0 && (counts[name] = (counts[name] ?? 0) + n);
        add(match[1], Number(match[2]));
        add(`${match[1]} (failed)`, Number(/failed_calls=(\d+)/.exec(line)?.[1] ?? 0));
        add(`${match[1]} (rejected)`, Number(/rejected_calls=(\d+)/.exec(line)?.[1] ?? 0));
      }
    }
    return counts;
  }

  test("the cluster is up: three masters, all slots served", async () => {
    const info = await masters[0].cluster("INFO");
    assert.match(info, /cluster_state:ok/);
    assert.match(info, /cluster_size:3/);
    assert.equal(new Set((await slotOwners()).map(([, , port]) => port)).size, 3);
  });

  test("a key's lock and fence names share a slot, whatever braces the key holds (CLUSTER KEYSLOT)", async () => {
    const store = redisLockStore(admin, { prefix: "p{x}:" });
    for (const key of BRACED_KEYS) {
      for (const s of [store, redisLockStore(admin)]) {
        const { lock, fence } = s.keys(key);
        assert.equal(await masters[0].cluster("KEYSLOT", lock), await masters[0].cluster("KEYSLOT", fence), `${lock} / ${fence}`);
      }
    }
  });

  test("the naive layouts the store avoids do fail on the cluster (CROSSSLOT)", async () => {
    // key and key:fence: different slots for most keys.
    await assert.rejects(admin.eval(ACQUIRE_SCRIPT, 2, "naive:1", "naive:1:fence", "o", "1000"), /CROSSSLOT/);
    // {key} without escaping: a key starting with "}" makes the tag empty ("{}…"), and so does a
    // prefix holding "{}"; then Redis hashes each whole name.
    for (const [prefix, key] of [["", "}x"], ["", "}{"], ["lock{}:", "k"]]) {
      const lock = `${prefix}{${key}}`;
      await assert.rejects(admin.eval(ACQUIRE_SCRIPT, 2, lock, `${lock}:fence`, "o", "1000"), /CROSSSLOT/, lock);
    }
  });

  const FLAVOURS = {
    "ioredis 5 Cluster": { type: "ioredis-cluster", connect: () => ioredisCluster(IORedis), close: (c) => c.disconnect() },
    "ioredis 6 Cluster": { type: "ioredis-cluster", connect: () => ioredisCluster(IORedis6), close: (c) => c.disconnect() },
    "node-redis 5 createCluster": {
      type: "node-redis-cluster",
      connect: () => nodeRedisCluster(createNodeRedisCluster),
      close: (c) => c.close(),
    },
    "node-redis 4 createCluster": {
      type: "node-redis-cluster",
      connect: () => nodeRedisCluster(createNodeRedisCluster4),
      close: (c) => c.quit(),
    },
    "valkey-glide GlideClusterClient": {
      type: "glide-cluster",
      connect: () => GlideClusterClient.createClient({ addresses: cluster.nodes.map(({ host, port }) => ({ host, port })) }),
      close: (c) => c.close(),
    },
  };

  for (const [name, flavour] of Object.entries(FLAVOURS)) {
    describe(name, () => {
      let clients;
      let stores;
      before(async () => {
        clients = [];
        for (let i = 0; i < CONNECTIONS; i++) clients.push(await flavour.connect());
        cleanups.push(async () => {
          for (const c of clients) await flavour.close(c);
        });
        stores = clients.map((c) => redisLockStore(c, { prefix: "kc:" }));
      });

      test(`detects the client as ${flavour.type}`, () => {
        assert.equal(detectRedisClient(clients[0]), flavour.type);
        assert.equal(stores[0].clientType, flavour.type);
      });

      describe("the lock contract", () => {
        registerContract(() => newContext(stores, `cluster-${name.replace(/\W+/g, "-")}`));
      });

      test("passes keel-lock/testing's conformance kit (the installed package)", { timeout: 120_000 }, async () => {
        const { checkLockStore } = await import("keel-lock/testing");
        const results = await checkLockStore(stores[0], { shortTtlMs: 800, settleMs: 200 }); // rejects on any failure
        assert.ok(results.length > 0 && results.every((r) => r.ok));
      });

      describe("fencing tokens", () => {
        registerFenceChecks(() => newContext(stores, `cluster-fence-${name.replace(/\W+/g, "-")}`));
      });

      test("keys with braces lock on all three masters; each lock sits with its counter", async () => {
        const ctx = newContext(stores, "spread");
        const used = new Set();
        const held = [];
        for (let i = 0; held.length < BRACED_KEYS.length || used.size < masters.length; i++) {
          assert.ok(i < 200, `keys landed on ${used.size} masters only`);
          const key = `${BRACED_KEYS[i % BRACED_KEYS.length]}${ctx.key()}`;
          const owner = ctx.owner();
          const store = stores[i % stores.length];
          const first = fenceOf(await store.acquire(key, owner, 60_000));
          assert.equal(await store.acquire(key, ctx.owner(), 60_000), false, `${JSON.stringify(key)} taken twice`);
          const { lock, fence } = store.keys(key);
          const master = await masterOf(lock);
          assert.equal(await master.get(lock), owner, `${lock} is not on the master serving its slot`);
          assert.equal(Number(await master.get(fence)), first, `${fence} is not next to ${lock}`);
          assert.equal(await master.pttl(fence), -1, `${fence} has a TTL`);
          used.add(master.options.port);
          held.push([key, owner, first]);
        }
        assert.equal(used.size, 3);
        for (const [i, [key, owner, first]] of held.entries()) {
          const store = stores[(i + 1) % stores.length];
          assert.equal(await store.isLocked(key), true);
          assert.ok((await store.remainingTime(key)) > 50_000);
          assert.equal(await store.extend(key, owner, 60_000), true);
          assert.equal(await store.release(key, owner), true, `release of ${JSON.stringify(key)}`);
          assert.equal(Number(await admin.get(store.keys(key).fence)), first, "release changed the counter");
          const again = ctx.owner();
          assert.ok(fenceOf(await store.acquire(key, again, 60_000)) > first, `fence after release of ${JSON.stringify(key)}`);
          assert.equal(await store.release(key, again), true);
        }
      });

      test("every operation is one command on one master: no redirections, no slot refreshes", async () => {
        const store = stores[0];
        const ctx = newContext(stores, "cluster-roundtrip");
        const [key, a] = [`a{b}${ctx.key()}`, ctx.owner()];
        for (const m of masters) {
          for (const script of [ACQUIRE_SCRIPT, RELEASE_SCRIPT, EXTEND_SCRIPT]) await m.script("LOAD", script);
        }
        await store.isLocked(key); // the client has learned the slot map
        const steps = [
          [() => store.acquire(key, a, 60_000), { evalsha: 1, exists: 1, incr: 1, set: 1 }],
          [() => store.acquire(key, ctx.owner(), 60_000), { evalsha: 1, set: 1 }],
          [() => store.extend(key, a, 60_000), { evalsha: 1, get: 1, pexpire: 1 }],
          [() => store.isLocked(key), { exists: 1 }],
          [() => store.remainingTime(key), { pttl: 1 }],
          [() => store.release(key, a), { evalsha: 1, get: 1, del: 1 }],
        ];
        for (let round = 0; round < 3; round++) {
          for (const [op, expected] of steps) {
            await resetStats();
            await op();
            assert.deepEqual(await executed(), expected, `commands for ${op}`);
          }
        }
      });

      test("NOSCRIPT on every master (caches flushed) falls back to EVAL", async () => {
        const ctx = newContext(stores, "cluster-noscript");
        for (let i = 0; i < 6; i++) {
          for (const m of masters) await m.script("FLUSH");
          const store = stores[i % stores.length];
          const [key, a] = [`}${i}${ctx.key()}`, ctx.owner()];
          const fence = fenceOf(await store.acquire(key, a, 60_000));
          for (const m of masters) await m.script("FLUSH");
          assert.equal(await store.extend(key, a, 60_000), true);
          for (const m of masters) await m.script("FLUSH");
          assert.equal(await store.release(key, a), true);
          assert.ok(fenceOf(await store.acquire(key, a, 60_000)) > fence);
          assert.equal(await store.release(key, a), true);
        }
      });
    });
  }

  test("the stale-writer story on the cluster: A (ioredis Cluster) and B (node-redis createCluster)", async () => {
    const a = await ioredisCluster(IORedis);
    const b = await nodeRedisCluster(createNodeRedisCluster);
    try {
      for (const tricky of ["plain", "a{b}c", "}x{"]) {
        const ctx = newContext([], "cluster-stale");
        const resource = fencedResource(admin, `resource:${ctx.key()}`);
        const { fenceB } = await staleWriterStory({
          storeA: redisLockStore(a),
          storeB: redisLockStore(b),
          key: `${tricky}${ctx.key()}`,
          ownerA: ctx.owner(),
          ownerB: ctx.owner(),
          resource,
        });
        assert.deepEqual(await admin.hgetall(resource.key), { fence: String(fenceB), value: "B, again" });
      }
    } finally {
      a.disconnect();
      await b.close();
    }
  });

  test("on the cluster too, a store whose fence counter expires with the lock is caught", { timeout: 120_000 }, async () => {
    const clients = [await ioredisCluster(IORedis), await ioredisCluster(IORedis)];
    try {
      const ctx = newContext(clients.map(BROKEN_FENCES["counter expires with the lock"]), "cluster-broken");
      const failed = (await runFenceChecks(ctx)).map((f) => f.name);
      assert.deepEqual(failed, [FENCE_CHECKS[2].name]);
    } finally {
      clients.forEach((c) => c.disconnect());
    }
  });
});
