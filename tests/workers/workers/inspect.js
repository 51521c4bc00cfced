// Hold metadata and inspect on the Durable Object store, from inside a Worker: through the lock
// API (`run`/`acquire` with `metadata`, `inspect(key)`), through the store's own methods, and
// through the object's RPC. Each case on a fresh key.
import { inspect, lock, readLock, semaphore } from "keel-lock";
import { READ_LIMIT, rpcArgs, rpcCounts, sleep, useStore } from "./shared.js";
import { check, eq, fenceOf, rejects, stubFor, unique, untilFree, untilQueued, watched } from "./checks.js";

/** What `inspect` shows of `key`'s holders: `[metadata, fence]` each, in order. */
async function shown(key) {
  return (await inspect(key)).holders.map((h) => [h.metadata, h.fence]);
}

/** Checks `remainingMs` of every holder of `info` is a whole number in (0, `ttl`]. */
function timeLeft(info, ttl, what) {
  for (const h of info.holders) {
    check(Number.isSafeInteger(h.remainingMs) && h.remainingMs > 0 && h.remainingMs <= ttl, `${what}: ${h.remainingMs} ms left of ${ttl}`);
  }
}

/** The owner tokens `values` holds anywhere, as strings: none may be in an inspect answer. */
function leaks(answer, tokens) {
  const text = JSON.stringify(answer);
  return tokens.filter((t) => text.includes(t));
}

export const inspectSuite = {
  async "metadata round-trips through acquire, extend and run; release and expiry drop it"(env) {
    useStore(env);
    const key = unique("round-trip");
    eq(await inspect(key), { key, held: false, holders: [], waiting: 0 }, "inspect of a free key");
    const l = lock(key, 5_000);
    check(await l.acquire({ metadata: "host-a job 7" }), "acquire");
    const info = await inspect(key);
    eq([info.held, info.waiting, info.holders.map((h) => [h.metadata, h.fence])], [true, 0, [["host-a job 7", l.fence]]], "inspect of the hold");
    timeLeft(info, 5_000, "after acquire");
    await l.extend(60_000);
    const extended = await inspect(key);
    eq(extended.holders.map((h) => [h.metadata, h.fence]), [["host-a job 7", l.fence]], "after extend");
    check(extended.holders[0].remainingMs > 5_000, `extend did not move remainingMs: ${extended.holders[0].remainingMs}`);
    const own = await l.inspect();
    eq([own.key, own.held, own.holders.map((h) => h.metadata)], [key, true, ["host-a job 7"]], "the handle's inspect");
    check(await l.release(), "release");
    eq(await shown(key), [], "after release");

    // Inside a run, the run's hold with its metadata; afterwards nothing.
    const [ran, inside] = await lock(key, 5_000).run(async ({ fence }) => [fence, await shown(key)], { metadata: "a run" });
    check(ran, "run");
    eq(inside[1], [["a run", inside[0]]], "inspect inside the run");
    eq(await shown(key), [], "after the run");

    // A hold without metadata shows null, also where an expired hold with metadata was before.
    const brief = lock(key, 200);
    check(await brief.acquire({ metadata: "gone soon" }), "brief acquire");
    await untilFree(brief);
    eq(await shown(key), [], "after the hold expired");
    const plain = lock(key, 5_000);
    check(await plain.acquire(), "plain acquire over the expired row");
    eq(await shown(key), [[null, plain.fence]], "a hold without metadata, after one with");
    check(plain.fence > brief.fence, "fences");
    check(await plain.release(), "plain release");
  },

  async "1 KiB of UTF-8 is the limit, counted in bytes"(env) {
    useStore(env);
    const key = unique("limit");
    const most = "é".repeat(512); // 1024 bytes
    const [ran, seen] = await lock(key).run(() => shown(key), { metadata: most });
    check(ran, "run with 1024 bytes of metadata");
    eq(seen[0][0], most, "1024 bytes of metadata, shown back");
    await rejects(lock(key).run(() => 1, { metadata: most + "e" }), RangeError, /1025 bytes/, "1025 bytes");
    await rejects(lock(key).run(() => 1, { metadata: "x".repeat(1025) }), RangeError, /1025 bytes/, "1025 ASCII bytes");
    await rejects(lock(key).acquire({ metadata: 42 }), TypeError, /metadata must be a string/, "a number");
    await rejects(lock(key).run(() => 1, { metadata: null }), TypeError, /metadata must be a string/, "null through the lock API");
    eq(await shown(key), [], "nothing held after the refusals");
  },

  async "each permit and each reader shows its own metadata, in fence order"(env) {
    useStore(env);
    const key = unique("permits");
    const a = semaphore(key, 3, 10_000);
    const b = semaphore(key, 3, 10_000);
    check(await a.acquire({ metadata: "permit a" }), "a");
    check(await b.acquire({ metadata: "permit b", permits: 2 }), "b, two permits");
    eq(await shown(key), [["permit a", a.fence], ["permit b", b.fence]], "two permit holders");
    eq(await semaphore(key, 3).acquire({ metadata: "permit c" }), false, "a fourth permit");
    check(await a.release(), "a releases");
    eq(await shown(key), [["permit b", b.fence]], "after a's release");
    await b.extend(20_000);
    eq(await shown(key), [["permit b", b.fence]], "after b's extend");
    check(await b.release(), "b releases");

    const readKey = unique("readers");
    const readers = [readLock(readKey), readLock(readKey), readLock(readKey)];
    for (const [i, r] of readers.entries()) check(await r.acquire({ metadata: i === 1 ? undefined : `reader ${i}` }), `reader ${i}`);
    const info = await inspect(readKey);
    eq(info.holders.map((h) => [h.metadata, h.fence]), readers.map((r, i) => [i === 1 ? null : `reader ${i}`, r.fence]), "three readers");
    timeLeft(info, 30_000, "readers");
    for (const r of readers) check(await r.release(), "reader release");
    eq(await shown(readKey), [], "after the readers left");
  },

  async "a waiter's metadata becomes its grant's when the key is handed over"(env) {
    useStore(env);
    const key = unique("hand-over");
    const holder = lock(key, 60_000);
    check(await holder.acquire({ metadata: "the holder" }), "holder");
    const waiter = lock(key, 10_000);
    const waiting = waiter.acquire({ timeout: 20_000, metadata: "the waiter" });
    await untilQueued(env, key, 1);
    const queued = await inspect(key);
    eq([queued.holders.map((h) => h.metadata), queued.waiting], [["the holder"], 1], "while the waiter is queued");
    check(await holder.release(), "holder release");
    check(await waiting, "the waiter was handed the key");
    eq(await shown(key), [["the waiter", waiter.fence]], "after the hand-over");
    check(waiter.fence > holder.fence, "fences");
    eq(rpcArgs(key).acquireOrWait?.at(-1), "the waiter", "the waiting call carried its metadata last");
    check(await waiter.release(), "waiter release");

    // Shared waiters too, granted together by one release, each with its own.
    const store = useStore(env);
    fenceOf(await store.acquire(key, "writer", 60_000, "the writer"), "writer");
    const readers = ["r1", "r2"].map((o) => watched(store.acquireSharedOrWait(key, o, 10_000, 1, READ_LIMIT, 20_000, 10, `reader ${o}`)));
    await untilQueued(env, key, 2);
    eq((await inspect(key)).waiting, 2, "two readers queued");
    eq(await store.release(key, "writer"), true, "the writer releases");
    const fences = [];
    for (const r of readers) fences.push(fenceOf(await r.promise, "a queued reader"));
    eq(await shown(key), [["reader r1", fences[0]], ["reader r2", fences[1]]], "the readers after the hand-over");
    for (const o of ["r1", "r2"]) eq(await store.release(key, o), true, `${o} releases`);
  },

  async "waiting counts the live waiters of the key only"(env) {
    useStore(env);
    const key = unique("waiting");
    const other = unique("waiting-other");
    const holder = lock(key, 30_000);
    check(await holder.acquire(), "holder");
    const long = lock(key).acquire({ timeout: 20_000 });
    // Its wait lasts until both are seen queued, and runs out long before the other's.
    const short = lock(key).acquire({ timeout: 5_000, retryDelay: 10_000 });
    await untilQueued(env, key, 2);
    eq((await inspect(key)).waiting, 2, "two queued");
    eq((await inspect(other)).waiting, 0, "another key");
    eq(await short, false, "the short wait ran out");
    eq((await inspect(key)).waiting, 1, "one left after the short wait");
    check(await holder.release(), "release");
    check(await long, "the long waiter");
    eq((await inspect(key)).waiting, 0, "none queued after the hand-over");
    await lock(key).forceRelease();
  },

  async "the store's methods carry metadata last, and only when given"(env) {
    const store = useStore(env);
    const key = unique("args");
    const [ran] = await lock(key, 5_000).run(() => 1);
    check(ran, "run without metadata");
    eq(rpcArgs(key).acquire.length, 3, "acquire without metadata: key, owner, TTL");
    eq(rpcCounts(key), { acquire: 1, release: 1 }, "RPCs of one run without metadata");
    await lock(key, 5_000).run(() => 1, { metadata: "said" });
    eq(rpcArgs(key).acquire.slice(2), [5_000, "said"], "acquire with metadata: the TTL, then it");
    const permit = await store.acquireShared(key, "owner-p", 5_000, 1, 2, "permit");
    eq(rpcArgs(key).acquireShared.slice(3), [1, 2, "permit"], "acquireShared: weight, limit, metadata");
    fenceOf(permit, "permit");
    eq(await store.release(key, "owner-p"), true, "permit release");
    fenceOf(await store.acquireShared(key, "owner-q", 5_000, 1, 2), "permit without");
    eq(rpcArgs(key).acquireShared.length, 5, "acquireShared without metadata");
    eq(await store.release(key, "owner-q"), true, "release");
    // null is "none" at the store too: nothing more is sent.
    fenceOf(await store.acquire(key, "owner-n", 5_000, null), "acquire with null metadata");
    eq(rpcArgs(key).acquire.length, 3, "acquire with null metadata sends none");
    eq(await shown(key), [[null, (await inspect(key)).holders[0].fence]], "null metadata kept as none");
    eq(await store.release(key, "owner-n"), true, "release");
  },

  async "bad metadata is refused by the store before any RPC, and by the object"(env) {
    const store = useStore(env);
    const key = unique("bad-metadata");
    const stub = stubFor(env, key);
    const long = "x".repeat(1025);
    await rejects(store.acquire(key, "o1", 1000, 42), TypeError, /metadata must be a string, got number 42/, "store: a number");
    await rejects(store.acquire(key, "o1", 1000, {}), TypeError, /metadata must be a string/, "store: an object");
    await rejects(store.acquire(key, "o1", 1000, long), RangeError, /metadata is 1025 bytes of UTF-8; the limit is 1024/, "store: 1025 bytes");
    await rejects(store.acquireOrWait(key, "o1", 1000, 100, 10, 7), TypeError, /metadata must be a string/, "store: waiting, a number");
    await rejects(store.acquireShared(key, "o1", 1000, 1, 2, long), RangeError, /1025 bytes/, "store: shared, too long");
    await rejects(store.acquireSharedOrWait(key, "o1", 1000, 1, 2, 100, 10, false), TypeError, /metadata must be a string/, "store: shared waiting, a boolean");
    await rejects(store.inspect(42), TypeError, /key must be a string/, "store: inspect of a number");
    await rejects(store.inspect(""), RangeError, /non-empty/, "store: inspect of an empty key");
    eq(rpcCounts(key), {}, "bad calls that reached the object through the store");
    await rejects(stub.acquire(key, "o1", 1000, 42), TypeError, /metadata must be a string/, "object: a number");
    await rejects(stub.acquire(key, "o1", 1000, "é".repeat(513)), RangeError, /1026 bytes/, "object: 1026 bytes");
    await rejects(stub.acquireOrWait(key, "o1", 1000, 0, ["x"]), TypeError, /metadata must be a string/, "object: waiting, an array");
    await rejects(stub.acquireShared(key, "o1", 1000, 1, 2, long), RangeError, /1025 bytes/, "object: shared");
    await rejects(stub.acquireSharedOrWait(key, "o1", 1000, 1, 2, 0, 3), TypeError, /metadata must be a string/, "object: shared waiting");
    await rejects(stub.inspect(7), TypeError, /key must be a string/, "object: inspect of a number");
    await rejects(stub.inspect("k".repeat(600)), RangeError, /bytes/, "object: inspect of a long key");
    eq(await stub.isLocked(key), false, "nothing was taken by the refused calls");
    // The object survived all of that and keeps metadata given as the RPC's last argument.
    fenceOf(await stub.acquire(key, "o1", 5_000, "by RPC"), "acquire by RPC");
    const answer = await stub.inspect(key);
    eq([answer.holders.map((h) => h.metadata), answer.waiting], [["by RPC"], 0], "the object's own inspect");
    eq(leaks(answer, ["o1"]), [], "owner tokens in the object's inspect answer");
    eq(await stub.release(key, "o1"), true, "release by RPC");
  },

  async "inspect never shows an owner token"(env) {
    const store = useStore(env);
    const key = unique("tokens");
    fenceOf(await store.acquireShared(key, "owner-token-one", 5_000, 1, 3, "one"), "one");
    fenceOf(await store.acquireShared(key, "owner-token-two", 5_000, 1, 3), "two");
    const waiter = watched(store.acquireOrWait(key, "owner-token-three", 5_000, 10_000, 10, "three"));
    await untilQueued(env, key, 1);
    const tokens = ["owner-token-one", "owner-token-two", "owner-token-three"];
    eq(leaks(await store.inspect(key), tokens), [], "the store's inspect");
    eq(leaks(await stubFor(env, key).inspect(key), tokens), [], "the object's inspect");
    eq(leaks(await inspect(key), tokens), [], "keel-lock's inspect");
    await store.forceRelease(key);
    fenceOf(await waiter.promise, "the waiter after the force-release");
    await store.forceRelease(key);
  },

  async "an object written before hold metadata keeps working, and is upgraded once"(env) {
    const store = useStore(env);
    const key = unique("old-schema");
    const sharedKey = unique("old-schema-shared");
    // Storage as an object made before hold metadata left it: no fence or metadata columns, a
    // live lock holder whose last fence was 41, two live permits of 3 (their fences not kept).
    await stubFor(env, key).downgrade(key, { holder: "old-holder", lastFence: 41 });
    await stubFor(env, sharedKey).downgrade(sharedKey, { permits: ["old-permit-1", "old-permit-2"], lastFence: 7 });
    for (const k of [key, sharedKey]) await stubFor(env, k).crash().catch(() => {});
    for (let round = 0; round < 2; round++) {
      eq(await shown(key), round === 0 ? [[null, 41]] : [], `round ${round}: the old holder, its fence filled in`);
      eq(await shown(sharedKey), round === 0 ? [[null, null], [null, null]] : [[null, 9]], `round ${round}: the old permits`);
      if (round === 0) {
        eq(await store.acquire(key, "newcomer", 5_000), false, "the old holder still holds the key");
        eq(await store.extend(key, "old-holder", 60_000), true, "the old holder's extend");
        eq(await shown(key), [[null, 41]], "after the old holder's extend");
        eq(await store.release(key, "old-holder"), true, "the old holder's release");
        eq(await store.release(sharedKey, "old-permit-1"), true, "an old permit's release");
        const grant = await store.acquireShared(sharedKey, "new-permit", 5_000, 1, 3, "new permit");
        eq(fenceOf(grant, "a new permit beside the old one"), 8, "its fence, after the old ones' counter");
        eq(await shown(sharedKey), [[null, null], ["new permit", 8]], "the old permit and the new one");
        eq(await store.release(sharedKey, "old-permit-2"), true, "the other old permit's release");
        eq(await store.release(sharedKey, "new-permit"), true, "the new permit's release");
        fenceOf(await store.acquireShared(sharedKey, "newest", 60_000, 1, 3), "another permit");
        // A second start finds the columns there: nothing to upgrade, and nothing lost.
        for (const k of [key, sharedKey]) await stubFor(env, k).crash().catch(() => {});
      }
    }
    const next = lock(key, 5_000);
    check(await next.acquire({ metadata: "after the upgrade" }), "acquire after the upgrade");
    eq(await shown(key), [["after the upgrade", 42]], "a new hold on the upgraded object");
    check(await next.release(), "release");
    eq(await store.release(sharedKey, "newest"), true, "release of the last permit");
  },
};
