// keel-lock/testing against EVERY store, all from the packed tarball as users get it: the memory
// store, a store written in JS, redisLockStore through ioredis (5 and 6), node-redis (5 and 4)
// @upstash/redis (REST fixture) and Valkey GLIDE on a real redis-server, the user-written ioredis store from
// the documentation's pattern, databaseLockStore over better-sqlite3 (in memory and a shared
// file), pg on a throwaway PostgreSQL cluster, D1 in local workerd, and etcdLockStore on a
// three-member etcd cluster (and a racy etcd store, range-then-put and a delete without the owner
// check, is caught).
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import IORedis from "ioredis";
import IORedis6 from "ioredis6";
import { createClient as createNodeRedis } from "redis";
import { createClient as createNodeRedis4 } from "redis4";
import { Redis as Upstash } from "@upstash/redis";
import { GlideClient } from "@valkey/valkey-glide";
import Database from "better-sqlite3";
import pg from "pg";
import { MemoryLockStore } from "keel-lock";
import { checkLockStore, LockStoreConformanceError } from "keel-lock/testing";
import { redisLockStore } from "keel-lock/redis";
import { databaseLockStore } from "keel-lock/sql";
import { etcdLockStore } from "keel-lock/etcd";
import { jsMapStore } from "./lib/js-stores.js";
import { userRedisStore } from "./lib/user-redis-store.js";
import { installedKeelLock } from "./lib/installed.js";
import { etcdCall, startD1, startEtcdCluster, startPostgres, startRedis, startUpstashFixture } from "./lib/servers.js";

// Over a network (or Miniflare's proxy) on a loaded machine a short-TTL lock must survive the
// round trips a property makes while holding it, so give it room. In-process stores use the
// kit's defaults.
const REMOTE = { shortTtlMs: 800, settleMs: 200 };
const PROPERTY_COUNT = 25;
// The shared-hold properties: none apply to a store without acquireShared; the queue's one needs
// acquireSharedOrWait.
const SHARED = [
  "shared_holds_stay_within_the_limit",
  "each_permit_is_its_own_lease",
  "shared_and_exclusive_holds_exclude",
  "a_second_limit_is_refused",
  "shared_fences_increase",
  "nobody_passes_a_queued_waiter",
];
const cleanups = [];

// Every store keel-lock ships hands out fences, so every property applies to it; a store
// written without fences (the user-written one) passes with fences_increase not applicable.
// `shared`: "queued" (it keeps and queues shared holds), "polled" (keeps them, no queue for
// them) or "none".
async function passes(store, options, { fenced = true, shared = "queued" } = {}) {
  const results = await checkLockStore(store, options); // rejects, naming each failure, if not
  assert.equal(results.length, PROPERTY_COUNT);
  assert.ok(results.every((r) => r.ok === true));
  const notApplicable = results.filter((r) => !r.applicable).map((r) => r.property);
  const expected = {
    queued: [],
    polled: ["nobody_passes_a_queued_waiter"],
    none: SHARED,
  }[shared];
  // A store with acquireMany is held to its property; one without answers it not applicable.
  const many = typeof store.acquireMany === "function" ? [] : ["sets_taken_in_one_step_are_atomic"];
  // A store with inspect keeps metadata, and is held to both properties.
  const inspects = typeof store.inspect === "function" ? [] : ["inspect_agrees_with_the_holds", "metadata_is_kept_per_hold"];
  // A store with watch is held to reporting every change; one without answers not applicable.
  const watches = typeof store.watch === "function" ? [] : ["watch_reports_every_change_in_order"];
  assert.deepEqual(
    notApplicable.sort(),
    [...expected, ...many, ...inspects, ...watches, ...(fenced ? [] : ["fences_increase"])].sort(),
  );
  for (const r of results) assert.equal(r.message === null, r.applicable, `${r.property}: ${r.message}`);
}

after(async () => {
  for (const cleanup of cleanups.reverse()) {
    try {
      await cleanup();
    } catch {
      // keep stopping the rest
    }
  }
});

test("keel-lock, keel-lock/testing, /redis, /sql and /etcd come from the installed tarball", () => {
  const { entry, isCopy } = installedKeelLock();
  assert.ok(isCopy, `resolved ${entry}`);
  for (const spec of ["keel-lock", "keel-lock/redis", "keel-lock/sql", "keel-lock/etcd"]) {
    assert.match(import.meta.resolve(spec), /\/tests\/stores\/node_modules\/keel-lock\//, spec);
  }
});

describe("in process", () => {
  // Its JS face has acquireShared; lock() waits in its queue inside the wasm, not through JS.
  test("MemoryLockStore", () => passes(new MemoryLockStore(), undefined, { shared: "polled" }));
  test("a JS-implemented store (async, over a Map)", () => passes(jsMapStore(), undefined, { shared: "none" }));
});

describe("Redis (real redis-server)", () => {
  let redis;
  let upstash;
  before(async () => {
    redis = await startRedis();
    cleanups.push(() => redis.stop());
    upstash = await startUpstashFixture(redis.port);
    cleanups.push(() => upstash.stop());
  });

  const ioredis = async (Ctor) => {
    const client = new Ctor({ host: "127.0.0.1", port: redis.port, lazyConnect: true });
    await client.connect();
    cleanups.push(() => client.disconnect());
    return client;
  };
  const nodeRedis = async (create) => {
    const client = create({ url: redis.url });
    client.on("error", () => {});
    await client.connect();
    cleanups.push(() => client.quit());
    return client;
  };

  test("redisLockStore over ioredis 5", async () => {
    const store = redisLockStore(await ioredis(IORedis), { prefix: "io5:" });
    assert.equal(store.clientType, "ioredis");
    await passes(store, REMOTE);
  });
  test("redisLockStore over ioredis 6", async () => {
    const store = redisLockStore(await ioredis(IORedis6.default ?? IORedis6), { prefix: "io6:" });
    assert.equal(store.clientType, "ioredis");
    await passes(store, REMOTE);
  });
  test("redisLockStore over node-redis 5", async () => {
    const store = redisLockStore(await nodeRedis(createNodeRedis), { prefix: "nr5:" });
    assert.equal(store.clientType, "node-redis");
    await passes(store, REMOTE);
  });
  test("redisLockStore over node-redis 4", async () => {
    const store = redisLockStore(await nodeRedis(createNodeRedis4), { prefix: "nr4:" });
    assert.equal(store.clientType, "node-redis");
    await passes(store, REMOTE);
  });
  test("redisLockStore over @upstash/redis (REST fixture forwarding to the same server)", async () => {
    const client = new Upstash({ url: upstash.url, token: upstash.token, retry: false });
    const store = redisLockStore(client, { prefix: "up:" });
    assert.equal(store.clientType, "upstash");
    const before = upstash.stats.commands;
    await passes(store, REMOTE, { shared: typeof store.acquireSharedOrWait === "function" ? "queued" : "polled" });
    assert.ok(upstash.stats.commands > before, "the Upstash store never reached the fixture");
  });
  test("redisLockStore over Valkey GLIDE (GlideClient)", async () => {
    const client = await GlideClient.createClient({ addresses: [{ host: "127.0.0.1", port: redis.port }] });
    cleanups.push(() => client.close());
    const store = redisLockStore(client, { prefix: "glide:" });
    assert.equal(store.clientType, "glide");
    await passes(store, REMOTE);
  });
  test("the user-written ioredis store (SET … PX … NX + Lua compare-and-act)", async () => {
    await passes(userRedisStore(await ioredis(IORedis)), REMOTE, { fenced: false, shared: "none" });
  });
});

describe("SQL", () => {
  test("databaseLockStore over better-sqlite3, in memory", async () => {
    const db = new Database(":memory:");
    cleanups.push(() => db.close());
    const store = databaseLockStore(db);
    await store.createTable();
    assert.equal(store.driver, "sqlite");
    await passes(store, undefined, { shared: "polled" });
  });

  test("databaseLockStore over better-sqlite3, a database file", async () => {
    const dir = mkdtempSync(join(tmpdir(), "keel-lock-kit-sqlite-"));
    const db = new Database(join(dir, "locks.db"), { timeout: 10_000 });
    cleanups.push(() => {
      db.close();
      rmSync(dir, { recursive: true, force: true });
    });
    db.pragma("journal_mode = WAL");
    const store = databaseLockStore(db, { table: "kit_locks" });
    await store.createTable();
    await passes(store, undefined, { shared: "polled" });
  });

  test("databaseLockStore over pg (throwaway PostgreSQL cluster)", async () => {
    const server = await startPostgres();
    cleanups.push(() => server.stop());
    const pool = new pg.Pool({ connectionString: server.connectionString, max: 20 });
    pool.on("error", () => {});
    cleanups.push(() => pool.end());
    const store = databaseLockStore(pool);
    await store.createTable();
    assert.equal(store.driver, "pg");
    await passes(store, REMOTE);
  });

  test("databaseLockStore over D1 (local workerd via Miniflare)", async () => {
    const d1 = await startD1();
    cleanups.push(() => d1.stop());
    const store = databaseLockStore(d1.db);
    await store.createTable();
    assert.equal(store.driver, "d1");
    await passes(store, REMOTE, { shared: "polled" });
  });
});

describe("etcd (a real three-member cluster)", () => {
  // etcd's leases are whole seconds and expire on the leader's next check (every 500 ms) plus a
  // commit: the short TTL is a 2 s lease, given 1.5 s more to be gone.
  const ETCD = { shortTtlMs: 2_000, settleMs: 1_500 };
  let cluster;
  before(async () => {
    cluster = await startEtcdCluster();
    cleanups.push(() => cluster.stop());
  });

  test("etcdLockStore", async () => {
    await passes(etcdLockStore({ endpoints: cluster.endpoints, prefix: "kit/" }), ETCD);
  });

  test("a racy etcd store (range then put, delete without the owner check) is caught", async () => {
    const url = cluster.endpoints[0];
    const b64 = (text) => Buffer.from(text, "utf8").toString("base64");
    const real = etcdLockStore({ endpoints: cluster.endpoints, prefix: "racy/" });
    const racy = {
      async acquire(key, owner, ttlMs) {
        if (await real.isLocked(key)) return false;
        const { ID } = await etcdCall(url, "/v3/lease/grant", { TTL: Math.ceil(ttlMs / 1000) });
        const put = await etcdCall(url, "/v3/kv/put", { key: b64(real.keys(key).lock), value: b64(owner), lease: ID });
        return { fence: Number(put.header.revision) };
      },
      async release(key) {
        const reply = await etcdCall(url, "/v3/kv/deleterange", { key: b64(real.keys(key).lock) });
        return Number(reply.deleted ?? 0) > 0;
      },
      extend: (key, owner, ttlMs) => real.extend(key, owner, ttlMs),
      isLocked: (key) => real.isLocked(key),
      remainingTime: (key) => real.remainingTime(key),
    };
    const error = await checkLockStore(racy, ETCD).catch((e) => e);
    assert.ok(error instanceof LockStoreConformanceError, `not caught: ${error}`);
    const failed = error.failures.map((f) => f.property);
    for (const property of ["concurrent_acquires_have_one_winner", "late_release_keeps_new_holder", "release_requires_owner"]) {
      assert.ok(failed.includes(property), `${property} not among the failures: ${failed.join(", ")}`);
    }
  });
});
