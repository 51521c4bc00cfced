// redisLockStore against a real redis-server started here, through every supported client:
// ioredis 5 and 6, node-redis 5 and 4, and @upstash/redis (REST, through a fixture that forwards
// Upstash's HTTP protocol to the same redis-server).
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { after, before, describe, test } from "node:test";
import IORedis from "ioredis";
import IORedis6 from "ioredis6";
import { createClient as createNodeRedis } from "redis";
import { createClient as createNodeRedis4 } from "redis4";
import { Redis as Upstash } from "@upstash/redis";
import {
  redisLockStore,
  detectRedisClient,
  RELEASE_SCRIPT,
  EXTEND_SCRIPT,
  RELEASE_SHA,
  EXTEND_SHA,
} from "../../pkg/stores/redis.js";
import { startRedis, startUpstashFixture } from "./lib/servers.js";
import { newContext, registerContract, runChecks, CHECKS } from "./lib/contract.js";

const CONNECTIONS = 4; // contenders in the race tests are spread over this many connections

let redis; // the server
let admin; // a plain ioredis connection for inspecting and poking the server
let upstash; // the REST fixture
const cleanups = [];

before(async () => {
  redis = await startRedis();
  admin = new IORedis({ port: redis.port, host: "127.0.0.1" });
  upstash = await startUpstashFixture(redis.port);
});

after(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
  admin?.disconnect();
  await upstash?.stop();
  await redis?.stop();
});

// Each flavour: how to open one connection with that client.
const FLAVOURS = {
  "ioredis 5": {
    type: "ioredis",
    async connect() {
      const client = new IORedis({ port: redis.port, host: "127.0.0.1", lazyConnect: true });
      await client.connect();
      return { client, close: () => client.disconnect() };
    },
  },
  "ioredis 6": {
    type: "ioredis",
    async connect() {
      const Ctor = IORedis6.default ?? IORedis6;
      const client = new Ctor({ port: redis.port, host: "127.0.0.1", lazyConnect: true });
      await client.connect();
      return { client, close: () => client.disconnect() };
    },
  },
  "node-redis 5": {
    type: "node-redis",
    async connect() {
      const client = createNodeRedis({ url: redis.url });
      client.on("error", () => {});
      await client.connect();
      return { client, close: () => client.quit() };
    },
  },
  "node-redis 4": {
    type: "node-redis",
    async connect() {
      const client = createNodeRedis4({ url: redis.url });
      client.on("error", () => {});
      await client.connect();
      return { client, close: () => client.quit() };
    },
  },
  "@upstash/redis (REST)": {
    type: "upstash",
    async connect() {
      const client = new Upstash({ url: upstash.url, token: upstash.token, retry: false });
      return { client, close: () => {} };
    },
  },
};

// Commands Redis executed since `resetStats()`, from INFO commandstats, without the admin's own.
async function resetStats() {
  await admin.config("RESETSTAT");
}
async function executed() {
  const info = await admin.info("commandstats");
  const counts = {};
  for (const line of info.split("\n")) {
    const m = /^cmdstat_([^:]+):calls=(\d+)/.exec(line.trim());
    if (!m || ["info", "config"].includes(m[1].split("|")[0])) continue;
    counts[m[1]] = Number(m[2]);
    const failed = /failed_calls=(\d+)/.exec(line);
    if (failed && Number(failed[1]) > 0) counts[`${m[1]} (failed)`] = Number(failed[1]);
  }
  return counts;
}

test("the script SHAs are the SHA-1 of the script text", () => {
  const sha1 = (s) => createHash("sha1").update(s).digest("hex");
  assert.equal(RELEASE_SHA, sha1(RELEASE_SCRIPT));
  assert.equal(EXTEND_SHA, sha1(EXTEND_SCRIPT));
});

test("clients that are none of the supported ones are refused", () => {
  assert.throws(() => redisLockStore({}), TypeError);
  assert.throws(() => redisLockStore(null), TypeError);
  assert.throws(() => redisLockStore({ get() {}, set() {} }), TypeError);
  assert.throws(() => redisLockStore(new IORedis({ lazyConnect: true }), { clientType: "memcached" }), TypeError);
  assert.throws(() => redisLockStore(new IORedis({ lazyConnect: true }), { prefix: 42 }), TypeError);
});

for (const [name, flavour] of Object.entries(FLAVOURS)) {
  describe(name, () => {
    let connections;
    let stores;
    before(async () => {
      connections = [];
      for (let i = 0; i < CONNECTIONS; i++) connections.push(await flavour.connect());
      cleanups.push(async () => {
        for (const c of connections) await c.close();
      });
      stores = connections.map((c) => redisLockStore(c.client));
    });

    test(`detects the client as ${flavour.type}`, () => {
      assert.equal(detectRedisClient(connections[0].client), flavour.type);
      assert.equal(stores[0].clientType, flavour.type);
    });

    registerContract(() => newContext(stores, name.replace(/\W+/g, "-")));

    test("every operation is one Redis command (EVALSHA on the happy path)", async () => {
      const store = stores[0];
      const ctx = newContext(stores, "roundtrip");
      const [key, a] = [ctx.key(), ctx.owner()];
      // Make sure the scripts are cached, as they are in steady state.
      await admin.script("LOAD", RELEASE_SCRIPT);
      await admin.script("LOAD", EXTEND_SCRIPT);
      const steps = [
        [() => store.acquire(key, a, 60_000), { set: 1 }],
        [() => store.extend(key, a, 60_000), { evalsha: 1, get: 1, pexpire: 1 }],
        [() => store.isLocked(key), { exists: 1 }],
        [() => store.remainingTime(key), { pttl: 1 }],
        [() => store.release(key, a), { evalsha: 1, get: 1, del: 1 }],
      ];
      for (const [op, expected] of steps) {
        await resetStats();
        const before = upstash.stats.requests;
        await op();
        assert.deepEqual(await executed(), expected, `commands for ${op}`);
        if (flavour.type === "upstash") assert.equal(upstash.stats.requests - before, 1, "HTTP requests per op");
      }
    });

    test("NOSCRIPT (script cache flushed, as after a restart or failover) falls back to EVAL", async () => {
      const store = stores[1 % stores.length];
      const ctx = newContext(stores, "noscript");
      const [key, a, b] = [ctx.key(), ctx.owner(), ctx.owner()];
      assert.equal(await store.acquire(key, a, 60_000), true);

      await admin.script("FLUSH");
      assert.deepEqual(await admin.script("EXISTS", RELEASE_SHA, EXTEND_SHA), [0, 0]);
      await resetStats();
      assert.equal(await store.extend(key, b, 60_000), false, "a stranger's extend after the flush");
      assert.deepEqual(await executed(), { "evalsha (failed)": 1, evalsha: 1, eval: 1, get: 1 });
      assert.equal(await store.extend(key, a, 30_000), true, "the owner's extend after the flush");
      const left = await store.remainingTime(key);
      assert.ok(left > 20_000 && left <= 30_000, `remainingTime ${left} after extend to 30 s`);

      await admin.script("FLUSH");
      assert.equal(await store.release(key, b), false, "a stranger's release after the flush");
      assert.equal(await store.isLocked(key), true);
      assert.equal(await store.release(key, a), true, "the owner's release after the flush");
      assert.equal(await store.isLocked(key), false);

      // The fallback EVAL put the release script back in the cache (extend has not run since the
      // second flush): the next release is a plain EVALSHA again.
      assert.deepEqual(await admin.script("EXISTS", RELEASE_SHA, EXTEND_SHA), [1, 0]);
      assert.equal(await store.acquire(key, a, 60_000), true);
      await resetStats();
      assert.equal(await store.release(key, a), true);
      assert.deepEqual(await executed(), { evalsha: 1, get: 1, del: 1 });
    });

    test("a prefix keeps lock keys apart from each other and from the application's keys", async () => {
      const client = connections[0].client;
      const ctx = newContext(stores, "prefix");
      const key = ctx.key();
      const [a, b, c] = [ctx.owner(), ctx.owner(), ctx.owner()];
      const plain = redisLockStore(client);
      const one = redisLockStore(client, { prefix: "app1:lock:" });
      const two = redisLockStore(client, { prefix: "app2:lock:" });
      assert.equal(one.prefix, "app1:lock:");
      // The application owns `key` itself, as an ordinary string.
      await admin.set(key, "application data");
      assert.equal(await plain.acquire(key, a, 60_000), false, "an application key is not a free lock");
      assert.equal(await one.acquire(key, b, 60_000), true);
      assert.equal(await two.acquire(key, c, 60_000), true);
      assert.equal(await admin.get(`app1:lock:${key}`), b);
      assert.equal(await admin.get(`app2:lock:${key}`), c);
      assert.equal(await admin.get(key), "application data");
      assert.equal(await one.release(key, c), false, "prefixes do not share locks");
      assert.equal(await two.isLocked(key), true);
      assert.equal(await one.release(key, b), true);
      assert.equal(await one.isLocked(key), false);
      assert.equal(await two.isLocked(key), true);
      assert.equal(await two.release(key, c), true);
      assert.equal(await admin.get(key), "application data");
      await admin.del(key);
    });

    test("remainingTime is Redis's PTTL: -1 (no expiry) and -2 (no key) read as null", async () => {
      const store = stores[0];
      const ctx = newContext(stores, "pttl");
      const [key, a] = [ctx.key(), ctx.owner()];
      assert.equal(await store.acquire(key, a, 60_000), true);
      await admin.pexpire(key, 5_000); // Redis's clock now says 5 s
      const left = await store.remainingTime(key);
      assert.ok(left > 4_000 && left <= 5_000, `remainingTime ${left} after PEXPIRE 5000`);
      await admin.persist(key);
      assert.equal(await store.remainingTime(key), null, "a key with no expiry");
      await admin.del(key);
      assert.equal(await store.remainingTime(key), null, "a missing key");
    });
  });
}

// The checks above can fail: run them against deliberately broken stores over the same server
// and make sure each breakage is caught by the check written for it.
describe("the contract checks catch broken stores", () => {
  let clients;
  before(async () => {
    clients = [];
    for (let i = 0; i < CONNECTIONS; i++) {
      const client = new IORedis({ port: redis.port, host: "127.0.0.1", lazyConnect: true });
      await client.connect();
      clients.push(client);
    }
  });
  after(() => clients.forEach((c) => c.disconnect()));

  const correct = (client) => redisLockStore(client);
  const broken = {
    // Get-then-set: two round trips with a gap between them.
    "non-atomic acquire": (client) => ({
      ...correct(client),
      async acquire(key, owner, ttl) {
        if ((await client.exists(key)) === 1) return false;
        await client.set(key, owner, "PX", ttl);
        return true;
      },
    }),
    // Delete without comparing the owner.
    "release without the owner check": (client) => ({
      ...correct(client),
      async release(key) {
        return (await client.del(key)) === 1;
      },
    }),
    // Extend by SET, reviving whatever was there.
    "extend without the owner check": (client) => ({
      ...correct(client),
      async extend(key, owner, ttl) {
        return (await client.set(key, owner, "PX", ttl)) === "OK";
      },
    }),
  };
  const expectedFailures = {
    "non-atomic acquire": [CHECKS[1].name, CHECKS[2].name],
    "release without the owner check": [CHECKS[3].name],
    "extend without the owner check": [CHECKS[4].name, CHECKS[6].name, CHECKS[7].name],
  };

  for (const [label, make] of Object.entries(broken)) {
    test(`${label} is caught`, { timeout: 60_000 }, async () => {
      const failures = await runChecks(newContext(clients.map(make), "broken"));
      const failed = failures.map((f) => f.name);
      for (const name of expectedFailures[label]) {
        assert.ok(failed.includes(name), `"${name}" did not catch ${label}; failures: ${JSON.stringify(failures)}`);
      }
    });
  }

  test("the correct store passes every check", { timeout: 60_000 }, async () => {
    assert.deepEqual(await runChecks(newContext(clients.map(correct), "correct")), []);
  });
});
