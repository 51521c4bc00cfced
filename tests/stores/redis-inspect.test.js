// Hold metadata and inspect(key) on Redis: redisLockStore (pkg/stores from the source tree) on a
// real redis-server and on a real three-master Redis Cluster started here, through ioredis 5 and
// 6, node-redis 5 and 4 (and their cluster clients) and @upstash/redis through the REST fixture.
// Each hold keeps the metadata it was given at acquisition — exclusive, shared, several keys at
// once, and a waiter's, given when it queued, once it is handed the key — through extend, and
// loses it on release, expiry and force-release; inspect answers the live holds with their own
// fences, the live waiters, and never an owner token. What is left in Redis is read back with
// SCAN: once every hold is gone, only the fence counter remains (or a grant record, with its TTL).
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { after, before, describe, test } from "node:test";
import IORedis from "ioredis";
import IORedis6 from "ioredis6";
import { createCluster as createNodeRedisCluster } from "redis";
import { createCluster as createNodeRedisCluster4 } from "redis4";
import { ENQUEUE_SCRIPT, INSPECT_SCRIPT, INSPECT_SHA, redisLockStore } from "../../pkg/stores/redis.js";
import * as scripts from "../../pkg/stores/redis-scripts.js";
import { keySlot } from "../../pkg/stores/redis-clients.js";
import { useRedis } from "./lib/redis-fixture.js";
import { ioredisCluster, nodeRedisCluster, sleep, startRedisCluster } from "./lib/servers.js";

const LONG = 60_000;
const sha1 = (text) => createHash("sha1").update(text).digest("hex");
const tag = () => randomBytes(4).toString("hex");
// Owner tokens long and random enough that finding one in an answer cannot be chance.
const owner = (label = "o") => `${label}-${randomBytes(12).toString("hex")}`;
const FREE = { holders: [], waiting: 0 };

/** Asserts that none of `owners` appears anywhere in `answer` (as JSON). */
function noOwnerIn(answer, owners) {
  const text = JSON.stringify(answer);
  for (const o of owners) assert.ok(!text.includes(o), `the owner token ${o} is in ${text}`);
  for (const holder of answer.holders) assert.deepEqual(Object.keys(holder).sort(), ["fence", "metadata", "remainingMs"]);
  assert.deepEqual(Object.keys(answer).sort(), ["holders", "waiting"]);
}

/** Every Redis name under `prefix` (SCAN), sorted; on a cluster, of every master. */
async function namesUnder(nodes, prefix) {
  const names = [];
  for (const node of nodes) {
    let cursor = "0";
    do {
      const [next, batch] = await node.scan(cursor, "MATCH", `${prefix}*`, "COUNT", 1000);
      names.push(...batch);
      cursor = next;
    } while (cursor !== "0");
  }
  return names.sort();
}

/** Asserts that of `key`'s names only the fence counter is left in Redis. */
async function onlyCounterLeft(nodes, store, key) {
  const { lock, fence } = store.keys(key);
  assert.deepEqual(await namesUnder(nodes, lock), [fence], `names of ${key} left behind`);
}

/** Resolves once `count` live waiters are queued for `key`, as inspect counts them. */
async function waitingFor(store, key, count) {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const info = await store.inspect(key);
    if (info.waiting >= count) return info;
    assert.ok(Date.now() < deadline, `${count} waiters never queued for ${key} (${info.waiting})`);
    await sleep(5);
  }
}

test("INSPECT_SHA is the SHA-1 of INSPECT_SCRIPT, and every script's SHA its text's", () => {
  assert.equal(INSPECT_SHA, sha1(INSPECT_SCRIPT));
  for (const name of Object.keys(scripts).filter((n) => n.endsWith("_SCRIPT"))) {
    assert.equal(scripts[name.replace(/_SCRIPT$/, "_SHA")], sha1(scripts[name]), name);
  }
});

// The cases every client runs. `env()` answers { nodes (plain connections to every master, for
// SCAN), storeOf(options) (a store on a new connection of this client), waits (the client has
// acquireOrWait) }.
function registerCases(env, label) {
  const key = (what) => `inspect:${label}:${what}:${tag()}`;

  test(`${label}: a free key has no holders and nobody waiting`, async () => {
    const store = await env().storeOf();
    assert.equal(typeof store.inspect, "function");
    assert.deepEqual(await store.inspect(key("free")), FREE);
  });

  test(`${label}: a lock with metadata: one holder with it and the grant's fence, remainingMs within the TTL and falling; extend keeps it; release drops it`, async () => {
    const store = await env().storeOf();
    const k = key("exclusive");
    const [a, b] = [owner("a"), owner("b")];
    // an earlier holder, so the fence is not 1
    assert.ok(await store.acquire(k, a, LONG));
    assert.equal(await store.release(k, a), true);
    const metadata = 'worker 7 · pid 4242 {"since":"12:00"}';
    const got = await store.acquire(k, b, 30_000, metadata);
    assert.equal(got.fence, 2);
    const first = await store.inspect(k);
    assert.equal(first.holders.length, 1);
    assert.deepEqual({ ...first.holders[0], remainingMs: 0 }, { metadata, fence: got.fence, remainingMs: 0 });
    assert.ok(first.holders[0].remainingMs > 20_000 && first.holders[0].remainingMs <= 30_000, `remainingMs ${first.holders[0].remainingMs}`);
    assert.equal(first.waiting, 0);
    noOwnerIn(first, [a, b]);
    await sleep(60);
    const later = await store.inspect(k);
    assert.ok(later.holders[0].remainingMs < first.holders[0].remainingMs, `remainingMs does not fall: ${first.holders[0].remainingMs} then ${later.holders[0].remainingMs}`);
    assert.equal(await store.extend(k, b, LONG), true);
    const extended = await store.inspect(k);
    assert.equal(extended.holders[0].metadata, metadata, "extend keeps the metadata");
    assert.equal(extended.holders[0].fence, got.fence);
    assert.ok(extended.holders[0].remainingMs > 50_000, `extended to ${extended.holders[0].remainingMs}`);
    assert.equal(await store.release(k, a), false, "an earlier holder does not release it");
    assert.equal(await store.release(k, b), true);
    assert.deepEqual(await store.inspect(k), FREE);
    await onlyCounterLeft(env().nodes, store, k);
  });

  test(`${label}: a lock without metadata is listed with metadata null; one whose TTL ran out is gone, and nothing of it is left`, async () => {
    const store = await env().storeOf();
    const k = key("expiry");
    const o = owner();
    const got = await store.acquire(k, o, LONG);
    assert.deepEqual((await store.inspect(k)).holders.map(({ metadata, fence }) => ({ metadata, fence })), [{ metadata: null, fence: got.fence }]);
    assert.equal(await store.release(k, o), true);
    // Held for the inspect right after it (on a loaded machine too), then given a TTL of 150 ms
    // that runs out.
    const short = await store.acquire(k, o, LONG, "short-lived");
    assert.equal((await store.inspect(k)).holders[0].metadata, "short-lived");
    assert.equal(await store.extend(k, o, 150), true);
    await sleep(250);
    assert.deepEqual(await store.inspect(k), FREE);
    await onlyCounterLeft(env().nodes, store, k);
    assert.ok(short.fence > got.fence);
  });

  test(`${label}: permits with different metadata are each listed with their own fence, in fence order; a release drops its holder`, async () => {
    const store = await env().storeOf();
    const other = await env().storeOf();
    const k = key("permits");
    const owners = [owner("p1"), owner("p2"), owner("p3"), owner("p4")];
    const grants = [
      await store.acquireShared(k, owners[0], LONG, 1, 5, "first permit"),
      await other.acquireShared(k, owners[1], 20_000, 2, 5), // no metadata, weight 2
      await store.acquireShared(k, owners[2], 30_000, 1, 5, "third"),
      await other.acquireShared(k, owners[3], 40_000, 1, 5, ""),
    ];
    for (const g of grants) assert.ok(g && g.fence >= 1, JSON.stringify(g));
    const info = await store.inspect(k);
    noOwnerIn(info, owners);
    assert.equal(info.waiting, 0);
    assert.deepEqual(
      info.holders.map(({ metadata, fence }) => ({ metadata, fence })),
      [
        { metadata: "first permit", fence: grants[0].fence },
        { metadata: null, fence: grants[1].fence },
        { metadata: "third", fence: grants[2].fence },
        { metadata: "", fence: grants[3].fence },
      ],
    );
    // Each its own TTL: the ranges (ttl - 9 s, ttl] do not overlap.
    for (const [i, ttl] of [LONG, 20_000, 30_000, 40_000].entries()) {
      assert.ok(info.holders[i].remainingMs > ttl - 9_000 && info.holders[i].remainingMs <= ttl, `permit ${i}: ${info.holders[i].remainingMs}`);
    }
    assert.equal(await other.extend(k, owners[2], 50_000), true);
    assert.equal(await store.release(k, owners[0]), true);
    const after = await other.inspect(k);
    assert.deepEqual(after.holders.map(({ metadata }) => metadata), [null, "third", ""]);
    assert.ok(after.holders[1].remainingMs > 41_000, "extend moved the permit's expiry and kept its metadata");
    for (const o of owners.slice(1)) assert.equal(await other.release(k, o), true);
    assert.deepEqual(await store.inspect(k), FREE);
    await onlyCounterLeft(env().nodes, store, k);
  });

  test(`${label}: a permit with metadata that expires beside a live one is dropped from the answer; none is left once both are gone`, async () => {
    const store = await env().storeOf();
    const k = key("permit-expiry");
    const [short, long] = [owner("short"), owner("long")];
    // Both held for the first inspect (on a loaded machine too); then each is given a TTL of
    // 150 ms that runs out, the short one first.
    const s = await store.acquireShared(k, short, LONG, 1, 3, "short");
    const l = await store.acquireShared(k, long, LONG, 1, 3, "long");
    assert.deepEqual((await store.inspect(k)).holders.map(({ metadata, fence }) => [metadata, fence]), [["short", s.fence], ["long", l.fence]]);
    assert.equal(await store.extend(k, short, 150), true);
    await sleep(250);
    assert.deepEqual((await store.inspect(k)).holders.map(({ metadata, fence }) => [metadata, fence]), [["long", l.fence]]);
    assert.equal(await store.extend(k, long, 150), true);
    await sleep(250);
    assert.deepEqual(await store.inspect(k), FREE);
    await onlyCounterLeft(env().nodes, store, k);
  });

  test(`${label}: acquireMany with metadata per key: each key lists its own`, async () => {
    const store = await env().storeOf({ hashTags: true });
    const t = tag();
    const keys = ["a", "b", "c"].map((k) => `{many:${label}:${t}}:${k}`);
    const owners = keys.map(() => owner("many"));
    const got = await store.acquireMany(keys, owners, 10_000, ["for a", undefined, "for c"]);
    assert.ok(Array.isArray(got), JSON.stringify(got));
    const infos = await Promise.all(keys.map((k) => store.inspect(k)));
    assert.deepEqual(
      infos.map((info) => info.holders.map(({ metadata, fence }) => ({ metadata, fence }))),
      [[{ metadata: "for a", fence: got[0].fence }], [{ metadata: null, fence: got[1].fence }], [{ metadata: "for c", fence: got[2].fence }]],
    );
    for (const info of infos) noOwnerIn(info, owners);
    // without metadata, as before
    for (let i = 0; i < keys.length; i++) assert.equal(await store.release(keys[i], owners[i]), true);
    const plain = await store.acquireMany(keys, owners, 10_000);
    assert.ok(plain);
    assert.deepEqual((await store.inspect(keys[0])).holders.map(({ metadata }) => metadata), [null]);
    for (let i = 0; i < keys.length; i++) assert.equal(await store.release(keys[i], owners[i]), true);
    for (const k of keys) await onlyCounterLeft(env().nodes, store, k);
  });

  test(`${label}: metadata of exactly 1024 bytes of UTF-8 is kept whole; 1025 is a RangeError, a non-string a TypeError, naming the method`, async () => {
    const store = await env().storeOf();
    const k = key("limits");
    const o = owner();
    const exact = "é".repeat(511) + "ab"; // 1022 + 2 bytes
    assert.equal(Buffer.byteLength(exact), 1024);
    const over = "€".repeat(341) + "ab"; // 1023 + 2 bytes
    assert.equal(Buffer.byteLength(over), 1025);
    assert.ok(await store.acquire(k, o, LONG, exact));
    assert.equal((await store.inspect(k)).holders[0].metadata, exact);
    assert.equal(await store.release(k, o), true);
    const calls = {
      acquire: (m) => store.acquire(k, o, LONG, m),
      acquireShared: (m) => store.acquireShared(k, o, LONG, 1, 2, m),
      acquireMany: (m) => store.acquireMany([k], [o], LONG, [m]),
    };
    if (env().waits) {
      calls.acquireOrWait = (m) => store.acquireOrWait(k, o, LONG, 100, 50, m);
      calls.acquireSharedOrWait = (m) => store.acquireSharedOrWait(k, o, LONG, 1, 2, 100, 50, m);
    }
    for (const [method, call] of Object.entries(calls)) {
      const named = new RegExp(`redisLockStore\\.${method}\\b.*metadata`);
      await assert.rejects(call(over), (e) => e instanceof RangeError && named.test(e.message), method);
      for (const bad of [null, 42, {}, ["x"], true]) await assert.rejects(call(bad), (e) => e instanceof TypeError && named.test(e.message), `${method} ${bad}`);
    }
    await assert.rejects(store.acquireMany([k], [o], LONG, "x"), TypeError, "acquireMany's metadata is an array");
    await assert.rejects(store.acquireMany([k], [o], LONG, ["x", "y"]), RangeError, "one entry per key");
    await assert.rejects(store.inspect(""), TypeError);
    assert.deepEqual(await store.inspect(k), FREE, "a refused call took nothing");
  });

  test(`${label}: metadata that reads as JSON, holds NUL or is not ASCII comes back as the same string`, async () => {
    const store = await env().storeOf();
    const k = key("odd");
    for (const metadata of ["null", "42", "true", '{"a":1}', "[1,2]", "a\0b", "\0", "κλειδί \u{1F512}", " ", "=x"]) {
      const o = owner();
      assert.ok(await store.acquire(k, o, LONG, metadata));
      assert.deepEqual((await store.inspect(k)).holders.map((h) => h.metadata), [metadata], JSON.stringify(metadata));
      assert.equal(await store.extend(k, o, LONG), true, `extend with ${JSON.stringify(metadata)}`);
      assert.equal(await store.release(k, o), true, `release with ${JSON.stringify(metadata)}`);
      assert.ok(await store.acquireShared(k, o, LONG, 1, 2, metadata));
      assert.deepEqual((await store.inspect(k)).holders.map((h) => h.metadata), [metadata], `shared ${JSON.stringify(metadata)}`);
      assert.equal(await store.release(k, o), true);
    }
    await onlyCounterLeft(env().nodes, store, k);
  });

  test(`${label}: force-release drops every holder's metadata`, async () => {
    const store = await env().storeOf();
    const k = key("force");
    assert.ok(await store.acquire(k, owner(), LONG, "stuck"));
    assert.equal(await store.forceRelease(k), true);
    assert.deepEqual(await store.inspect(k), FREE);
    for (let i = 0; i < 3; i++) assert.ok(await store.acquireShared(k, owner(), LONG, 1, 3, `permit ${i}`));
    assert.equal(await store.forceRelease(k), true);
    assert.deepEqual(await store.inspect(k), FREE);
    await onlyCounterLeft(env().nodes, store, k);
  });

  test(`${label}: waiters are counted; each, handed the key by a release, is shown with its own metadata and fence`, { skip: !env().waits && "no acquireOrWait on this client", timeout: 30_000 }, async () => {
    const [s1, s2] = [await env().storeOf(), await env().storeOf()];
    const k = key("handover");
    const [holder, w1, w2] = [owner("holder"), owner("w1"), owner("w2")];
    const held = await s1.acquire(k, holder, LONG, "holder");
    const first = s2.acquireOrWait(k, w1, LONG, 20_000, 50, "first waiter");
    await waitingFor(s1, k, 1);
    const second = s1.acquireOrWait(k, w2, LONG, 20_000, 50); // no metadata
    const both = await waitingFor(s1, k, 2);
    assert.deepEqual(both.holders.map(({ metadata, fence }) => ({ metadata, fence })), [{ metadata: "holder", fence: held.fence }]);
    noOwnerIn(both, [holder, w1, w2]);
    assert.equal(await s1.extend(k, holder, LONG), true, "the holder, marked as queued behind, extends");
    assert.equal(await s1.release(k, holder), true);
    const g1 = await first;
    assert.ok(g1 && g1.fence > held.fence, JSON.stringify(g1));
    const now = await s1.inspect(k);
    assert.deepEqual({ holders: now.holders.map(({ metadata, fence }) => ({ metadata, fence })), waiting: now.waiting }, { holders: [{ metadata: "first waiter", fence: g1.fence }], waiting: 1 });
    assert.ok(now.holders[0].remainingMs > LONG - 10_000);
    noOwnerIn(now, [holder, w1, w2]);
    assert.equal(await s2.release(k, w1), true);
    const g2 = await second;
    assert.ok(g2 && g2.fence > g1.fence);
    assert.deepEqual((await s2.inspect(k)).holders.map(({ metadata, fence }) => ({ metadata, fence })), [{ metadata: null, fence: g2.fence }]);
    assert.equal(await s1.release(k, w2), true);
    assert.deepEqual(await s1.inspect(k), FREE);
    // The hand-over left the last grantee's grant record, which expires with the TTL it had.
    const { lock, fence } = s1.keys(k);
    for (const name of await namesUnder(env().nodes, lock)) {
      if (name === fence) continue;
      assert.equal(name, `${lock}:grant`, `${name} left behind`);
      const pttl = (await Promise.all(env().nodes.map((n) => n.pttl(name).catch(() => -2)))).find((p) => p !== -2);
      assert.ok(pttl > 0 && pttl <= LONG, `the grant record's TTL ${pttl}`);
    }
  });

  test(`${label}: a waiter handed the key at the holder's expiry, and readers handed a shared key, keep their metadata`, { skip: !env().waits && "no acquireOrWait on this client", timeout: 30_000 }, async () => {
    const [s1, s2] = [await env().storeOf(), await env().storeOf()];
    const k = key("expiry-handover");
    // Its TTL: long enough for the waiter to be seen queued behind it on a loaded machine.
    const old = await s1.acquire(k, owner("crashed"), 2_000, "crashed holder");
    const w = owner("w");
    const waiting = s2.acquireOrWait(k, w, LONG, 20_000, 5_000, "next at expiry");
    await waitingFor(s1, k, 1);
    const got = await waiting; // handed over by the look at the holder's expiry
    assert.ok(got.fence > old.fence);
    assert.deepEqual((await s1.inspect(k)).holders.map(({ metadata, fence }) => ({ metadata, fence })), [{ metadata: "next at expiry", fence: got.fence }]);
    // Readers queue behind the exclusive holder; its release lets them all in.
    const readers = [owner("r1"), owner("r2"), owner("r3")];
    const reads = readers.map((r, i) => (i % 2 ? s1 : s2).acquireSharedOrWait(k, r, LONG, 1, 4294967295, 20_000, 50, i === 1 ? undefined : `reader ${i}`));
    await waitingFor(s1, k, 3);
    assert.equal(await s2.release(k, w), true);
    const granted = await Promise.all(reads);
    for (const g of granted) assert.ok(g && g.fence > got.fence, JSON.stringify(g));
    const info = await s1.inspect(k);
    noOwnerIn(info, [w, ...readers]);
    assert.deepEqual(
      info.holders.map(({ metadata, fence }) => ({ metadata, fence })),
      granted
        .map((g, i) => ({ metadata: i === 1 ? null : `reader ${i}`, fence: g.fence }))
        .sort((a, b) => a.fence - b.fence),
    );
    for (const [i, r] of readers.entries()) assert.equal(await (i % 2 ? s2 : s1).release(k, r), true);
    assert.deepEqual(await s1.inspect(k), FREE);
    await onlyCounterLeft(env().nodes, s1, k);
  });

  test(`${label}: a semaphore waiter's metadata is handed over with its permits; a withdrawn waiter is no longer counted`, { skip: !env().waits && "no acquireOrWait on this client", timeout: 30_000 }, async () => {
    const [s1, s2] = [await env().storeOf(), await env().storeOf()];
    const k = key("permit-handover");
    const [a, b, c] = [owner("a"), owner("b"), owner("c")];
    assert.ok(await s1.acquireShared(k, a, LONG, 2, 2, "all permits"));
    const bWaits = s2.acquireSharedOrWait(k, b, LONG, 2, 2, 20_000, 50, "b, two permits");
    await waitingFor(s1, k, 1);
    const cWaits = s1.acquireSharedOrWait(k, c, LONG, 1, 2, 20_000, 50, "c");
    await waitingFor(s1, k, 2);
    await s1.withdraw(k, c);
    assert.equal(await cWaits, false);
    assert.equal((await s1.inspect(k)).waiting, 1, "the withdrawn waiter is not counted");
    assert.equal(await s1.release(k, a), true);
    const got = await bWaits;
    assert.deepEqual((await s2.inspect(k)).holders.map(({ metadata, fence }) => ({ metadata, fence })), [{ metadata: "b, two permits", fence: got.fence }]);
    assert.equal(await s2.release(k, b), true);
    await onlyCounterLeft(env().nodes, s1, k);
  });
}

describe("inspect and hold metadata on a standalone Redis", () => {
  let admin; // a plain ioredis connection for inspecting and poking the server
  const server = useRedis({ admin: true, upstash: true, ready: (started) => ({ admin } = started) });
  const closers = server.closers;
  const CLIENTS = server.clients;


  for (const [name, open] of Object.entries(CLIENTS)) {
    const env = () => ({
      nodes: [admin],
      waits: !name.startsWith("@upstash"),
      storeOf: async (options) => {
        const { client, close } = await open();
        const store = redisLockStore(client, { prefix: "ki:", ...options });
        closers.push(async () => {
          await store.close?.();
          await close();
        });
        return store;
      },
    });
    registerCases(env, name);
  }

  test("metadata costs the exclusive scripts no command: acquire and release send what they send without it", async () => {
    const { client, close } = await CLIENTS["ioredis 5"]();
    closers.push(close);
    const store = redisLockStore(client, { prefix: "ki:" });
    const count = async (op) => {
      await admin.config("RESETSTAT");
      assert.ok(await op());
      const counts = {};
      for (const m of (await admin.info("commandstats")).matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
        if (!["info", "config"].includes(m[1].split("|")[0])) counts[m[1]] = Number(m[2]);
      }
      return counts;
    };
    const k = `inspect:cost:${tag()}`;
    const o = owner();
    await store.acquire(k, o, LONG); // the scripts cached
    await store.extend(k, o, LONG);
    await store.release(k, o);
    for (const metadata of [undefined, "who: me"]) {
      assert.deepEqual(await count(() => store.acquire(k, o, LONG, metadata)), { evalsha: 1, set: 1, exists: 1, incr: 1 }, `acquire, metadata ${metadata}`);
      assert.deepEqual(await count(() => store.extend(k, o, LONG)), { evalsha: 1, get: 1, pexpire: 1 }, `extend, metadata ${metadata}`);
      assert.deepEqual(await count(() => store.release(k, o)), { evalsha: 1, get: 1, del: 1 }, `release, metadata ${metadata}`);
    }
    // inspect is one script
    await store.inspect(k);
    const inspected = await count(async () => (await store.inspect(k), true));
    assert.equal(inspected.evalsha, 1);
    assert.equal(Object.keys(inspected).filter((c) => c.startsWith("eval")).length, 1);
  });

  test("the look and the leave scripts find a grantee whose value carries its metadata", async () => {
    const { client, close } = await CLIENTS["ioredis 5"]();
    closers.push(close);
    const store = redisLockStore(client, { prefix: "ki:" });
    const k = `inspect:look:${tag()}`;
    const { lock, fence } = store.keys(k);
    const names = [lock, fence, `${lock}:queue`, `${lock}:waiters`, `${lock}:grant`];
    const channel = "ki:keel-lock:handover";
    const o = owner("holder");
    const w = owner("w");
    assert.ok(await store.acquire(k, o, LONG, "holder's"));
    // w queues through the script alone (no store of its own waits for it)
    assert.deepEqual((await admin.eval(ENQUEUE_SCRIPT, 5, ...names, w, String(LONG), "20000", channel, "w's"))[0], 0);
    assert.equal(await store.release(k, o), true);
    assert.equal(await admin.get(lock), `${w}\0w's`, "handed over with its metadata");
    const [[, state, grantFence]] = await admin.eval(scripts.CHECK_SCRIPT, 5, ...names, channel, "1", w);
    assert.deepEqual([state, grantFence], [1, Number(await admin.get(fence))], "the look tells w it holds the key");
    const left = await admin.eval(scripts.LEAVE_SCRIPT, 5, ...names, w, channel, "0");
    assert.deepEqual(left.slice(0, 2), [1, grantFence], "leaving at its deadline, w keeps the key");
    assert.deepEqual((await store.inspect(k)).holders.map(({ metadata, fence: f }) => [metadata, f]), [["w's", grantFence]]);
    assert.deepEqual(await admin.eval(scripts.LEAVE_SCRIPT, 5, ...names, w, channel, "1"), [2], "withdrawing, w releases it");
    assert.deepEqual(await store.inspect(k), FREE);
  });

  test("a waiter past its deadline still in the queue is not counted", async () => {
    const { client, close } = await CLIENTS["ioredis 5"]();
    closers.push(close);
    const store = redisLockStore(client, { prefix: "ki:" });
    const k = `inspect:stale:${tag()}`;
    const o = owner();
    assert.ok(await store.acquire(k, o, LONG, "holder"));
    const names = [store.keys(k).lock, store.keys(k).fence, `${store.keys(k).lock}:queue`, `${store.keys(k).lock}:waiters`, `${store.keys(k).lock}:grant`];
    // A waiter that queued for 2 s and never left (its process died): the enqueue alone.
    await admin.eval(ENQUEUE_SCRIPT, 5, ...names, "gone", String(LONG), "2000", "ki:keel-lock:handover", "its metadata");
    assert.equal((await store.inspect(k)).waiting, 1);
    await sleep(2_300); // past its deadline
    assert.equal(await admin.llen(names[2]), 1, "still in the queue");
    const info = await store.inspect(k);
    assert.equal(info.waiting, 0);
    assert.deepEqual(info.holders.map((h) => h.metadata), ["holder"]);
    assert.equal(await store.release(k, o), true); // the hand-over drops it with its metadata
    assert.equal(await admin.exists(names[3]), 0, "the waiter's entry and metadata are gone");
  });
});

describe("inspect and hold metadata on a Redis Cluster (three masters)", () => {
  let cluster;
  let masters;
  const closers = [];
  before(async () => {
    cluster = await startRedisCluster({ masters: 3 });
    masters = cluster.nodes.map(({ host, port }) => new IORedis({ host, port }));
  });
  after(async () => {
    for (const close of closers.reverse()) await close();
    for (const m of masters ?? []) m.disconnect();
    await cluster?.stop();
  });

  const CLIENTS = {
    "ioredis 5 Cluster": () => ioredisCluster(IORedis, cluster),
    "ioredis 6 Cluster": () => ioredisCluster(IORedis6, cluster),
    "node-redis 5 createCluster": () => nodeRedisCluster(createNodeRedisCluster, cluster),
    "node-redis 4 createCluster": () => nodeRedisCluster(createNodeRedisCluster4, cluster),
  };

  for (const [name, open] of Object.entries(CLIENTS)) {
    const env = () => ({
      nodes: masters,
      waits: true,
      storeOf: async (options) => {
        const client = await open();
        const store = redisLockStore(client, { prefix: "kc:", ...options });
        closers.push(async () => {
          await store.close?.();
          await (typeof client.disconnect === "function" ? client.disconnect() : client.quit());
        });
        return store;
      },
    });

    test(`${name}: keys on different masters, each inspected where it lives`, async () => {
      const store = await env().storeOf();
      const t = tag();
      // keys until every master serves one
      const ranges = await Promise.all(masters.map(servedSlots));
      const byMaster = new Map();
      for (let i = 0; byMaster.size < masters.length; i++) {
        const k = `inspect:spread:${t}:${i}`;
        const slot = keySlot(store.keys(k).lock);
        const m = ranges.findIndex((served) => served.some(([from, to]) => slot >= from && slot <= to));
        if (!byMaster.has(m)) byMaster.set(m, k);
      }
      const keys = [...byMaster.values()];
      const owners = keys.map(() => owner());
      const fences = [];
      for (const [i, k] of keys.entries()) fences.push((await store.acquire(k, owners[i], LONG, `on master ${i}`)).fence);
      for (const [i, k] of keys.entries()) {
        const info = await store.inspect(k);
        assert.deepEqual(info.holders.map(({ metadata, fence }) => ({ metadata, fence })), [{ metadata: `on master ${i}`, fence: fences[i] }]);
        noOwnerIn(info, owners);
      }
      for (const [i, k] of keys.entries()) assert.equal(await store.release(k, owners[i]), true);
      for (const k of keys) await onlyCounterLeft(masters, store, k);
    });

    registerCases(env, name);
  }
});

/** The slot ranges `node` serves ([from, to] each), from its own line of CLUSTER NODES. */
async function servedSlots(node) {
  const line = (await node.cluster("NODES")).split("\n").find((l) => l.includes("myself"));
  return line
    .trim()
    .split(" ")
    .slice(8)
    .filter((range) => /^\d/.test(range))
    .map((range) => {
      const [from, to = from] = range.split("-").map(Number);
      return [from, to];
    });
}

// Through keel-lock itself (the installed package): run({ metadata }) reaches the store, and
// inspect(key) shows it — a leader's campaign seen by observe, on a real redis-server.
describe("keel-lock over redisLockStore: metadata, inspect, campaign and observe", () => {
  const server = useRedis();
  let client;
  before(async () => {
    client = new IORedis({ host: "127.0.0.1", port: server.redis.port, lazyConnect: true });
    server.closers.push(() => client.disconnect());
    await client.connect();
  });

  test("run({ metadata }) is kept with the hold; inspect shows it with the run's fence; campaigns take turns as observe sees", async () => {
    const { lock, inspect, campaign, observe, setLockStore } = await import("keel-lock");
    setLockStore(redisLockStore(client, { prefix: `e2e:${tag()}:` }));
    const key = `job:${tag()}`;
    const [ran, seen] = await lock(key, 10_000).run(async ({ fence }) => ({ fence, info: await inspect(key) }), { metadata: "worker 3 on host-b" });
    assert.equal(ran, true);
    assert.deepEqual(seen.info.holders.map((h) => [h.metadata, h.fence]), [["worker 3 on host-b", seen.fence]]);
    assert.equal(seen.info.waiting, 0);
    assert.equal((await inspect(key)).held, false);

    const leaderKey = `leader:${tag()}`;
    const controller = new AbortController();
    const changes = [];
    const watching = (async () => {
      for await (const leader of observe(leaderKey, { signal: controller.signal, intervalMs: 10 })) changes.push(leader?.metadata ?? null);
    })();
    // observe has looked (and watches) before the campaigns begin; then it sees both and the end.
    const until = async (ready, what) => {
      const deadline = Date.now() + 20_000;
      while (!ready()) {
        assert.ok(Date.now() < deadline, `${what}: ${JSON.stringify(changes)}`);
        await sleep(10);
      }
    };
    await until(() => changes.length >= 1, "observe's first look");
    const term = (name) => campaign(leaderKey, () => sleep(60).then(() => name), { metadata: name, ttlMs: 5_000 });
    assert.deepEqual((await Promise.all([term("a"), term("b")])).sort(), ["a", "b"]);
    await until(() => changes.includes("a") && changes.includes("b") && changes.at(-1) === null, "observe never saw both leaders and the end");
    controller.abort();
    await watching;
    assert.deepEqual([...new Set(changes.filter((c) => c !== null))].sort(), ["a", "b"], JSON.stringify(changes));
    assert.equal(changes.at(-1), null);
  });
});
