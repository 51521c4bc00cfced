// redisLockStore against a real redis-server started here, through every supported client:
// ioredis 5 and 6, node-redis 5 and 4, and @upstash/redis (REST, through a fixture that forwards
// Upstash's HTTP protocol to the same redis-server): the lock contract, fencing tokens, the key
// layout, round trips per operation, the NOSCRIPT fallback, and the stale-writer story against a
// fenced resource. The same against a real three-master Redis Cluster: redis-cluster.js, imported
// at the end of this file.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { after, before, describe, test } from "node:test";
import IORedis from "ioredis";
import IORedis6 from "ioredis6";
import { createClient as createNodeRedis } from "redis";
import {
  redisLockStore,
  redisLockKeys,
  detectRedisClient,
  ACQUIRE_SCRIPT,
  RELEASE_SCRIPT,
  EXTEND_SCRIPT,
  ACQUIRE_SHA,
  RELEASE_SHA,
  EXTEND_SHA,
} from "../../pkg/stores/redis.js";
import { MAX_FENCE } from "../../pkg/stores/args.js";
import { sleep } from "./lib/servers.js";
import { useRedis } from "./lib/redis-fixture.js";
import { newContext, registerContract, runChecks } from "./lib/contract.js";
import { lockStoreResults } from "keel-lock/testing";
import { FENCE_CHECKS, fenceOf, registerFenceChecks, runFenceChecks, staleWriterStory } from "./lib/fence-checks.js";
import { FENCED_WRITE_SCRIPT, fencedResource } from "./lib/fenced-resource.js";
import { BROKEN_FENCES } from "./lib/broken-fences.js";
import "./redis-cluster.js"; // the Redis Cluster tests, run in this process

const CONNECTIONS = 4; // contenders in the race tests are spread over this many connections

let redis; // the server
let admin; // a plain ioredis connection for inspecting and poking the server
let upstash; // the REST fixture
const server = useRedis({ admin: true, upstash: true, ready: (started) => ({ redis, admin, upstash } = started) });
const cleanups = server.closers;

// Each flavour: the client type the store detects, and how to open one connection with that client.
const FLAVOURS = {
  "ioredis 5": { type: "ioredis", connect: server.clients["ioredis 5"] },
  "ioredis 6": { type: "ioredis", connect: server.clients["ioredis 6"] },
  "node-redis 5": { type: "node-redis", connect: server.clients["node-redis 5"] },
  "node-redis 4": { type: "node-redis", connect: server.clients["node-redis 4"] },
  "@upstash/redis (REST)": { type: "upstash", connect: server.clients["@upstash/redis (REST)"] },
  "valkey-glide": { type: "glide", connect: server.clients["valkey-glide"] },
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
  assert.equal(ACQUIRE_SHA, sha1(ACQUIRE_SCRIPT));
  assert.equal(RELEASE_SHA, sha1(RELEASE_SCRIPT));
  assert.equal(EXTEND_SHA, sha1(EXTEND_SCRIPT));
});

test("clients that are none of the supported ones are refused", () => {
  assert.throws(() => redisLockStore({}), TypeError);
  assert.throws(() => redisLockStore(null), TypeError);
  assert.throws(() => redisLockStore({ get() {}, set() {} }), TypeError);
  assert.throws(() => redisLockStore(new IORedis({ lazyConnect: true }), { clientType: "memcached" }), TypeError);
  assert.throws(() => redisLockStore(new IORedis({ lazyConnect: true }), { prefix: 42 }), TypeError);
  for (const safetyNetMs of [0, -1, 1.5, NaN, "1000", 2 ** 31]) {
    assert.throws(() => redisLockStore(new IORedis({ lazyConnect: true }), { safetyNetMs }), RangeError, `safetyNetMs ${String(safetyNetMs)}`);
  }
});

// Keys a user might pick that trip naive hash-tag layouts: braces anywhere, a leading "}",
// an empty tag, escapes that look like this store's own, non-ASCII.
const TRICKY_KEYS = [
  "plain",
  "{tag}",
  "{}",
  "}",
  "{",
  "}leading-close",
  "a{b}c",
  "a{}b",
  "{a}{b}",
  "}{",
  "%7B",
  "%",
  "%25",
  "100%",
  "ünïcødé {κλειδί}",
];

describe("key layout", () => {
  test("readable names: prefix, the key as hash tag, :fence for the counter", () => {
    assert.deepEqual(redisLockKeys("invoice:42"), { lock: "{invoice:42}", fence: "{invoice:42}:fence" });
    assert.deepEqual(redisLockKeys("invoice:42", "lock:"), {
      lock: "lock:{invoice:42}",
      fence: "lock:{invoice:42}:fence",
    });
    const store = redisLockStore(new IORedis({ lazyConnect: true }), { prefix: "app:" });
    assert.deepEqual(store.keys("k"), { lock: "app:{k}", fence: "app:{k}:fence" });
    assert.throws(() => redisLockKeys(""), TypeError);
    assert.throws(() => redisLockKeys("k", 1), TypeError);
  });

  test("%, { and } in keys and prefixes are escaped: exactly one {…} tag, never empty", () => {
    assert.deepEqual(redisLockKeys("a{b}c"), { lock: "{a%7Bb%7Dc}", fence: "{a%7Bb%7Dc}:fence" });
    assert.equal(redisLockKeys("}x{").lock, "{%7Dx%7B}");
    assert.equal(redisLockKeys("{}").lock, "{%7B%7D}");
    assert.equal(redisLockKeys("100%").lock, "{100%25}");
    assert.equal(redisLockKeys("k", "{app}:").lock, "%7Bapp%7D:{k}");
    for (const key of TRICKY_KEYS) {
      for (const prefix of ["", "p:", "{p}", "}{"]) {
        for (const name of Object.values(redisLockKeys(key, prefix))) {
          const open = name.indexOf("{");
          const close = name.indexOf("}", open + 1);
          assert.equal(name.split("{").length, 2, `${name}: one "{"`);
          assert.equal(name.split("}").length, 2, `${name}: one "}"`);
          assert.ok(close > open + 1, `${name}: a non-empty tag`);
        }
      }
    }
  });

  test("distinct (prefix, key) pairs never share a name, and no lock name is another's fence name", () => {
    const seen = new Map();
    for (const prefix of ["", "p", "p:", "{", "}", "%", "%7B", "p{", "p{x"]) {
      for (const key of [...TRICKY_KEYS, "x", "x}:fence", "x%7D:fence", "{x}"]) {
        const { lock, fence } = redisLockKeys(key, prefix);
        for (const name of [lock, fence]) {
          const owner = `${JSON.stringify(prefix)} + ${JSON.stringify(key)}`;
          assert.ok(!seen.has(name), `${name} is used by ${seen.get(name)} and ${owner}`);
          seen.set(name, owner);
        }
      }
    }
  });
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

    describe("the lock contract", () => {
      registerContract(() => newContext(stores, name.replace(/\W+/g, "-")));
    });

    describe("fencing tokens", () => {
      registerFenceChecks(() => newContext(stores, `fence-${name.replace(/\W+/g, "-")}`));

      test("the fence counter outlives the lock: no TTL, and untouched by release and expiry", async () => {
        const store = stores[0];
        const ctx = newContext(stores, "counter");
        const [key, a, b] = [ctx.key(), ctx.owner(), ctx.owner()];
        const names = store.keys(key);
        const first = fenceOf(await store.acquire(key, a, 60_000));
        assert.equal(await admin.get(names.lock), a, "the lock key holds the owner");
        assert.equal(Number(await admin.get(names.fence)), first, "the counter holds the last fence");
        assert.equal(await admin.pttl(names.fence), -1, "the counter has no TTL");
        assert.equal(await store.release(key, a), true);
        assert.equal(await admin.exists(names.lock), 0);
        assert.equal(Number(await admin.get(names.fence)), first, "release changed the counter");
        assert.equal(await admin.pttl(names.fence), -1);
        const second = fenceOf(await store.acquire(key, b, 150));
        await sleep(350);
        assert.equal(await admin.exists(names.lock), 0, "the lock did not expire");
        assert.equal(Number(await admin.get(names.fence)), second, "expiry changed the counter");
        assert.equal(await admin.pttl(names.fence), -1);
      });

      test("a lost acquire hands out no fence and leaves the counter alone", async () => {
        const store = stores[0];
        const ctx = newContext(stores, "lost");
        const [key, a] = [ctx.key(), ctx.owner()];
        const fence = fenceOf(await store.acquire(key, a, 60_000));
        for (let i = 0; i < 5; i++) assert.equal(await stores[i % stores.length].acquire(key, ctx.owner(), 60_000), false);
        assert.equal(Number(await admin.get(store.keys(key).fence)), fence);
        assert.equal(await store.release(key, a), true);
      });
    });

    test("every operation is one Redis command (EVALSHA on the happy path)", async () => {
      const store = stores[0];
      const ctx = newContext(stores, "roundtrip");
      const [key, a] = [ctx.key(), ctx.owner()];
      // Make sure the scripts are cached, as they are in steady state.
      for (const script of [ACQUIRE_SCRIPT, RELEASE_SCRIPT, EXTEND_SCRIPT]) await admin.script("LOAD", script);
      const steps = [
        [() => store.acquire(key, a, 60_000), { evalsha: 1, exists: 1, incr: 1, set: 1 }],
        [() => store.acquire(key, ctx.owner(), 60_000), { evalsha: 1, set: 1 }],
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

      await admin.script("FLUSH");
      await resetStats();
      const fence = fenceOf(await store.acquire(key, a, 60_000));
      assert.deepEqual(await executed(), { "evalsha (failed)": 1, evalsha: 1, eval: 1, exists: 1, incr: 1, set: 1 });
      await admin.script("FLUSH");
      assert.equal(await store.acquire(key, b, 60_000), false, "a second acquire after the flush");

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

      // The fallback EVAL put the release script back in the cache (acquire and extend have not
      // run since the last flush): the next release is a plain EVALSHA again.
      assert.deepEqual(await admin.script("EXISTS", ACQUIRE_SHA, RELEASE_SHA, EXTEND_SHA), [0, 1, 0]);
      assert.ok(fenceOf(await store.acquire(key, a, 60_000)) > fence);
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
      // The application owns `key` itself, as an ordinary string; the lock names never equal it.
      await admin.set(key, "application data");
      assert.ok(fenceOf(await plain.acquire(key, a, 60_000)));
      assert.ok(fenceOf(await one.acquire(key, b, 60_000)));
      assert.ok(fenceOf(await two.acquire(key, c, 60_000)));
      assert.equal(await admin.get(`{${key}}`), a);
      assert.equal(await admin.get(`app1:lock:{${key}}`), b);
      assert.equal(await admin.get(`app2:lock:{${key}}`), c);
      assert.equal(await admin.exists(`app1:lock:{${key}}:fence`, `app2:lock:{${key}}:fence`), 2);
      assert.equal(await admin.get(key), "application data");
      assert.equal(await one.release(key, c), false, "prefixes do not share locks");
      assert.equal(await two.isLocked(key), true);
      assert.equal(await one.release(key, b), true);
      assert.equal(await one.isLocked(key), false);
      assert.equal(await two.isLocked(key), true);
      assert.equal(await two.release(key, c), true);
      assert.equal(await plain.release(key, a), true);
      assert.equal(await admin.get(key), "application data");
      await admin.del(key);
    });

    test("keys with braces, a leading } and escape-like text are separate locks", async () => {
      const ctx = newContext(stores, "braces");
      const base = ctx.key();
      const held = [];
      for (const [i, tricky] of TRICKY_KEYS.entries()) {
        const key = `${tricky}${base}`;
        const owner = ctx.owner();
        const store = stores[i % stores.length];
        assert.equal((await store.acquire(key, owner, 60_000)).fence, 1, `first fence for ${JSON.stringify(key)}`);
        assert.equal(await admin.get(store.keys(key).lock), owner);
        held.push([key, owner]);
      }
      for (const [key, owner] of held) {
        assert.equal(await stores[0].isLocked(key), true);
        assert.equal(await stores[0].release(key, owner), true, `release of ${JSON.stringify(key)}`);
      }
    });

    test("remainingTime is Redis's PTTL: -1 (no expiry) and -2 (no key) read as null", async () => {
      const store = stores[0];
      const ctx = newContext(stores, "pttl");
      const [key, a] = [ctx.key(), ctx.owner()];
      const { lock } = store.keys(key);
      assert.ok(fenceOf(await store.acquire(key, a, 60_000)));
      await admin.pexpire(lock, 5_000); // Redis's clock now says 5 s
      const left = await store.remainingTime(key);
      assert.ok(left > 4_000 && left <= 5_000, `remainingTime ${left} after PEXPIRE 5000`);
      await admin.persist(lock);
      assert.equal(await store.remainingTime(key), null, "a key with no expiry");
      await admin.del(lock);
      assert.equal(await store.remainingTime(key), null, "a missing key");
    });
  });
}

test("keel-lock/redis's types (pkg/stores/redis.d.ts) type-check with tsc --strict against the clients' types", { timeout: 120_000 }, () => {
  const tsc = spawnSync(process.execPath, ["node_modules/typescript/bin/tsc", "-p", "types/tsconfig.redis.json"], {
    cwd: fileURLToPath(new URL(".", import.meta.url)),
    encoding: "utf8",
  });
  assert.equal(tsc.status, 0, `tsc failed:\n${tsc.stdout}${tsc.stderr}`);
});

describe("through keel-lock's lock() (the package installed in tests/stores)", () => {
  let client;
  before(async () => {
    client = new IORedis({ port: redis.port, host: "127.0.0.1", lazyConnect: true });
    await client.connect();
  });
  after(() => client.disconnect());

  // Runs `body(keelLock)` with a Redis store set as keel-lock's store, then puts the old one back.
  async function withRedisStore(body) {
    const keelLock = await import("keel-lock");
    const previous = keelLock.getLockStore();
    const store = redisLockStore(client);
    keelLock.setLockStore(store);
    try {
      return await body(keelLock, store);
    } finally {
      keelLock.setLockStore(previous);
    }
  }

  test("an uncontended run() is two round trips: the acquire script and the release script", () =>
    withRedisStore(async ({ lock }) => {
      for (const script of [ACQUIRE_SCRIPT, RELEASE_SCRIPT]) await admin.script("LOAD", script);
      const key = newContext([], "run").key();
      await resetStats();
      assert.deepEqual(await lock(key, 60_000).run(() => 42), [true, 42]);
      assert.deepEqual(await executed(), { evalsha: 2, exists: 1, incr: 1, set: 1, get: 1, del: 1 });
    }));

  test("run() hands fn the fence the store drew; it grows from one run to the next", () =>
    withRedisStore(async ({ lock }, store) => {
      const key = newContext([], "run-fence").key();
      const fences = [];
      for (let i = 0; i < 3; i++) {
        const [ran, fence] = await lock(key, 60_000).run((context) => context.fence);
        assert.equal(ran, true);
        assert.equal(fence, Number(await admin.get(store.keys(key).fence)), "context.fence is not the counter's value");
        fences.push(fence);
      }
      assert.ok(fences[0] < fences[1] && fences[1] < fences[2], `fences ${fences}`);
    }));

  test("the stale-writer story with Lock handles: A's lock expires, B runs and writes, A's write is refused", () =>
    withRedisStore(async ({ lock }) => {
      const ctx = newContext([], "lock-stale");
      const [key, resource] = [ctx.key(), fencedResource(admin, ctx.key())];
      const a = lock(key, 300);
      assert.equal(await a.acquire(), true);
      const fenceA = a.fence;
      assert.equal(await resource.write(fenceA, "A"), true);
      await sleep(500); // A stalls past its TTL
      const [ranB, fenceB] = await lock(key, 60_000).run(async ({ fence }) => {
        assert.equal(await resource.write(fence, "B"), true, "B's write");
        return fence;
      });
      assert.equal(ranB, true);
      assert.ok(fenceB > fenceA, `B's fence ${fenceB} is not above A's ${fenceA}`);
      assert.equal(await resource.write(fenceA, "A, stale"), false, "the resource accepted A's stale write");
      assert.equal(await resource.read(), "B");
      assert.equal(await a.release(), false);
    }));
});

describe("ioredis: the store's commands sent in one tick share writes, 8 to a write; a lone caller's leave at once", () => {
  const IOREDIS = Object.entries(FLAVOURS).filter(([, flavour]) => flavour.type === "ioredis");
  const settle = () => new Promise((resolve) => setImmediate(resolve));

  // Counts the writes `socket` makes to the kernel (Node's Writable calls _writev for several
  // buffered chunks, _write for one) and the chunks they carry.
  function countWrites(socket) {
    const seen = { writes: 0, chunks: 0 };
    const { _write, _writev } = socket;
    socket._write = function (chunk, encoding, callback) {
      seen.writes++;
      seen.chunks++;
      return _write.call(this, chunk, encoding, callback);
    };
    socket._writev = function (chunks, callback) {
      seen.writes++;
      seen.chunks += chunks.length;
      return _writev.call(this, chunks, callback);
    };
    seen.restore = () => {
      socket._write = _write;
      socket._writev = _writev;
    };
    return seen;
  }

  for (const [name, flavour] of IOREDIS) {
    test(`${name}: 16 acquires sent in one tick after a lone caller's are three writes (the first at once, then 8 and 7), then 16 releases two more; a lone caller's command leaves at once; the socket is uncorked after`, async () => {
      const { client, close } = await flavour.connect();
      try {
        const store = redisLockStore(client);
        const ctx = newContext([store], "coalesce");
        const calls = Array.from({ length: 16 }, () => [ctx.key(), ctx.owner()]);
        const warm = [ctx.key(), ctx.owner()];
        await store.acquire(...warm, 60_000); // scripts cached, connection warm
        await store.release(...warm); // the last tick that sent anything sent one command
        await settle();
        const writes = countWrites(client.stream);
        try {
          const got = await Promise.all(calls.map(([key, owner]) => store.acquire(key, owner, 60_000)));
          assert.ok(got.every((g) => g && Number.isInteger(g.fence)), "every acquire granted");
          assert.deepEqual({ writes: writes.writes, chunks: writes.chunks }, { writes: 3, chunks: 16 });
          const released = await Promise.all(calls.map(([key, owner]) => store.release(key, owner)));
          assert.ok(released.every((r) => r === true), "every release answered true");
          assert.deepEqual({ writes: writes.writes, chunks: writes.chunks }, { writes: 5, chunks: 32 });
          // After a tick of 16, a lone command is corked (it leaves at the end of its tick); the
          // one after it, a lone caller's again, leaves while the store is still sending it.
          const lone = [ctx.key(), ctx.owner()];
          const acquired = store.acquire(...lone, 60_000);
          assert.equal(writes.writes, 5, "the command after a tick of 16 was written before the end of its tick");
          assert.ok(fenceOf(await acquired));
          assert.equal(writes.writes, 6);
          const releasing = store.release(...lone);
          assert.equal(writes.writes, 7, "a lone caller's command was held back to the end of the tick");
          assert.equal(await releasing, true);
        } finally {
          writes.restore();
        }
        await settle();
        assert.equal(client.stream.writableCorked, 0, "the socket stayed corked");
        // A command of the application's own, sent later, leaves at once.
        await client.set(ctx.key(), "x");
      } finally {
        await close();
      }
    });

    test(`${name}: the store hands ioredis its keys and arguments as arrays; a client keyPrefix applies to every name, not to the arguments`, async () => {
      const Ctor = name === "ioredis 6" ? (IORedis6.default ?? IORedis6) : IORedis;
      const client = new Ctor({ port: redis.port, host: "127.0.0.1", lazyConnect: true, keyPrefix: "kp:" });
      await client.connect();
      try {
        const store = redisLockStore(client);
        const ctx = newContext([store], "key-prefix");
        const [key, a, b] = [ctx.key(), ctx.owner(), ctx.owner()];
        const names = store.keys(key);
        const first = fenceOf(await store.acquire(key, a, 60_000));
        assert.equal(await admin.get(`kp:${names.lock}`), a, "the lock, under the client's prefix, holds the owner");
        assert.equal(await admin.get(`kp:${names.fence}`), String(first));
        assert.equal(await admin.exists(names.lock, names.fence), 0, "a name without the prefix was written");
        assert.ok((await admin.pttl(`kp:${names.lock}`)) > 50_000);
        assert.equal(await store.acquire(key, b, 60_000), false);
        assert.equal(await store.extend(key, a, 90_000), true);
        assert.ok((await admin.pttl(`kp:${names.lock}`)) > 80_000);
        assert.equal(await store.release(key, b), false);
        assert.equal(await store.release(key, a), true);
        assert.equal(await admin.exists(`kp:${names.lock}`), 0);
        assert.equal(fenceOf(await store.acquire(key, b, 60_000)), first + 1);
        assert.equal(await store.release(key, b), true);
        await admin.del(`kp:${names.fence}`);
      } finally {
        client.disconnect();
      }
    });

    test(`${name}: a store on a client that is not connected yet works (ioredis queues the commands; nothing is corked)`, async () => {
      const Ctor = name === "ioredis 6" ? (IORedis6.default ?? IORedis6) : IORedis;
      const client = new Ctor({ port: redis.port, host: "127.0.0.1", lazyConnect: true });
      try {
        const store = redisLockStore(client);
        const ctx = newContext([store], "coalesce-offline");
        const [key, owner] = [ctx.key(), ctx.owner()];
        assert.notEqual(client.status, "ready");
        assert.ok(fenceOf(await store.acquire(key, owner, 60_000)));
        assert.equal(await store.release(key, owner), true);
        await settle();
        assert.equal(client.stream.writableCorked, 0);
      } finally {
        client.disconnect();
      }
    });
  }
});

describe("the fence counter's limits", () => {
  let client;
  before(async () => {
    client = new IORedis({ port: redis.port, host: "127.0.0.1", lazyConnect: true });
    await client.connect();
  });
  after(() => client.disconnect());

  test("the last fence is 2^53-1; after it acquire fails and takes no lock", async () => {
    const store = redisLockStore(client);
    const ctx = newContext([store], "max");
    const [key, a, b] = [ctx.key(), ctx.owner(), ctx.owner()];
    await admin.set(store.keys(key).fence, String(MAX_FENCE - 1));
    assert.deepEqual(await store.acquire(key, a, 60_000), { fence: MAX_FENCE });
    assert.equal(await store.release(key, a), true);
    for (let i = 0; i < 2; i++) {
      await assert.rejects(store.acquire(key, b, 60_000), /fence counter .* is outside 1\.\.9007199254740991/);
      assert.equal(await store.isLocked(key), false, "a lock was taken without a fence");
      assert.equal(await admin.get(store.keys(key).fence), String(MAX_FENCE), "the counter moved");
    }
  });

  test("a counter that is not a positive integer fails the acquire and takes no lock", async () => {
    const store = redisLockStore(client);
    const ctx = newContext([store], "garbage");
    for (const value of ["not a number", "-1", "-9007199254740991", "1.5"]) {
      const key = ctx.key();
      await admin.set(store.keys(key).fence, value);
      for (let i = 0; i < 2; i++) {
        await assert.rejects(store.acquire(key, ctx.owner(), 60_000), Error, `counter ${value}`);
        assert.equal(await store.isLocked(key), false, `a lock was taken with counter ${value}`);
        assert.equal(await admin.get(store.keys(key).fence), value, `the counter ${value} moved`);
      }
    }
  });
});


describe("the stale-writer story: a fenced resource refuses the holder whose lock expired", () => {
  let a;
  let b;
  before(async () => {
    a = new IORedis({ port: redis.port, host: "127.0.0.1", lazyConnect: true });
    await a.connect();
    b = createNodeRedis({ url: redis.url });
    b.on("error", () => {});
    await b.connect();
  });
  after(async () => {
    a.disconnect();
    await b.quit();
  });

  test("the recipe in pkg/stores/README.md is the script tested here", () => {
    const readme = readFileSync(new URL("../../pkg/stores/README.md", import.meta.url), "utf8");
    const blocks = [...readme.matchAll(/```lua\n([\s\S]*?)```/g)].map((m) => m[1]);
    assert.ok(blocks.includes(FENCED_WRITE_SCRIPT), "pkg/stores/README.md has no lua block equal to FENCED_WRITE_SCRIPT");
  });

  test("A (ioredis) stalls past its TTL, B (node-redis) takes over and writes, A's late write is refused", async () => {
    const ctx = newContext([], "stale");
    const resource = fencedResource(admin, ctx.key());
    const { fenceA, fenceB } = await staleWriterStory({
      storeA: redisLockStore(a),
      storeB: redisLockStore(b),
      key: ctx.key(),
      ownerA: ctx.owner(),
      ownerB: ctx.owner(),
      resource,
    });
    assert.ok(fenceB > fenceA);
    assert.deepEqual(await admin.hgetall(resource.key), { fence: String(fenceB), value: "B, again" });
  });

  test("the resource refuses a fence that is not a positive integer", async () => {
    const resource = fencedResource(admin, newContext([], "bad-fence").key());
    for (const fence of ["", "x", "0", "-3", "1.5"]) {
      await assert.rejects(resource.write(fence, "v"), /fence must be a positive integer/, `fence ${JSON.stringify(fence)}`);
    }
    assert.equal(await resource.read(), null);
  });

  test("the story fails when the resource does not check fences", async () => {
    const ctx = newContext([], "unfenced");
    const key = ctx.key();
    const unfenced = {
      write: async (fence, value) => (await admin.set(key, value)) === "OK",
      read: () => admin.get(key),
    };
    await assert.rejects(
      staleWriterStory({ storeA: redisLockStore(a), storeB: redisLockStore(b), key: ctx.key(), ownerA: ctx.owner(), ownerB: ctx.owner(), resource: unfenced }),
      /the resource accepted the stale holder's write/,
    );
  });

  test("the story fails when the store's counter expires with the lock (fences reused)", async () => {
    const ctx = newContext([], "reused");
    await assert.rejects(
      staleWriterStory({
        storeA: BROKEN_FENCES["counter expires with the lock"](a),
        storeB: BROKEN_FENCES["counter expires with the lock"](a),
        key: ctx.key(),
        ownerA: ctx.owner(),
        ownerB: ctx.owner(),
        resource: fencedResource(admin, ctx.key()),
      }),
      /B's fence \d+ is not above A's \d+/,
    );
  });
});

// The checks above can fail: run them against deliberately broken stores over the same server
// and make sure each breakage is caught by the check written for it.
describe("the contract and fence checks catch broken stores", () => {
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
        const { lock } = redisLockKeys(key);
        if ((await client.exists(lock)) === 1) return false;
        await client.set(lock, owner, "PX", ttl);
        return true;
      },
    }),
    // Delete without comparing the owner.
    "release without the owner check": (client) => ({
      ...correct(client),
      async release(key) {
        return (await client.del(redisLockKeys(key).lock)) === 1;
      },
    }),
    // Extend by SET, reviving whatever was there.
    "extend without the owner check": (client) => ({
      ...correct(client),
      async extend(key, owner, ttl) {
        return (await client.set(redisLockKeys(key).lock, owner, "PX", ttl)) === "OK";
      },
    }),
  };
  // The conformance kit's properties (keel-lock/testing) that each breakage must fail.
  const expectedFailures = {
    "non-atomic acquire": ["concurrent_acquires_have_one_winner", "concurrent_acquires_of_expired_key_have_one_winner"],
    "release without the owner check": ["release_requires_owner", "late_release_keeps_new_holder"],
    "extend without the owner check": ["extend_requires_owner", "extend_after_expiry_fails", "late_release_keeps_new_holder"],
  };

  for (const [label, make] of Object.entries(broken)) {
    test(`${label} is caught by the conformance kit`, { timeout: 60_000 }, async () => {
      const results = await lockStoreResults(make(clients[0]), { keyPrefix: `broken:${label}:`, shortTtlMs: 300, settleMs: 200 });
      const failed = results.filter((r) => !r.ok).map((r) => r.property);
      for (const name of expectedFailures[label]) {
        assert.ok(failed.includes(name), `"${name}" did not catch ${label}; failures: ${JSON.stringify(failed)}`);
      }
    });
  }

  // [checks that must fail, checks that may fail] for each broken store. A counter per
  // connection passes the rounds check when one connection happens to win every round.
  const [, acrossRelease, acrossExpiry, rounds, holders] = FENCE_CHECKS.map((c) => c.name);
  const expectedFenceFailures = {
    "counter expires with the lock": [[acrossExpiry], []],
    "counter reset on release": [[acrossRelease, rounds, holders], []],
    "a counter per connection": [[acrossRelease, acrossExpiry, holders], [rounds]],
  };
  for (const [label, make] of Object.entries(BROKEN_FENCES)) {
    test(`fences: ${label} is caught`, { timeout: 120_000 }, async () => {
      const ctx = newContext(clients.map(make), "broken-fence");
      assert.deepEqual(await runChecks(ctx), [], `${label} is still a correct lock`);
      const failures = await runFenceChecks(ctx);
      const failed = failures.map((f) => f.name);
      const [must, may] = expectedFenceFailures[label];
      for (const name of must) {
        assert.ok(failed.includes(name), `"${name}" did not catch ${label}; failures: ${JSON.stringify(failures)}`);
      }
      for (const name of failed) {
        assert.ok(must.includes(name) || may.includes(name), `"${name}" failed on ${label} for another reason: ${JSON.stringify(failures)}`);
      }
    });
  }

  test("the correct store passes every check", { timeout: 120_000 }, async () => {
    const ctx = newContext(clients.map(correct), "correct");
    assert.deepEqual(await runChecks(ctx), []);
    assert.deepEqual(await runFenceChecks(ctx), []);
  });
});
