// Worker A: owns the LOCKS (LockDurableObject) and COUNTER namespaces; runs the lock API suite,
// the conformance kit and the bad-input checks inside workerd, with DurableObjectLockStore.
import {
  inspect,
  lock,
  restoreLock,
  getLockStore,
  setLockStore,
  DurableObjectLockStore,
  LockDurableObject as PackagedLockDurableObject,
  LockNotHeldError,
  onLockEvent,
} from "keel-lock";
import { instrumentKeelLock } from "keel-lock/otel";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
// The conformance kit, from its own entry (and its own wasm instance): it drives the
// DurableObjectLockStore made by "keel-lock" through the store's five methods.
import { lockStoreResults } from "keel-lock/testing";
import { databaseLockStore } from "keel-lock/sql";
import {
  Counter,
  Ledger,
  READ_LIMIT,
  campaignFor,
  contend,
  contendMulti,
  contendShared,
  observeLeaders,
  rpcCounts,
  stats,
  sleep,
  useStore,
} from "./shared.js";
import { inspectSuite } from "./inspect.js";
import { check, eq, fenceOf, increasing, rejects, stubFor, throwsSync, unique, untilFree, untilQueued, watched } from "./checks.js";

/**
 * The package's Durable Object plus one test hook: `crash()` resets the object the way an
 * eviction or a deploy does (in-memory state and open calls are lost, storage stays).
 */
export class LockDurableObject extends PackagedLockDurableObject {
  crash() {
    this.ctx.abort(new Error("reset by the test"));
  }
  /**
   * Checks that `waiting` calls are queued, then keeps the object busy for `ms` and
   * force-releases `key`, all in one synchronous turn: the release lands after timers that fell
   * due meanwhile, before any of them runs.
   */
  async stallThenForceRelease(key, ms, waiting) {
    const seen = (await this.snapshot()).waiting;
    if (seen !== waiting) throw new Error(`${seen} calls queued before the stall, expected ${waiting}`);
    const started = Date.now();
    for (let spins = 1; Date.now() - started < ms; spins++) {
      if (spins % 1e6 === 0 && Date.now() === started) throw new Error("the clock does not move while the object is busy");
    }
    return this.forceRelease(key);
  }
  /**
   * Rewrites this object's storage as an object made before hold metadata left it: both tables
   * without their fence and metadata columns, holding `key` for `holder` (a lock) or for each of
   * `permits` (one permit of 3 each), live for a minute, with `lastFence` as the key's counter.
   * A `crash()` after it makes the next instance open the old tables.
   */
  downgrade(key, { holder, permits = [], lastFence }) {
    const sql = this.ctx.storage.sql;
    const until = Date.now() + 60_000;
    sql.exec("DROP TABLE keel_locks");
    sql.exec("CREATE TABLE keel_locks (key TEXT PRIMARY KEY NOT NULL, owner TEXT NOT NULL, expires_at INTEGER NOT NULL) WITHOUT ROWID");
    sql.exec("DROP TABLE keel_shared");
    sql.exec(
      "CREATE TABLE keel_shared (key TEXT NOT NULL, owner TEXT NOT NULL, expires_at INTEGER NOT NULL, " +
        "weight INTEGER NOT NULL, lim INTEGER NOT NULL, PRIMARY KEY (key, owner)) WITHOUT ROWID",
    );
    if (holder !== undefined) sql.exec("INSERT INTO keel_locks VALUES (?, ?, ?)", key, holder, until);
    for (const owner of permits) sql.exec("INSERT INTO keel_shared VALUES (?, ?, ?, 1, 3)", key, owner, until);
    sql.exec("INSERT INTO keel_fences (key, last) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET last = excluded.last", key, lastFence);
  }
}

export { Counter, Ledger };

/** The lock API suite, each case on a fresh key. */
const suite = {
  async "store is the DurableObjectLockStore"(env) {
    const s = useStore(env);
    check(getLockStore() === s, "getLockStore() is not the store that was set");
    check(s instanceof DurableObjectLockStore, "not a DurableObjectLockStore");
  },
  async "run runs the task and releases"() {
    const l = lock(unique("run"), 5_000);
    eq(await l.run(async () => "charged"), [true, "charged"], "run()");
    eq(await l.isLocked(), false, "isLocked after run");
  },
  async "run on a held key does not run the task"() {
    const key = unique("held");
    const holder = lock(key, 5_000);
    check(await holder.acquire(), "holder acquire");
    let called = false;
    eq(await lock(key).run(() => (called = true)), [false, null], "run() while held");
    eq(await lock(key).runImmediately(() => (called = true)), [false, null], "runImmediately() while held");
    check(!called, "task ran while the lock was held");
    check(await holder.release(), "holder release");
  },
  async "run releases when the task throws"() {
    const l = lock(unique("throws"), 5_000);
    await rejects(l.run(() => { throw new TypeError("boom"); }), TypeError, /boom/, "run(throwing task)");
    eq(await l.isLocked(), false, "isLocked after a throwing task");
  },
  async "acquire, release, release again"() {
    const key = unique("acq");
    const a = lock(key, 5_000);
    eq(await a.acquire(), true, "first acquire");
    eq(await lock(key).acquire(), false, "second handle's acquire");
    eq(await a.release(), true, "release");
    eq(await a.release(), false, "second release");
    eq(await lock(key).release(), false, "release by a handle that never held");
  },
  async "run with a timeout waits for the holder"() {
    const key = unique("wait");
    const holder = lock(key, 5_000);
    check(await holder.acquire(), "holder acquire");
    const waiter = lock(key).run(async () => "after", { timeout: 5_000, retryDelay: 10 });
    await sleep(100);
    check(await holder.release(), "holder release");
    eq(await waiter, [true, "after"], "waiter");
  },
  async "acquire with a timeout gives up while held"() {
    const key = unique("giveup");
    check(await lock(key, 5_000).acquire(), "holder acquire");
    eq(await lock(key).acquire({ timeout: 150, retryDelay: 20 }), false, "timed-out acquire");
  },
  async "extend moves the expiry; lost lock throws LockNotHeldError"() {
    const key = unique("extend");
    const l = lock(key, 5_000);
    check(await l.acquire(), "acquire");
    await l.extend(60_000);
    const left = await l.getRemainingTime();
    check(left > 5_000 && left <= 60_000, `remaining after extend(60000) is ${left}`);
    const short = lock(unique("extend-lost"), 100);
    check(await short.acquire(), "short acquire");
    await untilFree(short);
    const e = await rejects(short.extend(), LockNotHeldError, /not held/, "extend after expiry");
    eq(e.key, short.key, "LockNotHeldError.key");
    await rejects(lock(unique("never")).extend(), LockNotHeldError, /not held/, "extend never acquired");
  },
  async "serialize and restoreLock"() {
    const key = unique("ser");
    const l = lock(key, 10_000);
    await throwsSync(() => l.serialize(), LockNotHeldError, /serialize/, "serialize before acquire");
    check(await l.acquire(), "acquire");
    const restored = restoreLock(l.serialize());
    eq(restored.key, key, "restored key");
    eq(restored.ttlMs, 10_000, "restored ttl");
    await restored.extend();
    eq(await restored.release(), true, "restored release");
    eq(await l.release(), false, "original release after the restored one freed it");
    await throwsSync(() => restoreLock("garbage"), TypeError, /serialized/, "restoreLock(garbage)");
  },
  async "isLocked, isExpired, getRemainingTime"() {
    // Held for two seconds: the checks while held take a few RPCs, on however loaded a machine.
    const l = lock(unique("state"), 2_000);
    eq(await l.isLocked(), false, "isLocked before");
    eq(await l.getRemainingTime(), null, "remaining before");
    eq(await l.isExpired(), false, "isExpired before acquire");
    check(await l.acquire(), "acquire");
    eq(await l.isLocked(), true, "isLocked held");
    const left = await l.getRemainingTime();
    check(left > 0 && left <= 2_000, `remaining ${left}`);
    eq(await l.isExpired(), false, "isExpired while held");
    await untilFree(l);
    eq(await l.isExpired(), true, "isExpired after expiry");
    eq(await l.getRemainingTime(), null, "remaining after expiry");
  },
  async "ownership: an expired holder cannot free the new holder's lock"() {
    const key = unique("own");
    const old = lock(key, 150);
    check(await old.acquire(), "old acquire");
    await untilFree(old);
    const fresh = lock(key, 10_000);
    check(await fresh.acquire(), "new holder acquire");
    eq(await old.release(), false, "expired holder's release");
    eq(await fresh.isLocked(), true, "still locked after the stale release");
    await rejects(old.extend(), LockNotHeldError, /not held/, "expired holder's extend");
    await fresh.extend();
    eq(await fresh.release(), true, "new holder's release");
  },
  async "bad input to the lock API"() {
    await throwsSync(() => lock(""), RangeError, /non-empty/, "empty key");
    await throwsSync(() => lock("k", -5), RangeError, /ttlMs/, "negative TTL");
    await throwsSync(() => lock(42), TypeError, /string/, "number key");
    await throwsSync(() => new DurableObjectLockStore({}), TypeError, /namespace/, "store over {}");
    await throwsSync(() => new DurableObjectLockStore(undefined), TypeError, /namespace/, "store over undefined");
  },
  async "the store's methods, called directly: answers, and bad input refused before any RPC"(env) {
    const key = unique("store");
    let routed = 0;
    const store = new DurableObjectLockStore({
      idFromName: (name) => (routed++, env.LOCKS.idFromName(name)),
      get: (id) => env.LOCKS.get(id),
    });
    const owner = "owner-direct-1";
    const grant = await store.acquire(key, owner, 5_000);
    check(Number.isSafeInteger(grant?.fence) && grant.fence >= 1, `acquire answered ${JSON.stringify(grant)}`);
    eq(await store.acquire(key, "owner-direct-2", 5_000), false, "acquire of a held key");
    eq(await store.isLocked(key), true, "isLocked");
    const left = await store.remainingTime(key);
    check(Number.isSafeInteger(left) && left > 0 && left <= 5_000, `remainingTime ${left}`);
    eq(await store.extend(key, owner, 10_000.5), true, "extend (a fractional TTL rounds up)");
    check((await store.remainingTime(key)) > 5_000, "remainingTime after extend");
    eq(await store.extend(key, "owner-direct-2", 10_000), false, "extend by another owner");
    eq(await store.release(key, "owner-direct-2"), false, "release by another owner");
    eq(await store.release(key, owner), true, "release");
    eq(await store.isLocked(key), false, "isLocked after release");
    eq(await store.remainingTime(key), null, "remainingTime after release");
    eq(routed, 11, "one call to the namespace per store call");
    await rejects(store.acquire(42, owner, 1000), TypeError, /key must be a string/, "number key");
    await rejects(store.acquire("\uD800", owner, 1000), RangeError, /lone surrogate/, "lone surrogate key");
    await rejects(store.acquire("k".repeat(600), owner, 1000), RangeError, /bytes/, "long key");
    await rejects(store.acquire(key, "has space", 1000), RangeError, /owner token/, "bad owner");
    await rejects(store.acquire(key, null, 1000), TypeError, /owner must be a string/, "null owner");
    await rejects(store.acquire(key, owner), TypeError, /ttlMs is required/, "no TTL");
    await rejects(store.acquire(key, owner, -5), RangeError, /ttlMs/, "negative TTL");
    await rejects(store.release("", owner), RangeError, /non-empty/, "empty key");
    await rejects(store.extend(key, owner, 1e12), RangeError, /ttlMs/, "huge TTL");
    await rejects(store.isLocked(["x"]), TypeError, /key must be a string/, "array key");
    await rejects(store.remainingTime(undefined), TypeError, /key must be a string/, "no key");
    eq(routed, 11, "no bad call reached the namespace");
    // A namespace whose stubs lack the methods (bound to some other class) is named as such.
    const stubless = new DurableObjectLockStore({ idFromName: (n) => n, get: () => ({}) });
    await rejects(stubless.acquire(key, owner, 1000), TypeError, /bound to LockDurableObject; it has no acquire\(\)/, "stub without acquire");
    await rejects(stubless.release(key, owner), TypeError, /it has no release\(\)/, "stub without release");
    // A stub answering outside the contract is a broken store, not a guess.
    const odd = new DurableObjectLockStore({ idFromName: (n) => n, get: () => ({ acquire: async () => ({ fence: 0 }), isLocked: async () => "yes" }) });
    await rejects(odd.acquire(key, owner, 1000), TypeError, /LockDurableObject\.acquire\(\) must answer/, "fence 0");
    await rejects(odd.isLocked(key), TypeError, /LockDurableObject\.isLocked\(\) must answer a boolean/, "non-boolean isLocked");
  },
  async "garbage RPC arguments are refused with a clear error"(env) {
    const key = unique("rpc");
    const stub = stubFor(env, key);
    await rejects(stub.acquire(42, {}, 1000), TypeError, /key must be a string/, "number key");
    await rejects(stub.acquire(key, "owner-1", -5), RangeError, /ttlMs .* got -5/, "negative TTL");
    await rejects(stub.acquire(key, "owner-1", "10"), TypeError, /ttlMs must be a number/, "string TTL");
    await rejects(stub.acquire(key, "owner-1", NaN), RangeError, /ttlMs/, "NaN TTL");
    await rejects(stub.acquire(key, "has space", 1000), RangeError, /owner token/, "bad owner");
    await rejects(stub.acquire(key, null, 1000), TypeError, /owner must be a string/, "null owner");
    await rejects(stub.release("", "owner-1"), RangeError, /non-empty/, "empty key");
    await rejects(stub.extend(key, "owner-1", 1e12), RangeError, /ttlMs/, "huge TTL");
    await rejects(stub.remainingTime(["x"]), TypeError, /key must be a string/, "array key");
    await rejects(stub.isLocked("k".repeat(600)), RangeError, /bytes/, "long key");
    // The object survived all of that and still works.
    const grant = await stub.acquire(key, "owner-1", 60_000);
    check(Number.isSafeInteger(grant?.fence) && grant.fence >= 1, `acquire after garbage answered ${JSON.stringify(grant)}`);
    eq(await stub.release(key, "owner-1"), true, "release after garbage");
  },
  async "fences increase across handles, release and expiry"() {
    const key = unique("fences");
    let last = 0;
    for (let round = 0; round < 6; round++) {
      // Released (long enough to be there for its release) or left to expire (soon).
      const l = lock(key, round % 2 === 0 ? 60_000 : 200);
      eq(l.fence, null, "fence before acquire");
      check(await l.acquire(), `acquire in round ${round}`);
      check(Number.isSafeInteger(l.fence) && l.fence > last, `round ${round}: fence ${l.fence} after ${last}`);
      last = l.fence;
      if (round % 2 === 0) check(await l.release(), "release");
      else await untilFree(l); // left to expire (the alarm may delete the row; the fence stays)
    }
    const [ran, seen] = await lock(key, 5_000).run(({ fence }) => fence);
    check(ran && seen > last, `run() context fence ${seen} after ${last}`);
  },
  async "a holder that paused past its TTL is fenced out by the resource"(env) {
    const key = unique("ledger");
    const ledger = env.LEDGER.get(env.LEDGER.idFromName(key));
    const a = lock(key, 300);
    check(await a.acquire(), "A acquires");
    const fenceA = a.fence;
    await untilFree(a); // A's pause: its TTL passes without it noticing
    const b = lock(key, 10_000);
    check(await b.acquire(), "B acquires the expired key");
    check(b.fence > fenceA, `B's fence ${b.fence} is not above A's ${fenceA}`);
    eq((await ledger.write("B's balance", b.fence)).accepted, true, "B's write");
    eq((await ledger.write("A's stale balance", fenceA)).accepted, false, "A's stale write");
    eq((await ledger.read()).value, "B's balance", "the ledger keeps B's write");
    check(await b.release(), "B releases");
  },
  async "forceRelease frees a held key; a waiter is handed it; the holder's extend is refused"(env) {
    const key = unique("force");
    const holder = lock(key, 60_000);
    check(await holder.acquire(), "holder acquire");
    const waiter = lock(key, 10_000).acquire({ timeout: 10_000 });
    await sleep(50);
    eq(await lock(key).forceRelease(), true, "forceRelease of a held key");
    check(await waiter, "the waiter was handed the key");
    await rejects(holder.extend(), LockNotHeldError, /not held/, "the forced-out holder's extend");
    const stub = stubFor(env, key);
    eq((await stub.snapshot()).waiting, 0, "queue after the hand-over");
    eq(await lock(key).forceRelease(), true, "forceRelease of the waiter's hold");
    eq(await lock(key).forceRelease(), false, "forceRelease of a free key");
  },
  async "the alarm deletes an expired row"(env) {
    const key = unique("alarm");
    // Held for two seconds: still there for the snapshot after the acquire.
    const l = lock(key, 2_000);
    check(await l.acquire(), "acquire");
    const stub = stubFor(env, key);
    const before = await stub.snapshot();
    eq(before.rows.length, 1, "rows after acquire");
    eq(before.alarm, before.rows[0].expiresAt, "alarm set to the row's expiry");
    // No lock operation touches the key from here on: only the alarm can delete the row.
    const deadline = Date.now() + 15_000;
    let after = before;
    while (after.rows.length > 0 && Date.now() < deadline) {
      await sleep(50);
      after = await stub.snapshot();
    }
    eq(after.rows, [], "rows after the alarm");
    eq(after.alarm, null, "no alarm left");
  },
  async "the alarm is never later than the earliest expiry, and moves only to stay so"(env) {
    const key = unique("alarm-moves");
    const stub = stubFor(env, key);
    const l = lock(key, 60_000);
    check(await l.acquire(), "acquire");
    const first = await stub.snapshot();
    eq(first.alarm, first.rows[0].expiresAt, "a new object's first write sets the alarm to its expiry");
    await l.extend(120_000);
    const later = await stub.snapshot();
    eq(later.alarm, first.alarm, "an extend to a later expiry leaves the alarm");
    check(later.rows[0].expiresAt > later.alarm, `alarm ${later.alarm} not before the expiry ${later.rows[0].expiresAt}`);
    // Five seconds left: the steps below, up to "acquire again", come before the alarm.
    await l.extend(5_000);
    const earlier = await stub.snapshot();
    eq(earlier.alarm, earlier.rows[0].expiresAt, "an extend to an expiry before the alarm moves it there");
    check(earlier.alarm < first.alarm, `alarm did not move earlier: ${first.alarm} -> ${earlier.alarm}`);
    check(await l.release(), "release");
    const released = await stub.snapshot();
    eq(released.rows, [], "rows after release");
    eq(released.alarm, earlier.alarm, "a release leaves the alarm");
    // Acquired again before the alarm fires: the alarm is already due before the new expiry.
    const again = lock(key, 60_000);
    check(await again.acquire(), "acquire again");
    const held = await stub.snapshot();
    eq(held.alarm, earlier.alarm, "an acquire expiring after the alarm leaves it");
    // It fires with the key held: the live row stays, the alarm moves to the holder's expiry.
    let deadline = Date.now() + 15_000;
    let fired = held;
    while (fired.alarm === held.alarm && Date.now() < deadline) {
      await sleep(50);
      fired = await stub.snapshot();
    }
    eq(fired.rows.length, 1, "rows after the alarm fired with the key held");
    eq(fired.alarm, fired.rows[0].expiresAt, "the fired alarm points at the holder's expiry");
    // Brought near (still there for the snapshot and the release), then released: the alarm
    // fires once, finds nothing, and leaves no alarm.
    await again.extend(2_000);
    const near = await stub.snapshot();
    eq(near.alarm, near.rows[0].expiresAt, "an extend to an expiry before the alarm moves it there");
    check(await again.release(), "release again");
    deadline = Date.now() + 15_000;
    let after = await stub.snapshot();
    while (after.alarm !== null && Date.now() < deadline) {
      await sleep(50);
      after = await stub.snapshot();
    }
    eq(after.rows, [], "rows after the released key's alarm fired");
    eq(after.alarm, null, "no alarm left after it fired");
    // With no alarm, the next write sets one at its expiry.
    const third = lock(key, 60_000);
    check(await third.acquire(), "acquire after the alarm");
    const set = await stub.snapshot();
    eq(set.alarm, set.rows[0].expiresAt, "the first write after no alarm sets it to its expiry");
    check(await third.release(), "release the third hold");
  },
};

/** Critical sections entered in this request: the overlap and the fences, in entry order. */
function sections() {
  const seen = { inside: 0, maxInside: 0, fences: [], labels: [] };
  const enter = (fence, label) => {
    seen.inside += 1;
    seen.maxInside = Math.max(seen.maxInside, seen.inside);
    seen.fences.push(fence);
    seen.labels.push(label);
  };
  const exit = () => (seen.inside -= 1);
  return { seen, enter, exit };
}

/** Waiting in the Durable Object's queue (acquireOrWait / withdraw), each case on a fresh key. */
const waitingSuite = {
  async "a waiter's timeout leaves the queue clean"(env) {
    const key = unique("timeout");
    const holder = lock(key, 10_000);
    check(await holder.acquire(), "holder acquire");
    // A retry delay far longer than the wait bounds the call at 10.2 s: the object's own answer,
    // given as it takes the call out of its queue, ends the wait.
    eq(await lock(key).acquire({ timeout: 200, retryDelay: 10_000 }), false, "queued acquire after its timeout");
    eq((await stubFor(env, key).snapshot()).waiting, 0, "calls queued after the timeout");
    check(await holder.release(), "holder release");
    eq(await lock(key).isLocked(), false, "the key after the release (nobody was handed it)");
    eq(rpcCounts(key).acquireOrWait, 1, "the timed-out wait was one acquireOrWait call");
    eq(rpcCounts(key).acquire ?? 0, 1, "plain acquires (the holder's only)");
  },
  async "an AbortSignal takes a waiter out of the queue"(env) {
    const key = unique("abort");
    const holder = lock(key, 10_000);
    check(await holder.acquire(), "holder acquire");
    const controller = new AbortController();
    let ran = false;
    const waiter = lock(key).run(() => (ran = true), { timeout: 20_000, signal: controller.signal });
    await untilQueued(env, key, 1);
    const reason = new Error("the user went away");
    controller.abort(reason);
    let thrown = null;
    try {
      await waiter;
    } catch (e) {
      thrown = e;
    }
    check(thrown === reason, `run() after abort: ${thrown === null ? "resolved" : `${thrown?.name}: ${thrown?.message}`}`);
    check(!ran, "the aborted waiter's task ran");
    eq((await stubFor(env, key).snapshot()).waiting, 0, "calls queued after the abort");
    check(await holder.release(), "holder release");
    eq(await lock(key).isLocked(), false, "the key after the release (not handed to the aborted waiter)");
    eq(rpcCounts(key).withdraw, 1, "withdraw calls");
  },
  async "a release hands the key straight to the oldest waiter"(env) {
    const key = unique("hand-over");
    const holder = lock(key, 60_000);
    check(await holder.acquire(), "holder acquire");
    const waiter = lock(key, 10_000);
    const waiting = waiter.acquire({ timeout: 15_000 });
    await untilQueued(env, key, 1);
    check(await holder.release(), "holder release");
    // The release wrote the waiter's grant in the same turn: the key was never free.
    const snapshot = await stubFor(env, key).snapshot();
    eq(snapshot.rows.length, 1, "rows right after the release");
    eq(snapshot.waiting, 0, "calls queued right after the release");
    check(await waiting, "the waiter got the key");
    check(waiter.fence > holder.fence, `waiter's fence ${waiter.fence} after ${holder.fence}`);
    check(await waiter.release(), "waiter release");
  },
  async "a crashed holder's key goes to the next waiter at its expiry"(env) {
    const key = unique("crashed-holder");
    // Held for two seconds: its row is still there for the snapshot.
    const holder = lock(key, 2_000);
    check(await holder.acquire(), "holder acquire"); // and never releases: it crashed
    const expiry = (await stubFor(env, key).snapshot()).rows[0].expiresAt;
    const waiter = lock(key, 10_000);
    check(await waiter.acquire({ timeout: 20_000 }), "waiter acquire");
    const granted = (await stubFor(env, key).snapshot()).rows[0].expiresAt - 10_000;
    check(granted >= expiry, `granted at ${granted}, before the holder's expiry ${expiry}`);
    check(waiter.fence > holder.fence, `waiter's fence ${waiter.fence} after ${holder.fence}`);
    eq(await holder.release(), false, "the crashed holder's late release");
    eq(await waiter.isLocked(), true, "the waiter still holds it");
    check(await waiter.release(), "waiter release");
    eq(rpcCounts(key).acquireOrWait, 1, "the waiter waited in one call (no polling)");
  },
  async "a plain acquire never overtakes a queued waiter"(env) {
    const key = unique("overtake");
    // Long enough that the waiter is queued before the holder expires, even on a stalled machine.
    const holder = lock(key, 2_000);
    check(await holder.acquire(), "holder acquire");
    const waiter = lock(key, 10_000);
    const waiting = waiter.acquire({ timeout: 20_000 });
    await untilQueued(env, key, 1);
    // Plain attempts back to back across the holder's expiry, the moment one could slip in
    // ahead of the waiter: every one must lose to it.
    let settled = false;
    waiting.then(() => (settled = true), () => (settled = true));
    let attempts = 0;
    while (!settled) {
      const other = lock(key, 10_000);
      attempts += 1;
      check(!(await other.acquire()), `plain acquire ${attempts} overtook the queued waiter`);
    }
    check(await waiting, "the queued waiter got the key");
    check(attempts > 1, `only ${attempts} plain attempts`);
    check(waiter.fence > holder.fence, `waiter's fence ${waiter.fence} after ${holder.fence}`);
    check(await waiter.release(), "waiter release");
  },
  async "a waiter whose wait ran out while the object was busy is passed over"(env) {
    const key = unique("spent");
    const holder = lock(key, 60_000);
    check(await holder.acquire(), "holder acquire");
    // A retry delay far longer than the wait: the waiter's call is bounded at 15 s (the wait
    // plus one retry delay), so the object's own answer decides.
    const spent = lock(key, 10_000);
    const spentWaiting = spent.acquire({ timeout: 5_000, retryDelay: 10_000 });
    await untilQueued(env, key, 1);
    const next = lock(key, 10_000);
    const nextWaiting = next.acquire({ timeout: 20_000 });
    await untilQueued(env, key, 2);
    // The first waiter's wait runs out 5 s after it queued; the key is freed later, while the
    // object is still busy, before the waiter's timer could take it out of the queue.
    eq(await stubFor(env, key).stallThenForceRelease(key, 5_500, 2), true, "force-release");
    eq(await spentWaiting, false, "the waiter whose wait ran out");
    eq(await nextWaiting, true, "the next waiter still waiting");
    check(next.fence > holder.fence, `next waiter's fence ${next.fence} after ${holder.fence}`);
    eq((await stubFor(env, key).snapshot()).waiting, 0, "calls queued");
    check(await next.release(), "next waiter release");
  },
  async "a release racing a waiter's timeout never makes two holders"(env, { rounds = 30 } = {}) {
    const key = unique("race");
    const { seen, enter, exit } = sections();
    let acquiredByWaiter = 0;
    for (let round = 0; round < rounds; round++) {
      const timeout = 40;
      const holdMs = timeout + (round % 7) - 3; // the release lands just before or after the timeout
      const holder = lock(key, 10_000);
      check(await holder.acquire(), `round ${round}: holder acquire`);
      enter(holder.fence, "holder");
      // A retry delay far longer than the wait: the object's own answer (a grant, or its wait
      // running out) ends the waiter's call, never the call's bound.
      const waiter = lock(key, 10_000).run(({ fence }) => {
        enter(fence, "waiter");
        exit();
      }, { timeout, retryDelay: 10_000 });
      await sleep(holdMs);
      exit();
      check(await holder.release(), `round ${round}: holder release`);
      const [ran] = await waiter;
      if (ran) acquiredByWaiter += 1;
      eq(await lock(key).isLocked(), false, `round ${round}: key after both (a grant nobody took?)`);
      eq((await stubFor(env, key).snapshot()).waiting, 0, `round ${round}: calls queued`);
    }
    eq(seen.maxInside, 1, "holders at once");
    for (let i = 1; i < seen.fences.length; i++) {
      check(seen.fences[i] > seen.fences[i - 1], `fence ${seen.fences[i]} after ${seen.fences[i - 1]}`);
    }
    return { rounds, acquiredByWaiter };
  },
  async "waiters survive an object reset by falling back to plain attempts"(env) {
    const key = unique("reset");
    const holder = lock(key, 10_000);
    check(await holder.acquire(), "holder acquire");
    const { seen, enter, exit } = sections();
    const waiters = [0, 1, 2].map((i) =>
      lock(key, 10_000).run(async ({ fence }) => {
        enter(fence, i);
        await sleep(5);
        exit();
      }, { timeout: 30_000, retryDelay: 10 }),
    );
    await untilQueued(env, key, 3);
    await stubFor(env, key).crash().catch(() => {});
    const after = await stubFor(env, key).snapshot();
    eq(after.waiting, 0, "calls queued in the new instance");
    eq(after.rows.length, 1, "the holder's row survived the reset");
    check(await holder.release(), "holder release after the reset");
    const results = await Promise.all(waiters);
    eq(results.map(([ran]) => ran), [true, true, true], "every waiter ran");
    eq(seen.maxInside, 1, "holders at once");
    check(seen.fences[0] > holder.fence, `first waiter's fence ${seen.fences[0]} after the holder's ${holder.fence}`);
    for (let i = 1; i < seen.fences.length; i++) {
      check(seen.fences[i] > seen.fences[i - 1], `fence ${seen.fences[i]} after ${seen.fences[i - 1]}`);
    }
    const counts = rpcCounts(key);
    check((counts.acquire ?? 0) > 1, `the waiters never fell back to plain acquires: ${JSON.stringify(counts)}`);
    eq(await lock(key).isLocked(), false, "the key at the end");
    return counts;
  },
  async "after the last run no timer is left in the isolate, except while autoExtend keeps a lock"(env) {
    // Every timer set meanwhile — by the package's JS, its wasm, or an object of this isolate —
    // is tracked until it fires or is cleared.
    const live = new Set();
    const { setTimeout: realSet, clearTimeout: realClear } = globalThis;
    globalThis.setTimeout = (fn, ms, ...args) => {
      const id = realSet(() => {
        live.delete(id);
        fn(...args);
      }, ms);
      live.add(id);
      return id;
    };
    globalThis.clearTimeout = (id) => {
      live.delete(id);
      realClear(id);
    };
    try {
      const key = unique("timers");
      await lock(key).run(() => 1);
      await Promise.all([0, 1, 2].map(() => lock(key).run(() => sleep(5), { timeout: 10_000 })));
      const holder = lock(key, 10_000);
      check(await holder.acquire(), "holder acquire");
      eq((await lock(key).run(() => 1, { timeout: 30 }))[0], false, "a waiter that timed out");
      const aborting = new AbortController();
      const aborted = lock(key).run(() => 1, { timeout: 10_000, signal: aborting.signal }).catch((e) => e?.name);
      await untilQueued(env, key, 1);
      aborting.abort();
      eq(await aborted, "AbortError", "the aborted waiter");
      await holder.extend(20_000); // rejects if the hold was lost
      check(await holder.release(), "release");
      await sleep(20);
      const afterRuns = live.size;
      const kept = lock(key, 10_000);
      check(await kept.acquire(), "kept acquire");
      kept.autoExtend();
      const whileKept = live.size;
      check(await kept.release(), "kept release");
      await sleep(20);
      eq({ afterRuns, whileKeptAtLeastOne: whileKept >= 1, afterAutoExtend: live.size }, { afterRuns: 0, whileKeptAtLeastOne: true, afterAutoExtend: 0 }, "live timers");
    } finally {
      globalThis.setTimeout = realSet;
      globalThis.clearTimeout = realClear;
    }
  },
  async "acquireOrWait and withdraw refuse garbage"(env) {
    const key = unique("rpc-wait");
    const stub = stubFor(env, key);
    await rejects(stub.acquireOrWait(key, "owner-1", 1000, -1), RangeError, /waitMs .* got -1/, "negative wait");
    await rejects(stub.acquireOrWait(key, "owner-1", 1000, "5"), TypeError, /waitMs must be a number/, "string wait");
    await rejects(stub.acquireOrWait(key, "owner-1", 1000, 2 ** 31), RangeError, /waitMs/, "wait too long");
    await rejects(stub.acquireOrWait(key, "owner-1", 0, 10), RangeError, /ttlMs/, "zero TTL");
    await rejects(stub.withdraw(7, "owner-1"), TypeError, /key must be a string/, "number key");
    await rejects(stub.withdraw(key, ""), RangeError, /owner token/, "empty owner");
    const grant = await stub.acquireOrWait(key, "owner-1", 60_000, 0);
    check(Number.isSafeInteger(grant?.fence), `acquireOrWait on a free key answered ${JSON.stringify(grant)}`);
    eq(await stub.acquireOrWait(key, "owner-2", 60_000, 0), false, "acquireOrWait(waitMs 0) on a held key");
    eq(await stub.withdraw(key, "owner-2"), false, "withdraw of a caller that is not there");
    eq(await stub.withdraw(key, "owner-1"), true, "withdraw of the holder releases");
    eq(await stub.isLocked(key), false, "the key after the holder withdrew");
    const store = useStore(env);
    await rejects(store.acquireOrWait(key, "owner-1", 1000, NaN, 5), RangeError, /waitMs/, "store: NaN wait");
    await rejects(store.acquireOrWait(key, "owner-1", 1000, 10, -5), RangeError, /pollMs/, "store: negative poll");
  },
};

/**
 * Shared holds (semaphore permits, read locks) in the Durable Object, driven through the store's
 * own methods (`acquireShared`, `acquireSharedOrWait`, and the exclusive ones beside them) and
 * the object's RPC; each case on a fresh key. Owners are plain tokens, as the lock API would mint.
 */
const sharedSuite = {
  async "permits up to the limit, weights counted, each permit its own fence"(env) {
    const key = unique("permits");
    const store = useStore(env);
    const a = fenceOf(await store.acquireShared(key, "a", 10_000, 1, 3), "a: 1 of 3");
    const b = fenceOf(await store.acquireShared(key, "b", 20_000, 2, 3), "b: 2 of 3");
    eq(await store.acquireShared(key, "c", 10_000, 1, 3), false, "c: a fourth permit");
    eq(await store.acquire(key, "x", 10_000), false, "an exclusive acquire beside permits");
    eq(await store.isLocked(key), true, "isLocked with permits held");
    const left = await store.remainingTime(key);
    check(left > 10_000 && left <= 20_000, `remainingTime is until the last permit expires: ${left}`);
    eq(await store.release(key, "a"), true, "a releases its permit");
    eq(await store.release(key, "a"), false, "a releases again");
    eq(await store.isLocked(key), true, "b still holds two permits");
    const c = fenceOf(await store.acquireShared(key, "c", 10_000, 1, 3), "c after a released");
    increasing([a, b, c], "grants");
    eq(await store.extend(key, "c", 30_000), true, "c extends its own permit");
    check((await store.remainingTime(key)) > 20_000, "remainingTime after c's extend");
    eq(await store.extend(key, "a", 30_000), false, "a, released, cannot extend");
    const snapshot = await stubFor(env, key).snapshot();
    eq(snapshot.shared.map((h) => [h.weight, h.limit]).sort(), [[1, 3], [2, 3]], "shared holds in storage");
    eq(snapshot.rows, [], "no exclusive row");
    eq(await store.release(key, "b"), true, "b releases");
    eq(await store.release(key, "c"), true, "c releases");
    eq(await store.isLocked(key), false, "isLocked after every permit went");
    eq(await store.remainingTime(key), null, "remainingTime after every permit went");
    const x = fenceOf(await store.acquire(key, "x", 10_000), "exclusive acquire once every permit went");
    check(x > c, `the lock's fence ${x} after the permits' ${c}`);
    eq(await store.acquireShared(key, "d", 10_000, 1, 3), false, "a permit while the lock is held");
    eq(await store.release(key, "x"), true, "lock release");
  },
  async "readers share, a writer excludes them and is excluded"(env) {
    const key = unique("rw");
    const store = useStore(env);
    const r1 = fenceOf(await store.acquireShared(key, "r1", 10_000, 1, READ_LIMIT), "reader 1");
    const r2 = fenceOf(await store.acquireShared(key, "r2", 10_000, 1, READ_LIMIT), "reader 2");
    eq(await store.acquire(key, "w", 10_000), false, "a writer beside readers");
    eq(await store.acquireOrWait(key, "w", 10_000, 0), false, "a writer beside readers, no wait");
    eq(await store.release(key, "r1"), true, "reader 1 leaves");
    eq(await store.acquire(key, "w", 10_000), false, "a writer beside one reader");
    eq(await store.release(key, "r2"), true, "reader 2 leaves");
    const w = fenceOf(await store.acquire(key, "w", 10_000), "the writer once the readers left");
    eq(await store.acquireShared(key, "r3", 10_000, 1, READ_LIMIT), false, "a reader beside the writer");
    increasing([r1, r2, w], "grants");
    eq(await store.release(key, "w"), true, "writer release");
  },
  async "a limit mismatch answers { heldLimit } at once and never queues"(env) {
    const key = unique("mismatch");
    const store = useStore(env);
    const stub = stubFor(env, key);
    fenceOf(await store.acquireShared(key, "a", 10_000, 1, 3), "a: 1 of 3");
    eq(await store.acquireShared(key, "b", 10_000, 1, 4), { heldLimit: 3 }, "1 of 4 beside 1 of 3");
    eq(await stub.acquireShared(key, "b", 10_000, 1, 4), { heldLimit: 3 }, "the object's own answer");
    eq(await store.acquireSharedOrWait(key, "b", 10_000, 1, 4, 10_000, 10), { heldLimit: 3 }, "waiting with another limit");
    eq((await stub.snapshot()).waiting, 0, "calls queued after the mismatch");
    eq(await store.acquireShared(key, "r", 10_000, 1, READ_LIMIT), { heldLimit: 3 }, "a reader beside permits");
    eq(await store.release(key, "a"), true, "a releases");
    fenceOf(await store.acquireShared(key, "b", 10_000, 4, 4), "4 of 4 once the limit-3 holds went");
    eq(await store.release(key, "b"), true, "b releases");
  },
  async "a heavy waiter is not starved by later single permits"(env) {
    const key = unique("heavy");
    const store = useStore(env);
    fenceOf(await store.acquireShared(key, "a", 60_000, 2, 3), "a: 2 of 3");
    const heavy = watched(store.acquireSharedOrWait(key, "heavy", 10_000, 3, 3, 20_000, 10));
    await untilQueued(env, key, 1);
    // One permit is free, but the heavy waiter is queued first.
    eq(await store.acquireShared(key, "late", 10_000, 1, 3), false, "a later single permit");
    const late = watched(store.acquireSharedOrWait(key, "late", 10_000, 1, 3, 20_000, 10));
    await untilQueued(env, key, 2);
    eq(await store.release(key, "a"), true, "a releases");
    const granted = await heavy.promise;
    fenceOf(granted, "the heavy waiter");
    check(Number.isSafeInteger(granted.waitedMs), `waitedMs ${granted.waitedMs}`);
    await sleep(50);
    check(!late.settled, "the later single permit was granted beside all three");
    eq(await store.release(key, "heavy"), true, "heavy releases");
    fenceOf(await late.promise, "the later permit after the heavy one left");
    eq(await store.release(key, "late"), true, "late releases");
    eq((await stubFor(env, key).snapshot()).waiting, 0, "calls queued at the end");
  },
  async "a queued writer is not overtaken by later readers; one release grants several readers"(env) {
    const key = unique("writer-queue");
    const store = useStore(env);
    const r1 = fenceOf(await store.acquireShared(key, "r1", 60_000, 1, READ_LIMIT), "reader 1");
    const writer = watched(store.acquireOrWait(key, "w", 10_000, 20_000, 10));
    await untilQueued(env, key, 1);
    eq(await store.acquireShared(key, "r2", 10_000, 1, READ_LIMIT), false, "a reader behind the queued writer");
    const readers = ["r2", "r3", "r4"].map((o) => watched(store.acquireSharedOrWait(key, o, 10_000, 1, READ_LIMIT, 20_000, 10)));
    await untilQueued(env, key, 4);
    const writer2 = watched(store.acquireOrWait(key, "w2", 10_000, 20_000, 10));
    await untilQueued(env, key, 5);
    eq(await store.release(key, "r1"), true, "reader 1 leaves");
    const w = fenceOf(await writer.promise, "the queued writer");
    await sleep(50);
    check(readers.every((r) => !r.settled), "a reader was granted beside the writer");
    eq(await store.release(key, "w"), true, "the writer releases");
    // One release: the three readers at the front together, and the second writer still waits.
    const fences = [];
    for (const [i, r] of readers.entries()) fences.push(fenceOf(await r.promise, `reader ${i + 2}`));
    const snapshot = await stubFor(env, key).snapshot();
    eq(snapshot.shared.length, 3, "readers holding after the writer's release");
    eq(snapshot.waiting, 1, "the second writer still queued");
    check(!writer2.settled, "the second writer was granted beside readers");
    increasing([r1, w, ...fences], "grants");
    for (const o of ["r2", "r3", "r4"]) eq(await store.release(key, o), true, `${o} releases`);
    check(fenceOf(await writer2.promise, "the second writer") > fences[2], "second writer's fence");
    eq(await store.release(key, "w2"), true, "second writer releases");
  },
  async "an exclusive waiter waits for every permit"(env) {
    const key = unique("writer-waits");
    const store = useStore(env);
    fenceOf(await store.acquireShared(key, "a", 60_000, 1, 2), "a");
    fenceOf(await store.acquireShared(key, "b", 60_000, 1, 2), "b");
    const writer = watched(store.acquireOrWait(key, "w", 10_000, 20_000, 10));
    await untilQueued(env, key, 1);
    eq(await store.release(key, "a"), true, "a releases");
    await sleep(50);
    check(!writer.settled, "the writer was granted beside a permit");
    eq(await store.release(key, "b"), true, "b releases");
    fenceOf(await writer.promise, "the writer once both permits went");
    eq(await store.release(key, "w"), true, "writer releases");
  },
  async "a crashed permit frees only its own weight at its TTL, and the alarm deletes it"(env) {
    const key = unique("permit-expiry");
    const store = useStore(env);
    const stub = stubFor(env, key);
    // Two seconds: the permit is still there for the snapshots below.
    fenceOf(await store.acquireShared(key, "crashed", 2_000, 1, 2), "the permit that will crash");
    fenceOf(await store.acquireShared(key, "alive", 60_000, 1, 2), "the permit that stays");
    const expiry = (await stub.snapshot()).shared.find((h) => h.expiresAt < Date.now() + 10_000).expiresAt;
    eq((await stub.snapshot()).alarm, expiry, "the alarm at the first permit's expiry");
    const waiter = await store.acquireSharedOrWait(key, "waiter", 60_000, 1, 2, 20_000, 10);
    fenceOf(waiter, "the waiter, at the crashed permit's expiry");
    const snapshot = await stub.snapshot();
    check(snapshot.now >= expiry, `granted at ${snapshot.now}, before the crashed permit's expiry ${expiry}`);
    eq(await store.release(key, "crashed"), false, "the crashed permit's late release");
    eq(await store.acquireShared(key, "third", 60_000, 1, 2), false, "a third permit beside the two live");
    // Left to the alarm alone: it deletes the expired row and points at the next expiry.
    const deadline = Date.now() + 15_000;
    let after = await stub.snapshot();
    while (after.shared.length !== 2 && Date.now() < deadline) {
      await sleep(50);
      after = await stub.snapshot();
    }
    eq(after.shared.length, 2, "shared rows after the alarm");
    eq(after.alarm, Math.min(...after.shared.map((h) => h.expiresAt)), "the alarm at the next permit's expiry");
    eq(await store.release(key, "alive"), true, "alive releases");
    eq(await store.release(key, "waiter"), true, "waiter releases");
  },
  async "a lone permit's row goes with the alarm, and no alarm is left"(env) {
    const key = unique("permit-alarm");
    const stub = stubFor(env, key);
    fenceOf(await useStore(env).acquireShared(key, "p", 200, 1, 5), "permit");
    const deadline = Date.now() + 15_000;
    let after = await stub.snapshot();
    while ((after.shared.length > 0 || after.alarm !== null) && Date.now() < deadline) {
      await sleep(50);
      after = await stub.snapshot();
    }
    eq(after.shared, [], "shared rows after the alarm");
    eq(after.alarm, null, "alarm after the last permit went");
  },
  async "forceRelease frees every hold and hands over to the front waiters"(env) {
    const key = unique("force-shared");
    const store = useStore(env);
    fenceOf(await store.acquireShared(key, "a", 60_000, 2, 2), "a: 2 of 2");
    const waiters = ["b", "c"].map((o) => watched(store.acquireSharedOrWait(key, o, 10_000, 1, 2, 20_000, 10)));
    await untilQueued(env, key, 2);
    eq(await store.forceRelease(key), true, "forceRelease of the permits");
    for (const w of waiters) fenceOf(await w.promise, "a waiter after the force-release");
    eq(await store.extend(key, "a", 10_000), false, "the forced-out holder's extend");
    eq(await store.forceRelease(key), true, "forceRelease of the waiters' permits");
    eq(await store.forceRelease(key), false, "forceRelease of a free key");
  },
  async "withdraw takes a shared waiter out, and the waiters behind it move up"(env) {
    const key = unique("withdraw-shared");
    const store = useStore(env);
    const stub = stubFor(env, key);
    fenceOf(await store.acquireShared(key, "a", 60_000, 1, 3), "a: 1 of 3");
    // The front waiter needs all three; the one behind it needs one, which is free.
    const heavy = watched(stub.acquireSharedOrWait(key, "heavy", 10_000, 3, 3, 20_000));
    await untilQueued(env, key, 1);
    const light = watched(stub.acquireSharedOrWait(key, "light", 10_000, 1, 3, 20_000));
    await untilQueued(env, key, 2);
    eq(await stub.withdraw(key, "heavy"), true, "the heavy waiter withdraws");
    eq(await heavy.promise, false, "the withdrawn call");
    fenceOf(await light.promise, "the waiter behind it, granted as it moved up");
    eq(await stub.withdraw(key, "light"), true, "withdraw of a granted permit releases it");
    eq(await store.release(key, "light"), false, "the withdrawn permit is gone");
    eq(await store.release(key, "a"), true, "a releases");
  },
  async "a spent shared waiter is passed over, and the one behind it granted"(env) {
    const key = unique("spent-shared");
    const store = useStore(env);
    fenceOf(await store.acquireShared(key, "a", 60_000, 1, 3), "a: 1 of 3");
    // Its wait lasts until the light waiter has queued behind it.
    const heavy = store.acquireSharedOrWait(key, "heavy", 10_000, 3, 3, 3_000, 10);
    await untilQueued(env, key, 1);
    const light = watched(store.acquireSharedOrWait(key, "light", 10_000, 1, 3, 20_000, 10));
    await untilQueued(env, key, 2);
    eq(await heavy, false, "the heavy waiter's wait ran out");
    fenceOf(await light.promise, "the light waiter, granted once the heavy one left");
    eq(await store.release(key, "light"), true, "light releases");
    eq(await store.release(key, "a"), true, "a releases");
  },
  async "bad share terms are refused before any RPC, and by the object"(env) {
    const key = unique("bad-share");
    const store = useStore(env);
    const stub = stubFor(env, key);
    for (const target of [store, stub]) {
      const who = target === store ? "store" : "object";
      await rejects(target.acquireShared(key, "o", 1000, 0, 3), RangeError, /permits|weight/, `${who}: weight 0`);
      await rejects(target.acquireShared(key, "o", 1000, 4, 3), RangeError, /permits|weight/, `${who}: weight above the limit`);
      await rejects(target.acquireShared(key, "o", 1000, 1.5, 3), RangeError, /permits|weight/, `${who}: fractional weight`);
      await rejects(target.acquireShared(key, "o", 1000, 1, 0), RangeError, /limit/, `${who}: limit 0`);
      await rejects(target.acquireShared(key, "o", 1000, 1, 2 ** 32), RangeError, /limit/, `${who}: limit 2^32`);
      await rejects(target.acquireShared(key, "o", 1000, "1", 3), TypeError, /weight must be a number/, `${who}: string weight`);
      await rejects(target.acquireShared(key, "o", 1000, 1), TypeError, /limit must be a number/, `${who}: no limit`);
      await rejects(target.acquireShared(key, "o", -1, 1, 3), RangeError, /ttlMs/, `${who}: negative TTL`);
      await rejects(target.acquireSharedOrWait(key, "o", 1000, 1, 3, -1), RangeError, /waitMs/, `${who}: negative wait`);
    }
    eq(rpcCounts(key).acquireShared ?? 0, 0, "bad calls that reached the object through the store");
    eq(await stub.isLocked(key), false, "the key after the garbage");
  },
  async "the exclusive path makes the RPCs it always made"(env) {
    const key = unique("hot-path");
    const [ran] = await lock(key, 5_000).run(() => 1);
    check(ran, "run");
    eq(rpcCounts(key), { acquire: 1, release: 1 }, "RPCs for one uncontended run()");
  },
};

/**
 * `lock([...keys])` over D1 (keel-lock/sql on the DB binding) inside the Worker: one
 * uncontended run, with the store calls it made, then `callers` runs over overlapping sets in
 * opposite orders at once, with how often two were inside one key.
 */
async function d1Multi(env, { keys, callers = 12 }) {
  const d1 = databaseLockStore(env.DB);
  await d1.createTable();
  const calls = {};
  const counted = new Proxy(d1, {
    get(target, name) {
      const value = target[name];
      if (typeof value !== "function") return value;
      return (...args) => {
        calls[name] = (calls[name] ?? 0) + 1;
        return value.apply(target, args);
      };
    },
  });
  // Handles bind to the store current when they are made: the D1 ones are made here, and the
  // isolate's Durable Object store is current again before anything is awaited.
  setLockStore(counted);
  const once = lock(keys, 10_000);
  const sets = [keys, [...keys].reverse(), keys.slice(1), [keys[0], keys.at(-1)]];
  const runs = Array.from({ length: callers }, (_, i) => [sets[i % sets.length], lock(sets[i % sets.length], 10_000)]);
  setLockStore(useStore(env));
  const [ran, fences] = await once.run(({ fences }) => fences);
  const uncontended = { ...calls };
  const inside = new Set();
  let clashes = 0;
  const done = await Promise.all(
    runs.map(async ([set, handle]) => {
      const [ok] = await handle.run(
        async () => {
          for (const key of set) (inside.has(key) ? clashes++ : inside.add(key));
          await sleep(2);
          for (const key of set) inside.delete(key);
        },
        { timeout: 20_000, retryDelay: 5 },
      );
      return ok;
    }),
  );
  const left = [];
  for (const key of keys) if (await d1.isLocked(key)) left.push(key);
  return { ran, fences, uncontended, allRan: done.every(Boolean), clashes, left };
}

async function route(request, env) {
  useStore(env);
  const url = new URL(request.url);
  const body = request.method === "POST" ? await request.json() : {};
  switch (url.pathname) {
    case "/suite":
      return Object.keys(suite);
    case "/case": {
      const fn = suite[body.name];
      if (!fn) throw new Error(`no such case ${body.name}`);
      await fn(env);
      return { ok: true };
    }
    case "/waiting":
      return Object.keys(waitingSuite);
    case "/waiting-case": {
      const fn = waitingSuite[body.name];
      if (!fn) throw new Error(`no such case ${body.name}`);
      return { ok: true, report: (await fn(env, body.options)) ?? null };
    }
    case "/shared":
      return Object.keys(sharedSuite);
    case "/shared-case": {
      const fn = sharedSuite[body.name];
      if (!fn) throw new Error(`no such case ${body.name}`);
      return { ok: true, report: (await fn(env, body.options)) ?? null };
    }
    case "/inspect-cases":
      return Object.keys(inspectSuite);
    case "/inspect-case": {
      const fn = inspectSuite[body.name];
      if (!fn) throw new Error(`no such case ${body.name}`);
      return { ok: true, report: (await fn(env, body.options)) ?? null };
    }
    case "/inspect":
      return inspect(body.key);
    case "/campaign":
      return campaignFor(env, body);
    case "/observe":
      return observeLeaders(env, body);
    case "/crash":
      await stubFor(env, body.key).crash().catch(() => {});
      return { crashed: true };
    case "/events": {
      // A waiter handed the key by the object, told as lock events and traced as spans.
      useStore(env);
      const told = [];
      const exporter = new InMemorySpanExporter();
      const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
      const stopTelling = onLockEvent((e) => told.push({ type: e.type, via: e.via, store: e.store }));
      const stopTracing = instrumentKeelLock({ tracerProvider });
      try {
        const holder = lock(body.key, 30_000);
        await holder.acquire();
        const waiting = lock(body.key, 30_000).run(() => "ran", { timeout: 10_000 });
        await untilQueued(env, body.key, 1);
        await holder.release();
        await waiting;
        await lock(body.key).runImmediately(() => {}).then(() => holder.acquire()).then(() => lock(body.key).runImmediately(() => {}));
        await holder.release();
      } finally {
        stopTelling();
        stopTracing();
      }
      const spans = exporter.getFinishedSpans().map((s) => ({
        name: s.name,
        outcome: s.attributes["keel_lock.outcome"],
        via: s.attributes["keel_lock.via"],
        store: s.attributes["keel_lock.store"],
        fence: s.attributes["keel_lock.fence"],
      }));
      return { told, spans };
    }
    case "/leader-changes": {
      // A brief leader, one force-released, one left to expire (after `lastTtlMs`): the fences.
      useStore(env);
      const fences = [];
      const a = lock(body.key, 30_000);
      await a.acquire({ metadata: "a" });
      fences.push(a.fence);
      await a.release();
      const b = lock(body.key, 30_000);
      await b.acquire({ metadata: "b" });
      fences.push(b.fence);
      await b.forceRelease();
      const c = lock(body.key, body.lastTtlMs ?? 300);
      await c.acquire({ metadata: "c" });
      fences.push(c.fence);
      return { fences };
    }
    case "/contend-shared":
      return contendShared(env, body);
    case "/contend-multi":
      return contendMulti(env, body);
    case "/d1-multi":
      return d1Multi(env, body);
    case "/snapshot":
      return stubFor(env, body.key).snapshot();
    case "/rpcs":
      return rpcCounts(body.key);
    case "/conformance":
      // A second for the owner's extend to reach a hold of the short TTL, and for a waiter's call
      // to join the object's queue before the kit goes on, whatever stalls a loaded machine.
      return lockStoreResults(getLockStore(), { keyPrefix: unique("conformance") + ":", shortTtlMs: 1_000, settleMs: 1_000 });
    case "/contend":
      return contend(env, body);
    case "/stats":
      return stats(env, body.runId);
    case "/hold": {
      const l = lock(body.key, body.ttl);
      const acquired = await l.acquire(body.timeout ? { timeout: body.timeout } : undefined);
      return { acquired, fence: l.fence, serialized: acquired ? l.serialize() : null };
    }
    case "/state": {
      const l = lock(body.key);
      const snapshot = await stubFor(env, body.key).snapshot();
      return { isLocked: await l.isLocked(), remaining: await l.getRemainingTime(), snapshot, acquiredByOther: await lock(body.key, 100).acquire() };
    }
    case "/restore": {
      const l = restoreLock(body.serialized);
      return { isLocked: await l.isLocked(), isExpired: await l.isExpired(), fence: l.fence, released: body.release ? await l.release() : null };
    }
  }
  return null;
}

export default {
  async fetch(request, env) {
    try {
      const out = await route(request, env);
      if (out === null) return new Response("not found", { status: 404 });
      return Response.json(out);
    } catch (e) {
      return Response.json({ error: `${e?.name}: ${e?.message}` }, { status: 500 });
    }
  },
};
