// redisLockStore's waitForReplicas against real redis-servers started here: a primary with one
// replica (through ioredis 5 and 6, node-redis 5 and 4), a three-master Redis Cluster with a
// replica each (the four cluster clients), and a server that refuses WAIT. A case that needs the
// replica to acknowledge starts once the replica is online, caught up to the primary's offset and
// acknowledging a WAIT of the test's own, and gives the store's WAIT 10 s. A replica is made to
// lag by SIGSTOP once it has acknowledged every write made so far (it then reads nothing and
// acknowledges nothing; the test waits until the process shows it stopped): then every grant —
// acquire, acquireShared, acquireMany, acquireOrWait taken at once or handed over,
// acquireSharedOrWait handed over — is given back and rejects with
// LockNotReplicatedError, and an extend rejects and leaves the hold as it was. Each refusal is
// set against the same call on a store without the option, which the same server grants, so a
// store that ignored the option fails here. A hand-over is made by another connection's script:
// a WAIT on the waiter's connection alone would count the waiter's own enqueue (acknowledged
// before the pause) and pass, so that case fails unless the store confirms the hold first.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, test } from "node:test";
import IORedis from "ioredis";
import IORedis6 from "ioredis6";
import { createClient as createNodeRedis, createCluster as createNodeRedisCluster } from "redis";
import { createClient as createNodeRedis4, createCluster as createNodeRedisCluster4 } from "redis4";
import { Redis as Upstash } from "@upstash/redis";
import { redisLockStore, LockNotReplicatedError } from "../../pkg/stores/redis.js";
import { ioredisCluster, nodeRedisCluster, replicasCaughtUp, sleep, startRedis, startRedisCluster, startRedisReplicated, untilStopped } from "./lib/servers.js";

const LONG = 60_000;
// Where the replica runs and must acknowledge: a WAIT a loaded machine answers in time.
const HEALTHY_WAIT = { replicas: 1, timeoutMs: 10_000 };
// Where the replica is stopped and the refusal is the outcome checked: the timeout only decides
// how soon WAIT answers 0.
const SHORT_WAIT = { replicas: 1, timeoutMs: 100 };
const tag = () => randomBytes(4).toString("hex");
const owner = (label = "o") => `${label}-${randomBytes(6).toString("hex")}`;

/** Asserts that `promise` rejects with LockNotReplicatedError for `operation`, and answers it. */
async function notReplicated(promise, operation, fields = {}) {
  let error = null;
  try {
    await promise;
  } catch (e) {
    error = e;
  }
  assert.ok(error, `${operation} was answered although the replica never acknowledged it`);
  assert.ok(error instanceof LockNotReplicatedError, `${operation} failed with ${error}`);
  assert.equal(error.name, "LockNotReplicatedError");
  assert.equal(error.operation, operation);
  assert.equal(error.required, 1);
  for (const [name, value] of Object.entries(fields)) assert.equal(error[name], value, `${operation}: ${name}`);
  return error;
}

/** Resolves once `count` callers are queued for `key` (read with the plain client `admin`). */
async function queued(admin, store, key, count = 1) {
  const deadline = Date.now() + 10_000;
  while ((await admin.llen(`${store.keys(key).lock}:queue`)) < count) {
    assert.ok(Date.now() < deadline, `no waiter queued for ${key}`);
    await sleep(5);
  }
}

test("waitForReplicas is checked: an object of two whole numbers, and a client with a connection", async () => {
  const client = new IORedis({ lazyConnect: true });
  try {
    const bad = [
      [null, TypeError],
      [1, TypeError],
      [[1, 100], TypeError],
      [{}, TypeError],
      [{ replicas: 1 }, TypeError],
      [{ timeoutMs: 100 }, TypeError],
      [{ replicas: "1", timeoutMs: 100 }, TypeError],
      [{ replicas: 1, timeoutMs: 100, timeout: 5 }, TypeError],
      [{ replicas: 0, timeoutMs: 100 }, RangeError],
      [{ replicas: 1.5, timeoutMs: 100 }, RangeError],
      [{ replicas: -1, timeoutMs: 100 }, RangeError],
      [{ replicas: 1, timeoutMs: 0 }, RangeError],
      [{ replicas: 1, timeoutMs: 2.5 }, RangeError],
      [{ replicas: 1, timeoutMs: 2 ** 31 }, RangeError],
      [{ replicas: 1, timeoutMs: Number.NaN }, RangeError],
    ];
    for (const [waitForReplicas, kind] of bad) {
      assert.throws(() => redisLockStore(client, { waitForReplicas }), kind, JSON.stringify(waitForReplicas));
    }
    assert.throws(() => redisLockStore(client, { waitForReplicas: { replicas: 1, timeoutMs: 100, timeout: 5 } }), /not "timeout"/);
    // Upstash's REST API sends each command on its own: WAIT has no connection to count.
    const rest = new Upstash({ url: "http://127.0.0.1:1", token: "t", retry: false });
    assert.throws(() => redisLockStore(rest, { waitForReplicas: SHORT_WAIT }), /waitForReplicas needs a connection/);
    assert.ok(redisLockStore(rest));
    assert.ok(redisLockStore(client, { waitForReplicas: { replicas: 2, timeoutMs: 1 } }));
    assert.ok(redisLockStore(client, { waitForReplicas: undefined }));
  } finally {
    client.disconnect();
  }
});

describe("a primary with one replica (started here)", () => {
  let servers;
  let admin; // plain ioredis on the primary
  let replicaReader; // plain ioredis on the replica

  before(async () => {
    servers = await startRedisReplicated({ replicas: 1 });
    admin = new IORedis({ port: servers.port, host: "127.0.0.1" });
    replicaReader = new IORedis({ port: servers.replicas[0].port, host: "127.0.0.1" });
  });

  after(async () => {
    admin?.disconnect();
    replicaReader?.disconnect();
    await servers?.stop();
  });

  const FLAVOURS = {
    "ioredis 5": async () => {
      const client = new IORedis({ port: servers.port, host: "127.0.0.1", lazyConnect: true });
      await client.connect();
      return { client, close: () => client.disconnect() };
    },
    "ioredis 6": async () => {
      const Ctor = IORedis6.default ?? IORedis6;
      const client = new Ctor({ port: servers.port, host: "127.0.0.1", lazyConnect: true });
      await client.connect();
      return { client, close: () => client.disconnect() };
    },
    "node-redis 5": async () => {
      const client = createNodeRedis({ url: servers.url });
      client.on("error", () => {});
      await client.connect();
      return { client, close: () => client.quit() };
    },
    "node-redis 4": async () => {
      const client = createNodeRedis4({ url: servers.url });
      client.on("error", () => {});
      await client.connect();
      return { client, close: () => client.quit() };
    },
  };

  for (const [label, connect] of Object.entries(FLAVOURS)) {
    describe(label, () => {
      let conn;
      let plainConn;
      let waiting; // the option on, with a WAIT timeout a running replica meets
      let lagging; // the option on, with a short WAIT timeout, for the cases where the replica is stopped
      let plain; // the same server, no option
      const key = (what) => `keel-test:replicas:${label}:${what}:${tag()}`;

      before(async () => {
        conn = await connect();
        plainConn = await connect();
        waiting = redisLockStore(conn.client, { waitForReplicas: HEALTHY_WAIT });
        lagging = redisLockStore(conn.client, { waitForReplicas: SHORT_WAIT });
        plain = redisLockStore(plainConn.client);
      });

      after(async () => {
        await waiting?.close?.();
        await lagging?.close?.();
        await plain?.close?.();
        await conn?.close();
        await plainConn?.close();
      });

      test("grants are answered once the replica has them", async () => {
        await servers.inSync();
        const k = key("healthy");
        const o = owner();
        const got = await waiting.acquire(k, o, LONG);
        assert.ok(got && got.fence >= 1);
        // Read from the replica right after the answer: it acknowledged the grant before it.
        assert.equal(await replicaReader.get(waiting.keys(k).lock), o);
        assert.equal(await waiting.extend(k, o, LONG), true);
        const next = owner("next");
        const handed = waiting.acquireOrWait(k, next, LONG, 10_000, 50);
        await queued(admin, waiting, k);
        assert.equal(await plain.release(k, o), true);
        const grant = await handed;
        assert.equal(grant.fence, got.fence + 1);
        assert.match(await replicaReader.get(waiting.keys(k).lock), new RegExp(next));
        assert.equal(await waiting.release(k, next), true);

        const s = key("shared");
        const reader = owner("r");
        assert.ok((await waiting.acquireShared(s, reader, LONG, 1, 4)).fence >= 1);
        assert.ok(Number(await replicaReader.zscore(waiting.keys(s).lock, reader)) > 0);
        assert.equal(await waiting.release(s, reader), true);

        const [a, b] = [key("many-a"), key("many-b")].sort();
        const many = await waiting.acquireMany([a, b], [owner("a"), owner("b")], LONG);
        assert.equal(many.length, 2);
        assert.equal(await replicaReader.exists(waiting.keys(a).lock, waiting.keys(b).lock), 2);
      });

      test("a lagging replica: each grant is given back and rejects, where the store without the option grants", async () => {
        const replica = servers.replicas[0];
        // Queued before the pause: handed the key while the replica lags.
        const handedKey = key("handed");
        const holder = owner("holder");
        assert.ok(await plain.acquire(handedKey, holder, LONG));
        const waiter = owner("waiter");
        const handed = lagging.acquireOrWait(handedKey, waiter, LONG, 10_000, 50);
        handed.catch(() => {});
        await queued(admin, lagging, handedKey);
        // The shared waiter on a connection of its own: no write of another case moves its offset.
        const readerConn = await connect();
        const readerStore = redisLockStore(readerConn.client, { waitForReplicas: SHORT_WAIT });
        const sharedKey = key("shared-handed");
        const writer = owner("writer");
        assert.ok(await plain.acquire(sharedKey, writer, LONG));
        const reader = owner("reader");
        const readerHanded = readerStore.acquireSharedOrWait(sharedKey, reader, LONG, 1, 4, 10_000, 50);
        readerHanded.catch(() => {});
        await queued(admin, lagging, sharedKey);

        // In sync (the enqueues acknowledged), then stopped.
        await replica.pause();
        try {
          // Hand-overs first: nothing this store's connection writes after the pause comes before.
          assert.equal(await plain.release(handedKey, holder), true);
          await notReplicated(handed, "acquireOrWait", { acknowledged: 0, released: true });
          assert.equal(await admin.exists(lagging.keys(handedKey).lock), 0, "the handed-over key was not given back");
          assert.equal(await plain.release(sharedKey, writer), true);
          await notReplicated(readerHanded, "acquireSharedOrWait", { acknowledged: 0, released: true });
          assert.equal(await admin.exists(lagging.keys(sharedKey).lock), 0);

          const k = key("acquire");
          await notReplicated(lagging.acquire(k, owner(), LONG), "acquire", { acknowledged: 0, released: true });
          assert.equal(await admin.exists(lagging.keys(k).lock), 0, "the grant was not given back");
          const control = owner("control");
          assert.ok(await plain.acquire(k, control, LONG), "the store without the option was refused");
          assert.equal(await plain.release(k, control), true);

          const s = key("acquire-shared");
          await notReplicated(lagging.acquireShared(s, owner(), LONG, 1, 4), "acquireShared", { acknowledged: 0, released: true });
          assert.equal(await admin.exists(lagging.keys(s).lock), 0);
          assert.ok((await plain.acquireShared(s, owner(), LONG, 1, 4)).fence >= 1);

          const [a, b] = [key("many-a"), key("many-b")].sort();
          await notReplicated(lagging.acquireMany([a, b], [owner("a"), owner("b")], LONG), "acquireMany", { released: true });
          assert.equal(await admin.exists(lagging.keys(a).lock, lagging.keys(b).lock), 0);
          assert.equal((await plain.acquireMany([a, b], [owner("a"), owner("b")], LONG)).length, 2);

          const w = key("wait-free");
          await notReplicated(lagging.acquireOrWait(w, owner(), LONG, 5_000, 50), "acquireOrWait", { acknowledged: 0, released: true });
          assert.equal(await admin.exists(lagging.keys(w).lock), 0);

          // Extend: the hold stays, with the expiry it had.
          const e = key("extend");
          const extender = owner("extender");
          assert.ok(await plain.acquire(e, extender, 30_000));
          await notReplicated(lagging.extend(e, extender, LONG), "extend", { acknowledged: 0 });
          assert.equal(await plain.isLocked(e), true);
          assert.equal(await plain.extend(e, extender, 30_000), true);
        } finally {
          replica.resume();
          await readerStore.close?.();
          await readerConn.close();
        }
        // Caught up again: grants pass.
        await servers.inSync();
        const k = key("after");
        assert.ok(await waiting.acquire(k, owner(), LONG));
      });
    });
  }
});

test("a server that refuses WAIT: the grant is given back and the error says so", async () => {
  const redis = await startRedis({ args: ["--rename-command", "WAIT", ""] });
  const clients = [];
  try {
    const io = new IORedis({ port: redis.port, host: "127.0.0.1" });
    clients.push(() => io.disconnect());
    const node = createNodeRedis({ url: redis.url });
    node.on("error", () => {});
    await node.connect();
    clients.push(() => node.quit());
    for (const client of [io, node]) {
      const store = redisLockStore(client, { waitForReplicas: SHORT_WAIT });
      const k = `keel-test:replicas:refused:${tag()}`;
      const error = await notReplicated(store.acquire(k, owner(), LONG), "acquire", { acknowledged: null, released: true });
      assert.match(error.message, /WAIT failed/);
      assert.match(error.message, /unknown command/i);
      assert.match(error.message, /needs a server that accepts WAIT/);
      assert.ok(error.cause instanceof Error);
      assert.equal(await io.exists(store.keys(k).lock), 0);
      assert.ok(await redisLockStore(client).acquire(k, owner(), LONG), "the store without the option was refused");
    }
  } finally {
    for (const close of clients) await close();
    await redis.stop();
  }
});

describe("a Redis Cluster with a replica per master (started here)", () => {
  let cluster;
  let masters; // port → { client (plain ioredis), replica: { pid } }

  before(async () => {
    cluster = await startRedisCluster({ masters: 3, replicas: 1, args: ["--repl-diskless-sync-delay", "0"] });
    const first = new IORedis({ port: cluster.nodes[0].port, host: "127.0.0.1" });
    try {
      // Every replica online before the tests pause one.
      const deadline = Date.now() + 30_000;
      for (;;) {
        const lines = String(await first.call("CLUSTER", "NODES")).trim().split("\n").map((l) => l.split(" "));
        const ids = new Map(lines.map(([id, address]) => [id, Number(address.split("@")[0].split(":")[1])]));
        masters = new Map();
        for (const [id, , flags] of lines) if (/master/.test(flags)) masters.set(ids.get(id), { client: null, replica: null });
        for (const [, address, flags, masterId] of lines) {
          if (!/slave/.test(flags)) continue;
          const port = Number(address.split("@")[0].split(":")[1]);
          const m = masters.get(ids.get(masterId));
          if (m) m.replica = cluster.nodes.find((n) => n.port === port);
        }
        let online = masters.size === 3 && [...masters.values()].every((m) => m.replica);
        for (const port of online ? masters.keys() : []) {
          const node = new IORedis({ port, host: "127.0.0.1", lazyConnect: true });
          const info = String(await node.call("INFO", "replication").catch(() => ""));
          node.disconnect();
          if (!/slave0:.*state=online/.test(info)) online = false;
        }
        if (online) break;
        assert.ok(Date.now() < deadline, "the replicas never came online");
        await sleep(50);
      }
    } finally {
      first.disconnect();
    }
    for (const [port, m] of masters) m.client = new IORedis({ port, host: "127.0.0.1" });
  });

  after(async () => {
    for (const m of masters?.values() ?? []) m.client.disconnect();
    await cluster?.stop();
  });

  // The master serving `name`'s slot.
  const masterOf = async (name) => {
    const [m] = masters.values();
    const slot = Number(await m.client.call("CLUSTER", "KEYSLOT", name));
    for (const [from, to, [, port]] of await m.client.call("CLUSTER", "SLOTS")) if (slot >= from && slot <= to) return Number(port);
    throw new Error(`no master for slot ${slot}`);
  };

  // Two keys of `store` on different masters, and their masters' ports.
  const twoKeys = async (store, label) => {
    const a = `keel-test:replicas:${label}:a:${tag()}`;
    const at = await masterOf(store.keys(a).lock);
    for (;;) {
      const b = `keel-test:replicas:${label}:b:${tag()}`;
      const bAt = await masterOf(store.keys(b).lock);
      if (bAt !== at) return { a, b, at, bAt };
    }
  };

  // Resolves once the replica of master `port` is online, caught up and acknowledging; `name` is
  // a Redis name in that master's slots (written for the WAIT).
  const inSync = (port, name) => replicasCaughtUp(port, [masters.get(port).replica.port], { syncKey: `${name}:sync` });

  // SIGSTOPs the replica of master `port` once it is in sync, and resolves once it has stopped.
  const pauseReplicaOf = async (port, name) => {
    const m = masters.get(port);
    await inSync(port, name);
    process.kill(m.replica.pid, "SIGSTOP");
    await untilStopped(m.replica.pid);
    return () => process.kill(m.replica.pid, "SIGCONT");
  };

  const CLIENTS = {
    "ioredis 5 Cluster": async () => {
      const client = await ioredisCluster(IORedis, cluster);
      return { client, close: () => client.disconnect() };
    },
    "ioredis 6 Cluster": async () => {
      const client = await ioredisCluster(IORedis6, cluster);
      return { client, close: () => client.disconnect() };
    },
    "node-redis 5 createCluster": async () => {
      const client = await nodeRedisCluster(createNodeRedisCluster, cluster);
      return { client, close: () => client.quit() };
    },
    "node-redis 4 createCluster": async () => {
      const client = await nodeRedisCluster(createNodeRedisCluster4, cluster);
      return { client, close: () => client.quit() };
    },
  };

  for (const [label, connect] of Object.entries(CLIENTS)) {
    test(`${label}: WAIT goes to the master of the key's slot`, async () => {
      const conn = await connect();
      const store = redisLockStore(conn.client, { waitForReplicas: HEALTHY_WAIT });
      const lagging = redisLockStore(conn.client, { waitForReplicas: SHORT_WAIT });
      const plain = redisLockStore(conn.client);
      try {
        const { a, b, at, bAt } = await twoKeys(store, label.replace(/ /g, "-"));
        const [lockA, lockB] = [store.keys(a).lock, store.keys(b).lock];
        await inSync(at, lockA);
        await inSync(bAt, lockB);
        const oa = owner();
        assert.ok(await store.acquire(a, oa, LONG));
        assert.equal(await store.release(a, oa), true);
        // A's master's replica lags: A's grant is given back; B's master is another, whose replica
        // acknowledges, so B is granted (a WAIT sent to the wrong master fails one or the other).
        const resume = await pauseReplicaOf(at, lockA);
        try {
          await notReplicated(lagging.acquire(a, owner(), LONG), "acquire", { acknowledged: 0, released: true });
          assert.equal(await plain.isLocked(a), false);
          const ob = owner();
          assert.ok(await store.acquire(b, ob, LONG), "a key on a master with a live replica was refused");
          assert.equal(await store.release(b, ob), true);
          const control = owner();
          assert.ok(await plain.acquire(a, control, LONG));
          assert.equal(await plain.release(a, control), true);
        } finally {
          resume();
        }
        await inSync(at, lockA);
        assert.ok(await store.acquire(a, owner(), LONG));
      } finally {
        await store.close?.();
        await lagging.close?.();
        await conn.close();
      }
    });
  }
});
