// Worker A: owns the LOCKS (LockDurableObject) and COUNTER namespaces; runs the lock API suite,
// the conformance kit and the bad-input checks inside workerd, with DurableObjectLockStore.
import {
  lock,
  restoreLock,
  getLockStore,
  DurableObjectLockStore,
  LockDurableObject,
  LockNotHeldError,
} from "keel-lock";
// The conformance kit, from its own entry (and its own wasm instance): it drives the
// DurableObjectLockStore made by "keel-lock" through the store's five methods.
import { lockStoreResults } from "keel-lock/testing";
import { Counter, Ledger, contend, stats, sleep, useStore } from "./shared.js";

export { LockDurableObject, Counter, Ledger };

class Failure extends Error {}
function check(cond, message) {
  if (!cond) throw new Failure(message);
}
function eq(actual, expected, what) {
  check(
    JSON.stringify(actual) === JSON.stringify(expected),
    `${what}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)}`,
  );
}
async function rejects(promise, cls, pattern, what) {
  try {
    await promise;
  } catch (e) {
    check(e instanceof cls || e?.name === cls.name, `${what}: expected ${cls.name}, got ${e?.name}: ${e?.message}`);
    check(pattern.test(String(e?.message)), `${what}: message ${JSON.stringify(e?.message)} does not match ${pattern}`);
    return e;
  }
  throw new Failure(`${what}: did not reject`);
}
async function throwsSync(fn, cls, pattern, what) {
  return rejects((async () => fn())(), cls, pattern, what);
}
/** Waits (polling the store) until `l`'s key is free; the DO's clock decides. */
async function untilFree(l, limitMs = 10_000) {
  const deadline = Date.now() + limitMs;
  while (await l.isLocked()) {
    check(Date.now() < deadline, `${l.key} still locked after ${limitMs} ms`);
    await sleep(20);
  }
}
const unique = (name) => `${name}:${crypto.randomUUID()}`;
const stubFor = (env, key) => env.LOCKS.get(env.LOCKS.idFromName(key));

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
    const l = lock(key, 1_000);
    check(await l.acquire(), "acquire");
    await l.extend(20_000);
    const left = await l.getRemainingTime();
    check(left > 1_000 && left <= 20_000, `remaining after extend(20000) is ${left}`);
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
    const l = lock(unique("state"), 300);
    eq(await l.isLocked(), false, "isLocked before");
    eq(await l.getRemainingTime(), null, "remaining before");
    eq(await l.isExpired(), false, "isExpired before acquire");
    check(await l.acquire(), "acquire");
    eq(await l.isLocked(), true, "isLocked held");
    const left = await l.getRemainingTime();
    check(left > 0 && left <= 300, `remaining ${left}`);
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
    const grant = await stub.acquire(key, "owner-1", 1000);
    check(Number.isSafeInteger(grant?.fence) && grant.fence >= 1, `acquire after garbage answered ${JSON.stringify(grant)}`);
    eq(await stub.release(key, "owner-1"), true, "release after garbage");
  },
  async "fences increase across handles, release and expiry"() {
    const key = unique("fences");
    let last = 0;
    for (let round = 0; round < 6; round++) {
      const l = lock(key, 200);
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
  async "the alarm deletes an expired row"(env) {
    const key = unique("alarm");
    const l = lock(key, 200);
    check(await l.acquire(), "acquire");
    const stub = stubFor(env, key);
    const before = await stub.inspect();
    eq(before.rows.length, 1, "rows after acquire");
    eq(before.alarm, before.rows[0].expiresAt, "alarm set to the row's expiry");
    // No lock operation touches the key from here on: only the alarm can delete the row.
    const deadline = Date.now() + 15_000;
    let after = before;
    while (after.rows.length > 0 && Date.now() < deadline) {
      await sleep(50);
      after = await stub.inspect();
    }
    eq(after.rows, [], "rows after the alarm");
    eq(after.alarm, null, "no alarm left");
  },
  async "extend moves the alarm; release removes it"(env) {
    const key = unique("alarm-moves");
    const l = lock(key, 2_000);
    check(await l.acquire(), "acquire");
    const stub = stubFor(env, key);
    const first = await stub.inspect();
    eq(first.alarm, first.rows[0].expiresAt, "alarm at first expiry");
    await l.extend(60_000);
    const moved = await stub.inspect();
    eq(moved.alarm, moved.rows[0].expiresAt, "alarm at the extended expiry");
    check(moved.alarm > first.alarm, `alarm did not move: ${first.alarm} -> ${moved.alarm}`);
    check(await l.release(), "release");
    const gone = await stub.inspect();
    eq(gone.rows, [], "rows after release");
    eq(gone.alarm, null, "alarm after release");
  },
};

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
    case "/conformance":
      return lockStoreResults(getLockStore(), { keyPrefix: unique("conformance") + ":" });
    case "/contend":
      return contend(env, body);
    case "/stats":
      return stats(env, body.runId);
    case "/hold": {
      const l = lock(body.key, body.ttl);
      return { acquired: await l.acquire(), fence: l.fence, serialized: (await l.isLocked()) ? l.serialize() : null };
    }
    case "/state": {
      const l = lock(body.key);
      const snapshot = await stubFor(env, body.key).inspect();
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
