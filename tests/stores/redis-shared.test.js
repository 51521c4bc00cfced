// Shared holds on Redis — semaphores (permits of some weight under a limit) and read locks
// (weight 1 under 2^32 - 1) — through redisLockStore's acquireShared / acquireSharedOrWait, next
// to its exclusive acquire / acquireOrWait, against a real redis-server and a real three-master
// Redis Cluster started here, through ioredis 5 and node-redis 5 (and their cluster clients).
// The same cases run on both (`registerCases`); the standalone server adds races over several
// connections, a scan for leftover keys, command counts of the exclusive path and Upstash.
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { after, afterEach, before, describe, test } from "node:test";
import IORedis from "ioredis";
import { createClient as createNodeRedis, createCluster as createNodeRedisCluster } from "redis";
import { Redis as Upstash } from "@upstash/redis";
import {
  redisLockStore,
  ACQUIRE_SCRIPT,
  ACQUIRE_SHARED_SCRIPT,
  ACQUIRE_SHARED_SHA,
  RELEASE_SCRIPT,
  EXTEND_SCRIPT,
} from "../../pkg/stores/redis.js";
import { MAX_FENCE } from "../../pkg/stores/args.js";
import { sleep, startRedisCluster, startUpstashFixture } from "./lib/servers.js";
import { useRedis } from "./lib/redis-fixture.js";

const LONG = 60_000;
const READ = 4294967295; // a read lock's limit: no limit
const owner = (label = "o") => `${label}-${randomBytes(6).toString("hex")}`;
const uniqueKey = (label) => `keel-test:shared:${label}:${randomBytes(4).toString("hex")}`;

/** Every fence handed out for each key, in the order granted: each must exceed all before it. */
function fenceLedger() {
  const last = new Map();
  return {
    take(key, answer, what) {
      assert.ok(answer && Number.isSafeInteger(answer.fence) && answer.fence >= 1, `${what}: not a grant: ${JSON.stringify(answer)}`);
      const before = last.get(key) ?? 0;
      assert.ok(answer.fence > before, `${what}: fence ${answer.fence} is not above ${before}`);
      last.set(key, answer.fence);
      return answer.fence;
    },
  };
}

/** The Redis names of `key` in `store`: lock, fence, queue, waiters, grant. */
function namesOf(store, key) {
  const { lock, fence } = store.keys(key);
  return { lock, fence, queue: `${lock}:queue`, waiters: `${lock}:waiters`, grant: `${lock}:grant` };
}

/** The owners holding `name` shared (the set's members scored above 0; its bookkeeping is at 0 and below). */
const holdersOf = (admin, name) => admin.zrangebyscore(name, "(0", "+inf");

/** The shared key's bookkeeping: its limit and the weight held (holds, plus what weights above 1 add). */
async function bookkeeping(admin, name) {
  const [limit, extra] = await admin.zmscore(name, "\0limit", "\0extra");
  return { limit: -Number(limit), total: (await holdersOf(admin, name)).length - Number(extra ?? 0) };
}

/** Resolves with the queue once `count` callers are queued for `key`. */
async function queued(admin, store, key, count) {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const queue = await admin.lrange(namesOf(store, key).queue, 0, -1);
    if (queue.length >= count) return queue;
    assert.ok(Date.now() < deadline, `${count} waiters never queued for ${key} (${queue.length} did)`);
    await sleep(5);
  }
}

/** `promise`'s answer, or "pending" if it has none after `ms`. */
const within = (promise, ms) => Promise.race([promise, sleep(ms).then(() => "pending")]);
// How long an answer that is due now (a hand-over, a withdraw) may take on a loaded machine: well
// inside the 20 s the waits here are given, so an answer only at a wait's end still shows.
const SOON = 15_000;

/** Asserts that every name of `key` but the fence counter is gone, and the counter never expires. */
async function nothingLeft(admin, store, key) {
  const { fence, ...rest } = namesOf(store, key);
  for (const [what, name] of Object.entries(rest)) assert.equal(await admin.exists(name), 0, `${what} (${name}) left behind`);
  assert.ok([-1, -2].includes(await admin.pttl(fence)), "the fence counter has a TTL");
}

/** Asserts that every name of `key` that exists but the counter expires, and none after `maxMs`. */
async function allExpire(admin, store, key, maxMs) {
  const { fence, ...rest } = namesOf(store, key);
  for (const [what, name] of Object.entries(rest)) {
    const pttl = await admin.pttl(name);
    assert.ok(pttl === -2 || (pttl > 0 && pttl <= maxMs), `${what} (${name}) PTTL ${pttl}, expected gone or 1..${maxMs}`);
  }
}

/**
 * The shared-hold cases, for stores `get().stores` (two or more, on their own connections, the
 * same backend) inspected through `get().admin` (a client or a cluster client).
 */
function registerCases(get, keyLabel = "") {
  const k = (label) => uniqueKey(`${keyLabel}${label}`);

  test("a semaphore: at most `limit` weight held; weights; owner-scoped release and extend; the layout while held", async () => {
    const { stores, admin } = get();
    const [s1, s2] = stores;
    const key = k("sem");
    const ledger = fenceLedger();
    const [a, b, c, d] = [owner("a"), owner("b"), owner("c"), owner("d")];
    ledger.take(key, await s1.acquireShared(key, a, LONG, 2, 3), "a (2 of 3)");
    assert.equal(await s2.acquireShared(key, b, LONG, 2, 3), false, "2 more of 3 fit");
    ledger.take(key, await s2.acquireShared(key, c, LONG, 1, 3), "c (1 of 3)");
    assert.equal(await s1.acquireShared(key, d, LONG, 1, 3), false, "a fourth permit");
    assert.equal(await s1.acquire(key, d, LONG), false, "an exclusive acquire beside permits");
    assert.equal(await s2.acquireShared(key, a, LONG, 1, 3), false, "a holder asking again");

    const n = namesOf(s1, key);
    assert.equal(await admin.type(n.lock), "zset");
    assert.equal(await admin.exists(n.grant), 0, "no grant records: nobody was handed the key");
    assert.deepEqual((await holdersOf(admin, n.lock)).sort(), [a, c].sort());
    const book = await bookkeeping(admin, n.lock);
    assert.deepEqual([book.limit, book.total], [3, 3]);
    assert.equal(Number(await admin.zscore(n.lock, `\0w:${a}`)), -2, "a's weight");
    assert.equal(await admin.zscore(n.lock, `\0w:${c}`), null, "a hold of one permit has no weight entry");
    const [pl, latest] = [await admin.pttl(n.lock), Math.max(...(await admin.zmscore(n.lock, a, c)).map(Number))];
    assert.ok(pl > LONG - 5_000 && pl <= LONG, `lock PTTL ${pl}`);
    assert.equal(Number(await admin.pexpiretime(n.lock)), latest, "the set expires with the latest hold");
    assert.equal(await admin.pttl(n.fence), -1);

    assert.equal(await s1.release(key, d), false, "a stranger's release");
    assert.equal(await s1.extend(key, d, LONG), false, "a stranger's extend");
    assert.equal(await s2.extend(key, c, LONG), true);
    assert.equal(await s1.isLocked(key), true);
    assert.equal(await s2.release(key, a), true, "a's release");
    assert.equal(await s2.release(key, a), false, "a's second release");
    assert.equal(await s1.extend(key, a, LONG), false, "a's extend after its release");
    assert.equal(await s1.isLocked(key), true, "c still holds a permit");
    ledger.take(key, await s1.acquireShared(key, b, LONG, 2, 3), "b, once a released");
    assert.equal(await s2.acquireShared(key, d, LONG, 1, 3), false);
    assert.equal(await s1.release(key, c), true);
    assert.equal(await s2.release(key, b), true);
    assert.equal(await s1.isLocked(key), false);
    assert.equal(await s1.remainingTime(key), null);
    await nothingLeft(admin, s1, key);
    ledger.take(key, await s2.acquire(key, d, LONG), "an exclusive acquire once every permit is back");
    assert.equal(await s1.acquireShared(key, a, LONG, 1, 3), false, "a permit beside an exclusive holder");
    assert.equal(await s1.release(key, d), true);
  });

  test("racing callers never hold more than `limit` weight (weights 1..3 under 5, 24 callers, 3 rounds each)", { timeout: 60_000 }, async () => {
    const { stores } = get();
    const key = k("race");
    const limit = 5;
    let inUse = 0;
    let most = 0;
    let grants = 0;
    const fences = new Set();
    const caller = async (i) => {
      const store = stores[i % stores.length];
      const weight = 1 + (i % 3);
      for (let round = 0; round < 3; ) {
        const me = owner(`r${i}`);
        const got = await store.acquireShared(key, me, LONG, weight, limit);
        if (!got) {
          await sleep(1);
          continue;
        }
        assert.ok(!fences.has(got.fence), `fence ${got.fence} handed out twice`);
        fences.add(got.fence);
        inUse += weight;
        most = Math.max(most, inUse);
        assert.ok(inUse <= limit, `${inUse} weight held under a limit of ${limit}`);
        grants++;
        await sleep(2);
        inUse -= weight;
        assert.equal(await store.release(key, me), true);
        round++;
      }
    };
    await Promise.all(Array.from({ length: 24 }, (_, i) => caller(i)));
    assert.equal(grants, 72);
    assert.ok(most >= 3, `the permits were never shared (at most ${most} weight at once)`);
    assert.equal(await stores[0].isLocked(key), false);
  });

  test("read locks share; an exclusive holder excludes readers and readers exclude it; acquireOrWait waits behind readers", async () => {
    const { stores, admin } = get();
    const [s1, s2] = stores;
    const key = k("rw");
    const ledger = fenceLedger();
    const [r1, r2, w, r3] = [owner("r1"), owner("r2"), owner("w"), owner("r3")];
    ledger.take(key, await s1.acquireShared(key, r1, LONG, 1, READ), "r1");
    ledger.take(key, await s2.acquireShared(key, r2, LONG, 1, READ), "r2");
    assert.equal(await s1.acquire(key, w, LONG), false, "a writer beside readers");
    const writing = s2.acquireOrWait(key, w, LONG, 20_000, 60_000);
    await queued(admin, s1, key, 1);
    assert.equal(await s1.release(key, r1), true);
    assert.equal(await within(writing, 200), "pending", "the writer got in beside a reader");
    assert.equal(await s1.release(key, r2), true);
    const got = await within(writing, SOON);
    ledger.take(key, got, "the writer, once the readers left");
    assert.ok(got.waitedMs >= 150, `waitedMs ${got.waitedMs}`);
    assert.equal(await admin.type(namesOf(s1, key).lock), "string");
    assert.equal(await s1.acquireShared(key, r3, LONG, 1, READ), false, "a reader beside a writer");
    assert.equal(await s2.release(key, w), true);
    ledger.take(key, await s1.acquireShared(key, r3, LONG, 1, READ), "a reader once the writer left");
    assert.equal(await s1.release(key, r3), true);
    await nothingLeft(admin, s1, key);
  });

  test("a limit mismatch answers { heldLimit } at once and never queues; a reader on a semaphore's key too", async () => {
    const { stores, admin } = get();
    const [s1, s2] = stores;
    const key = k("mismatch");
    const a = owner("a");
    assert.ok(await s1.acquireShared(key, a, LONG, 1, 3));
    assert.deepEqual(await s2.acquireShared(key, owner("b"), LONG, 1, 4), { heldLimit: 3 });
    assert.deepEqual(await s2.acquireShared(key, owner("r"), LONG, 1, READ), { heldLimit: 3 });
    const started = Date.now();
    assert.deepEqual(await s2.acquireSharedOrWait(key, owner("c"), LONG, 1, 4, 20_000, 50), { heldLimit: 3 });
    assert.ok(Date.now() - started < 10_000, "the mismatch waited");
    assert.equal(await admin.exists(namesOf(s1, key).queue), 0, "a mismatched caller queued");
    assert.equal(s2.waitingCount, 0);
    // Behind an exclusive holder there is no limit to mismatch: it waits (here, until its deadline).
    assert.equal(await s1.release(key, a), true);
    const x = owner("x");
    assert.ok(await s1.acquire(key, x, LONG));
    assert.equal(await s2.acquireShared(key, owner("d"), LONG, 1, 4), false);
    assert.equal(await s2.acquireSharedOrWait(key, owner("e"), LONG, 1, 4, 200, 50), false);
    assert.equal(await s1.release(key, x), true);
    await nothingLeft(admin, s1, key);
  });

  test("FIFO: a heavy waiter is not starved by later light requests; it is handed all its permits once they are back", async () => {
    const { stores, admin } = get();
    const [s1, s2] = stores;
    const key = k("heavy");
    const ledger = fenceLedger();
    const [a, b, heavy, light, later] = [owner("a"), owner("b"), owner("heavy"), owner("light"), owner("later")];
    ledger.take(key, await s1.acquireShared(key, a, LONG, 1, 3), "a");
    ledger.take(key, await s1.acquireShared(key, b, LONG, 1, 3), "b");
    const heavyWait = s2.acquireSharedOrWait(key, heavy, LONG, 3, 3, 20_000, 60_000);
    await queued(admin, s1, key, 1);
    assert.equal(await s1.acquireShared(key, light, LONG, 1, 3), false, "a light request overtook the queued heavy one");
    const laterWait = s1.acquireSharedOrWait(key, later, LONG, 1, 3, 20_000, 60_000);
    assert.deepEqual(await queued(admin, s1, key, 2), [heavy, later]);
    assert.equal(await s1.release(key, a), true);
    assert.equal(await within(heavyWait, 150), "pending", "3 permits handed out with 1 held");
    assert.equal(await within(laterWait, 1), "pending", "the later light waiter overtook the heavy one");
    assert.equal(await s2.release(key, b), true);
    const got = await within(heavyWait, SOON);
    ledger.take(key, got, "the heavy waiter");
    assert.equal(await within(laterWait, 150), "pending", "a fourth permit");
    assert.equal(await s2.release(key, heavy), true);
    ledger.take(key, await within(laterWait, SOON), "the later waiter");
    assert.equal(await s1.release(key, later), true);
    await nothingLeft(admin, s1, key);
  });

  test("FIFO: a queued writer is not overtaken by later readers; one release hands the key to every reader at the front, and stops at the next writer", async () => {
    const { stores, admin } = get();
    const [s1, s2] = stores;
    const key = k("writer");
    const ledger = fenceLedger();
    const r0 = owner("r0");
    ledger.take(key, await s1.acquireShared(key, r0, LONG, 1, READ), "r0");
    const w1 = owner("w1");
    const w1Wait = s2.acquireOrWait(key, w1, LONG, 20_000, 60_000);
    await queued(admin, s1, key, 1);
    assert.equal(await s2.acquireShared(key, owner("late"), LONG, 1, READ), false, "a reader overtook the queued writer");
    const readers = [owner("r1"), owner("r2"), owner("r3"), owner("r4")];
    const readerWaits = [];
    for (const [i, r] of readers.entries()) {
      readerWaits.push(stores[i % 2].acquireSharedOrWait(key, r, LONG, 1, READ, 20_000, 60_000));
      await queued(admin, s1, key, 2 + i);
    }
    const w2 = owner("w2");
    const w2Wait = s1.acquireOrWait(key, w2, LONG, 20_000, 60_000);
    await queued(admin, s1, key, 6);
    const r5 = owner("r5");
    const r5Wait = s2.acquireSharedOrWait(key, r5, LONG, 1, READ, 20_000, 60_000);
    assert.deepEqual(await queued(admin, s1, key, 7), [w1, ...readers, w2, r5]);

    assert.equal(await s1.release(key, r0), true);
    ledger.take(key, await within(w1Wait, SOON), "w1");
    assert.equal(await within(Promise.race(readerWaits), 150), "pending", "a reader beside the writer");
    assert.equal(await s2.release(key, w1), true);
    const got = await within(Promise.all(readerWaits), SOON);
    assert.ok(Array.isArray(got), "one release did not hand the key to all four readers");
    // Handed over in queue order, in one script: fences in the same order.
    got.forEach((answer, i) => ledger.take(key, answer, `reader ${i + 1}`));
    assert.deepEqual((await holdersOf(admin, namesOf(s1, key).lock)).sort(), [...readers].sort());
    assert.deepEqual(await admin.lrange(namesOf(s1, key).queue, 0, -1), [w2, r5], "the hand-over went past the writer");
    assert.equal(await within(r5Wait, 100), "pending", "the reader behind the writer overtook it");
    for (const [i, r] of readers.entries()) {
      assert.equal(await within(w2Wait, 1), "pending", "the writer got in beside readers");
      assert.equal(await stores[i % 2].release(key, r), true);
    }
    ledger.take(key, await within(w2Wait, SOON), "w2");
    assert.equal(await s1.release(key, w2), true);
    ledger.take(key, await within(r5Wait, SOON), "r5");
    assert.equal(await s2.release(key, r5), true);
    await nothingLeft(admin, s1, key);
  });

  test("a crashed holder's permit expires alone, and its expiry hands the permit to a waiter (the expiry look, not the safety net)", { timeout: 30_000 }, async () => {
    const { stores, admin, slowStore } = get();
    const s1 = stores[0];
    const waiterStore = await slowStore(); // safetyNetMs of a minute: only the expiry look can hand over
    const key = k("expiry");
    const ledger = fenceLedger();
    const [crashed, steady, waiter] = [owner("crashed"), owner("steady"), owner("waiter")];
    // The crashed holder's TTL: long enough for the waiter to queue behind it on a loaded machine.
    const ttl = 3_000;
    const sentAt = Date.now();
    ledger.take(key, await s1.acquireShared(key, crashed, ttl, 1, 2), "the holder that crashes");
    ledger.take(key, await s1.acquireShared(key, steady, LONG, 1, 2), "the steady holder");
    const remaining = await s1.remainingTime(key);
    assert.ok(remaining > LONG - 10_000, `remainingTime is the last hold's (${remaining})`);
    const started = Date.now();
    const got = await within(waiterStore.acquireSharedOrWait(key, waiter, LONG, 1, 2, 20_000, 60_000), SOON);
    ledger.take(key, got, "the waiter, at the crashed holder's expiry");
    const took = Date.now() - started;
    // At the expiry: not before it (the hold ran its TTL from the acquire's sending), nor at
    // the safety net's look a minute away.
    assert.ok(Date.now() - sentAt >= ttl - 10, `handed over ${Date.now() - sentAt} ms after the ${ttl} ms hold was sent`);
    assert.ok(took < SOON, `handed over after ${took} ms`);
    assert.ok(got.waitedMs > 0 && got.waitedMs < SOON, `waitedMs ${got.waitedMs}`);
    assert.equal(await s1.release(key, crashed), false, "the expired holder released");
    assert.equal(await s1.extend(key, crashed, LONG), false, "the expired holder extended");
    assert.equal(await s1.acquireShared(key, owner("third"), LONG, 1, 2), false);
    assert.equal(await s1.release(key, steady), true);
    assert.equal(await waiterStore.release(key, waiter), true);
    await nothingLeft(admin, s1, key);
  });

  test("isLocked and remainingTime follow the last live hold; extend can move it either way; everything expires with it", { timeout: 30_000 }, async () => {
    const { stores, admin } = get();
    const [s1, s2] = stores;
    const key = k("ttl");
    const [a, b] = [owner("a"), owner("b")];
    // TTLs seconds apart, so that a stalled machine still tells whose remainingTime it reads.
    assert.ok(await s1.acquireShared(key, a, 10_000, 1, READ));
    assert.ok(await s2.acquireShared(key, b, 30_000, 1, READ));
    let left = await s1.remainingTime(key);
    assert.ok(left > 20_000 && left <= 30_000, `remainingTime ${left}`);
    assert.equal(await s1.extend(key, b, 15_000), true, "shortening the last hold");
    left = await s1.remainingTime(key);
    assert.ok(left > 10_000 && left <= 15_000, `remainingTime ${left} after the last hold was shortened`);
    await allExpire(admin, s1, key, 15_000);
    assert.equal(await s2.extend(key, a, 20_000), true);
    left = await s1.remainingTime(key);
    assert.ok(left > 15_000 && left <= 20_000, `remainingTime ${left} after the first hold was lengthened`);
    // Both shortened: everything expires with the last of them.
    assert.equal(await s1.extend(key, b, 300), true);
    assert.equal(await s2.extend(key, a, 500), true);
    await sleep(700);
    assert.equal(await s1.isLocked(key), false);
    assert.equal(await s1.remainingTime(key), null);
    await nothingLeft(admin, s1, key);
  });

  test("forceRelease frees every hold (true, then false) and hands the key over; the old holders' release and extend answer false", async () => {
    const { stores, admin } = get();
    const [s1, s2] = stores;
    const key = k("force");
    const ledger = fenceLedger();
    const [a, b, w] = [owner("a"), owner("b"), owner("w")];
    ledger.take(key, await s1.acquireShared(key, a, LONG, 1, 2), "a");
    ledger.take(key, await s1.acquireShared(key, b, LONG, 1, 2), "b");
    const waiting = s2.acquireOrWait(key, w, LONG, 20_000, 60_000);
    await queued(admin, s1, key, 1);
    assert.equal(await s1.forceRelease(key), true);
    ledger.take(key, await within(waiting, SOON), "the waiter, after the force-release");
    assert.equal(await s1.release(key, a), false);
    assert.equal(await s1.extend(key, b, LONG), false);
    assert.equal(await s2.release(key, w), true);
    assert.equal(await s1.forceRelease(key), false, "a free key");
    ledger.take(key, await s1.acquireShared(key, a, LONG, 1, 2), "a again");
    assert.equal(await s2.forceRelease(key), true);
    assert.equal(await s1.isLocked(key), false);
    await nothingLeft(admin, s1, key);
  });

  test("withdraw: a queued shared waiter leaves (false at once, queue clean); a granted one releases its permit to the next waiter; a timed-out heavy waiter lets the light one behind it in", async () => {
    const { stores, admin } = get();
    const [s1, s2] = stores;
    const key = k("withdraw");
    const [a, b, c, d] = [owner("a"), owner("b"), owner("c"), owner("d")];
    assert.ok(await s1.acquireShared(key, a, LONG, 2, 2));
    const bWait = s2.acquireSharedOrWait(key, b, LONG, 1, 2, 20_000, 60_000);
    await queued(admin, s1, key, 1);
    await s2.withdraw(key, b);
    assert.equal(await within(bWait, SOON), false);
    assert.equal(await admin.exists(namesOf(s1, key).queue), 0);

    const cWait = s2.acquireSharedOrWait(key, c, LONG, 2, 2, 20_000, 60_000);
    await queued(admin, s1, key, 1);
    const dWait = s1.acquireSharedOrWait(key, d, LONG, 2, 2, 20_000, 60_000);
    await queued(admin, s1, key, 2);
    assert.equal(await s1.release(key, a), true);
    assert.ok(await within(cWait, SOON));
    await s2.withdraw(key, c); // granted: releases, and the next waiter is handed the permits
    assert.ok(await within(dWait, SOON), "the withdrawn grant was not handed on");
    assert.equal(await s1.release(key, d), true);

    // A front waiter that times out: the waiter behind it fits now and is handed the key.
    const [holder, heavy, light] = [owner("holder"), owner("heavy"), owner("light")];
    assert.ok(await s1.acquireShared(key, holder, LONG, 1, 3));
    const heavyWait = s2.acquireSharedOrWait(key, heavy, LONG, 3, 3, 2_000, 60_000);
    await queued(admin, s1, key, 1);
    const lightWait = s1.acquireSharedOrWait(key, light, LONG, 1, 3, 20_000, 60_000);
    await queued(admin, s1, key, 2);
    assert.equal(await heavyWait, false);
    assert.ok(await within(lightWait, SOON), "the light waiter stayed queued behind one that left");
    assert.equal(await s1.release(key, light), true);
    assert.equal(await s1.release(key, holder), true);
    await nothingLeft(admin, s1, key);
  });

  test("fences rise across every grant of a key: exclusive, shared, handed over and expired alike", { timeout: 30_000 }, async () => {
    const { stores, admin } = get();
    const [s1, s2] = stores;
    const key = k("fences");
    const ledger = fenceLedger();
    for (let round = 0; round < 3; round++) {
      const x = owner("x");
      ledger.take(key, await s1.acquire(key, x, LONG), "exclusive");
      const waits = [];
      for (let i = 0; i < 3; i++) {
        waits.push(stores[i % 2].acquireSharedOrWait(key, owner(`p${i}`), 300, 1, 2, 20_000, 60_000));
        await queued(admin, s1, key, i + 1);
      }
      assert.equal(await s1.release(key, x), true);
      const first = await Promise.race(waits.map((w, i) => w.then(() => i)));
      assert.ok(first === 0 || first === 1);
      const got = await Promise.all(waits); // the third at the first two's expiry
      got.forEach((g, i) => ledger.take(key, g, `permit ${i} of round ${round}`));
      ledger.take(key, await s2.acquireShared(key, owner("q"), 100, 1, 2), "a newcomer's permit");
      await sleep(350);
    }
    assert.equal(Number(await admin.get(namesOf(s1, key).fence)), 15, "one fence per grant");
    await nothingLeft(admin, s1, key);
  });

  test("bad weights and limits are refused and change nothing", async () => {
    const { stores, admin } = get();
    const s1 = stores[0];
    const key = k("bad");
    for (const [weight, limit] of [[0, 3], [4, 3], [1.5, 3], [1, 2 ** 32], [-1, 3], ["x", 3], [1, NaN]]) {
      await assert.rejects(s1.acquireShared(key, owner(), LONG, weight, limit), /weight and limit/, `${weight} of ${limit}`);
    }
    assert.equal(await s1.isLocked(key), false);
    assert.equal(await admin.exists(namesOf(s1, key).fence), 0, "a refused call drew a fence");
    await nothingLeft(admin, s1, key);
  });
}

// ---------------------------------------------------------------------------------------------

const made = [];

// Registered before the fixture's after(), so it runs first: every store is closed before the
// connections are.
after(async () => {
  for (const store of made) await store.close?.();
});

let redis; // the server
let admin; // a plain ioredis connection for inspecting the server
const server = useRedis({ admin: true, ready: (started) => ({ redis, admin } = started) });
const connections = server.closers;

afterEach(async () => {
  for (const store of made) await store.close?.();
});

async function ioredisStore(options) {
  const client = new IORedis({ port: redis.port, host: "127.0.0.1" });
  connections.push(() => client.disconnect());
  const store = redisLockStore(client, options);
  made.push(store);
  return store;
}

async function nodeRedisStore(options) {
  const client = createNodeRedis({ url: redis.url });
  client.on("error", () => {});
  await client.connect();
  connections.push(() => client.quit());
  const store = redisLockStore(client, options);
  made.push(store);
  return store;
}

describe("shared holds on a standalone Redis (ioredis 5, node-redis 5)", () => {
  let stores;
  before(async () => {
    stores = [await ioredisStore(), await nodeRedisStore(), await ioredisStore(), await nodeRedisStore()];
  });

  test("the shared acquire script's SHA is the SHA-1 of its text", () => {
    assert.equal(ACQUIRE_SHARED_SHA, createHash("sha1").update(ACQUIRE_SHARED_SCRIPT).digest("hex"));
  });

  registerCases(() => ({ stores, admin, slowStore: () => nodeRedisStore({ safetyNetMs: 60_000 }) }));

  test("the exclusive path costs what it did: acquire SET NX + EXISTS + INCR, release GET + DEL, and a release on a shared key does not error", async () => {
    const store = stores[0];
    for (const script of [ACQUIRE_SCRIPT, RELEASE_SCRIPT, EXTEND_SCRIPT]) await admin.script("LOAD", script);
    const count = async (op) => {
      await admin.config("RESETSTAT");
      await op();
      const counts = {};
      for (const line of (await admin.info("commandstats")).split("\n")) {
        const m = /^cmdstat_([^:]+):calls=(\d+)/.exec(line.trim());
        if (m && !["info", "config"].includes(m[1].split("|")[0])) counts[m[1]] = Number(m[2]);
      }
      return counts;
    };
    const key = uniqueKey("path");
    const a = owner("a");
    assert.deepEqual(await count(() => store.acquire(key, a, LONG)), { evalsha: 1, set: 1, exists: 1, incr: 1 });
    assert.deepEqual(await count(() => store.release(key, a)), { evalsha: 1, get: 1, del: 1 });
    assert.ok(await store.acquireShared(key, a, LONG, 1, 2));
    assert.deepEqual(await count(() => store.acquire(key, owner(), LONG)), { evalsha: 1, set: 1 }, "an exclusive acquire beside a permit");
    assert.equal(await store.release(key, owner("stranger")), false);
    assert.equal(await store.release(key, a), true);
  });

  test("the uncontended shared path is cheap: the acquire and release scripts' commands on a free key and beside another hold", async () => {
    const store = stores[0];
    for (const script of [ACQUIRE_SHARED_SCRIPT, RELEASE_SCRIPT]) await admin.script("LOAD", script);
    const count = async (op) => {
      await admin.config("RESETSTAT");
      await op();
      const counts = {};
      for (const line of (await admin.info("commandstats")).split("\n")) {
        const m = /^cmdstat_([^:]+):calls=(\d+)/.exec(line.trim());
        if (m && !["info", "config"].includes(m[1].split("|")[0])) counts[m[1]] = Number(m[2]);
      }
      return counts;
    };
    const key = uniqueKey("cheap");
    const [a, b] = [owner("a"), owner("b")];
    assert.deepEqual(await count(() => store.acquireShared(key, a, LONG, 1, 4)), { evalsha: 1, exists: 1, time: 1, incr: 1, zadd: 1, pexpireat: 1 });
    // b's hold is the later one: the key's expiry moves with it, and not when a's is dropped.
    await sleep(5);
    assert.deepEqual(await count(() => store.acquireShared(key, b, LONG, 1, 4)), { evalsha: 1, exists: 1, zmscore: 1, zcount: 1, time: 1, incr: 1, pttl: 1, zadd: 1, pexpireat: 1 });
    // This store saw both take their holds: the release asks the set first.
    assert.deepEqual(await count(() => store.release(key, a)), { evalsha: 1, zmscore: 1, time: 1, zrem: 1, exists: 1, zrange: 1 });
    assert.deepEqual(await count(() => store.release(key, b)), { evalsha: 1, zmscore: 1, time: 1, zrem: 1, exists: 1, zrange: 1, del: 1 });
    await nothingLeft(admin, store, key);
    // Another store (another process) releases through the script that reads the key first.
    const other = stores[1];
    assert.ok(await store.acquireShared(key, a, LONG, 1, 4));
    assert.deepEqual(await count(() => other.release(key, a)), { evalsha: 1, get: 1, zmscore: 1, time: 1, zrem: 1, exists: 1, zrange: 1, del: 1 });
    // An exclusive holder released through the shared-first script (an owner remembered from an
    // earlier shared hold) is still released, at the cost of the failed ZMSCORE.
    assert.ok(await store.acquireShared(key, a, LONG, 1, 4));
    assert.equal(await other.release(key, a), true);
    assert.ok(await store.acquire(key, a, LONG));
    assert.equal(await store.release(key, owner("stranger")), false);
    assert.deepEqual(await count(() => store.release(key, a)), { evalsha: 1, zmscore: 1, get: 1, del: 1 });
    await nothingLeft(admin, store, key);
  });

  test("the quick path leaves to the full one what it cannot see: an expired hold in a full key, an owner whose own hold expired", { timeout: 10_000 }, async () => {
    const [s1, s2] = stores;
    const key = uniqueKey("expired-inside");
    const [gone, steady, next] = [owner("gone"), owner("steady"), owner("next")];
    // Held for the refusal right after it (on a loaded machine too), then given a TTL of 150 ms
    // that runs out.
    assert.ok(await s1.acquireShared(key, gone, LONG, 1, 2));
    assert.ok(await s1.acquireShared(key, steady, LONG, 1, 2));
    assert.equal(await s2.acquireShared(key, next, LONG, 1, 2), false, "a third permit of 2");
    assert.equal(await s1.extend(key, gone, 150), true);
    await sleep(250);
    const n = namesOf(s1, key);
    assert.equal((await holdersOf(admin, n.lock)).length, 2, "the expired hold is still in the set");
    assert.ok(await s2.acquireShared(key, next, LONG, 1, 2), "the expired permit did not come back");
    assert.ok(await s1.acquireShared(key, gone, LONG, 1, 3).then((x) => x.heldLimit === 2), "another limit");
    for (const who of [next, steady]) assert.equal(await s2.release(key, who), true);
    await nothingLeft(admin, s1, key);

    // Room for it, but its own expired hold is still in the set.
    assert.ok(await s1.acquireShared(key, gone, 150, 1, 3));
    assert.ok(await s1.acquireShared(key, steady, LONG, 1, 3));
    await sleep(250);
    assert.equal(await admin.zscore(n.lock, gone) !== null, true, "the expired hold is still in the set");
    assert.ok(await s2.acquireShared(key, gone, LONG, 1, 3), "an owner whose own hold expired asks again");
    assert.equal((await bookkeeping(admin, n.lock)).total, 2, "the expired hold's weight was not given back");
    for (const who of [gone, steady]) assert.equal(await s2.release(key, who), true);
    await nothingLeft(admin, s1, key);
  });

  test("a fence counter that cannot give a fence fails a grant on a free key — shared on the quick path and the full way, or exclusive through acquireOrWait — takes nothing and leaves the counter as it was", async () => {
    const store = stores[0];
    for (const [value, error] of [
      [String(MAX_FENCE), /fence counter .* is outside 1\.\.9007199254740991/],
      ["-1", /fence counter .* is outside 1\.\.9007199254740991/],
      ["x", /not an integer/],
    ]) {
      const key = uniqueKey("counter");
      const { fence } = namesOf(store, key);
      await admin.set(fence, value);
      const attempts = {
        "acquireShared (the quick path)": () => store.acquireShared(key, owner(), LONG, 1, 3),
        "acquireShared with metadata (the full way)": () => store.acquireShared(key, owner(), LONG, 1, 3, "m"),
        acquireSharedOrWait: () => store.acquireSharedOrWait(key, owner(), LONG, 2, 3, 1_000, 1_000),
        acquireOrWait: () => store.acquireOrWait(key, owner(), LONG, 1_000, 1_000, "m"),
      };
      for (const [what, attempt] of Object.entries(attempts)) {
        await assert.rejects(attempt(), error, `${what}, counter ${value}`);
        assert.equal(await store.isLocked(key), false, `${what} took the key with counter ${value}`);
        assert.equal(await admin.get(fence), value, `${what} moved the counter ${value}`);
      }
      await nothingLeft(admin, store, key);
    }
  });

  test("ACQUIRE_SHARED_SCRIPT is one round trip: a free key, a full one, a mismatch", async () => {
    const store = stores[1];
    await admin.script("LOAD", ACQUIRE_SHARED_SCRIPT);
    const key = uniqueKey("trips");
    const calls = async (op) => {
      await admin.config("RESETSTAT");
      await op();
      const stats = await admin.info("commandstats");
      return ["evalsha", "eval"].reduce((n, c) => n + Number(new RegExp(`cmdstat_${c}:calls=(\\d+)`).exec(stats)?.[1] ?? 0), 0);
    };
    const a = owner("a");
    assert.equal(await calls(() => store.acquireShared(key, a, LONG, 1, 1)), 1);
    assert.equal(await calls(() => store.acquireShared(key, owner(), LONG, 1, 1)), 1);
    assert.equal(await calls(() => store.acquireShared(key, owner(), LONG, 1, 2)), 1);
    assert.equal(await store.release(key, a), true);
  });

  test("after every hold and wait has expired (holders crashed, waiters timed out) no key of the store is left but its fence counters", { timeout: 30_000 }, async () => {
    const prefix = `leak-${randomBytes(3).toString("hex")}:`;
    const [s1, s2] = [await ioredisStore({ prefix }), await nodeRedisStore({ prefix })];
    const keys = [uniqueKey("leak-sem"), uniqueKey("leak-rw"), uniqueKey("leak-mixed")];
    // Holders that never release; waiters that give up or are handed the key and never release.
    // The waits that must be handed the key have seconds to spare past the expiry that frees it;
    // the one that must time out ends seconds before its key could be free.
    assert.ok(await s1.acquireShared(keys[0], owner(), 400, 2, 3));
    assert.ok(await s2.acquireShared(keys[0], owner(), 3_000, 1, 3));
    const w0 = s2.acquireSharedOrWait(keys[0], owner(), 600, 3, 3, 300, 50);
    assert.ok(await s1.acquireShared(keys[1], owner(), 500, 1, READ));
    const w1 = s2.acquireOrWait(keys[1], owner(), 700, 4_000, 50);
    const w2 = s1.acquireSharedOrWait(keys[1], owner(), 500, 1, READ, 200, 50);
    assert.ok(await s2.acquire(keys[2], owner(), 300));
    const w3 = s1.acquireSharedOrWait(keys[2], owner(), 900, 1, 2, 4_000, 50);
    const w4 = s2.acquireSharedOrWait(keys[2], owner(), 900, 1, 2, 4_000, 50);
    await sleep(50);
    for (const key of keys) await allExpire(admin, s1, key, 6_000);
    const answers = await Promise.all([w0, w1, w2, w3, w4]);
    assert.equal(answers[0], false);
    assert.ok(answers[1] && answers[3] && answers[4], JSON.stringify(answers));
    let found = [];
    const deadline = Date.now() + 20_000;
    for (;;) {
      found = [];
      let cursor = "0";
      do {
        const [next, batch] = await admin.scan(cursor, "MATCH", `${prefix}*`, "COUNT", 1000);
        cursor = next;
        found.push(...batch);
      } while (cursor !== "0");
      if (found.every((name) => name.endsWith(":fence")) || Date.now() > deadline) break;
      await sleep(100);
    }
    assert.deepEqual(found.filter((name) => !name.endsWith(":fence")), [], "keys left behind");
    assert.equal(found.length, 3);
    for (const name of found) assert.equal(await admin.pttl(name), -1);
  });

  test("Upstash (REST): acquireShared, release, extend, forceRelease — no waiting", async () => {
    const fixture = await startUpstashFixture(redis.port);
    try {
      const store = redisLockStore(new Upstash({ url: fixture.url, token: fixture.token, retry: false }));
      assert.equal(store.acquireSharedOrWait, undefined);
      const key = uniqueKey("upstash");
      const [a, b] = [owner("a"), owner("b")];
      assert.ok((await store.acquireShared(key, a, LONG, 1, 2)).fence >= 1);
      assert.ok(await store.acquireShared(key, b, LONG, 1, 2));
      assert.equal(await store.acquireShared(key, owner(), LONG, 1, 2), false);
      assert.deepEqual(await store.acquireShared(key, owner(), LONG, 1, 3), { heldLimit: 2 });
      assert.equal(await store.extend(key, a, LONG), true);
      assert.equal(await store.release(key, a), true);
      assert.equal(await store.forceRelease(key), true);
      assert.equal(await store.isLocked(key), false);
    } finally {
      await fixture.stop();
    }
  });
});

describe("shared holds on a Redis Cluster (three masters, started here; ioredis Cluster, node-redis createCluster)", () => {
  let cluster;
  let clusterAdmin;
  let stores;
  const clients = [];

  async function ioCluster() {
    const io = new IORedis.Cluster(cluster.nodes.map(({ host, port }) => ({ host, port })));
    await new Promise((resolve, reject) => {
      io.once("ready", resolve);
      io.once("error", reject);
    });
    clients.push(async () => io.disconnect());
    return io;
  }
  async function nrCluster() {
    const nr = createNodeRedisCluster({ rootNodes: cluster.nodes.map(({ url }) => ({ url })) });
    nr.on("error", () => {});
    await nr.connect();
    clients.push(() => nr.close());
    return nr;
  }
  const storeOn = (client, options = {}) => {
    const store = redisLockStore(client, { prefix: "ks{x}:", ...options });
    made.push(store);
    return store;
  };

  before(async () => {
    cluster = await startRedisCluster({ masters: 3 });
    clusterAdmin = await ioCluster();
    stores = [storeOn(await ioCluster()), storeOn(await nrCluster())];
  });

  after(async () => {
    for (const store of stores ?? []) await store.close?.();
    for (const close of clients.reverse()) await close();
    await cluster?.stop();
  });

  // Braces in the keys: the tag is the store's, so each key's names share one slot anyway.
  registerCases(() => ({ stores, admin: clusterAdmin, slowStore: async () => storeOn(await nrCluster(), { safetyNetMs: 60_000 }) }), "a{b}c:");

  test("shared holds land on all three masters, every name of a key in one slot", async () => {
    const ports = new Set();
    for (let i = 0; ports.size < 3; i++) {
      assert.ok(i < 100, "keys landed on fewer than three masters");
      const key = `}{${i}`;
      const me = owner();
      assert.ok(await stores[i % 2].acquireShared(key, me, LONG, 1, 2));
      const names = Object.values(namesOf(stores[0], key));
      const slots = new Set(await Promise.all(names.map((n) => clusterAdmin.cluster("KEYSLOT", n))));
      assert.equal(slots.size, 1, `${names.join(", ")} span several slots`);
      const slot = [...slots][0];
      const ranges = await clusterAdmin.cluster("SLOTS");
      ports.add(ranges.find(([from, to]) => slot >= from && slot <= to)[2][1]);
      assert.equal(await stores[(i + 1) % 2].release(key, me), true);
    }
  });
});
