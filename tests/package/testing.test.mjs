// keel-lock/testing as users get it: the conformance kit in its own wasm instance, driving
// stores made by the main `keel-lock` instance through their five methods; and `keel-lock`
// itself without the kit.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import * as keel from "keel-lock";
import * as testing from "keel-lock/testing";
import { mapLockStore } from "./stores.mjs";

const { MemoryLockStore, lock, setLockStore } = keel;
const { checkLockStore, lockStoreResults, LockStoreConformanceError } = testing;
// A store that passes must answer the owner's extend of a hold with the short TTL before that
// TTL runs out (the kit tries three times): a second leaves room for any stall of a loaded
// machine. Where only failures or the number of properties are looked at, the kit runs fast.
const PASSING = { shortTtlMs: 1_000, settleMs: 50, contenders: 10 };
const FAST = { shortTtlMs: 100, settleMs: 60, contenders: 10 };

test("keel-lock does not export checkLockStore; keel-lock/testing exports the kit", () => {
  assert.equal("checkLockStore" in keel, false);
  assert.equal(createRequire(import.meta.url)("keel-lock").checkLockStore, undefined);
  for (const name of ["LockStoreConformanceError", "checkLockStore", "lockStoreResults"]) {
    assert.ok(name in testing, `keel-lock/testing exports ${name}`);
  }
});

test("a MemoryLockStore made by keel-lock passes, and keeps working as keel-lock's store", async () => {
  const store = new MemoryLockStore();
  // Count the calls that reach the store's own methods: the kit's instance can only use those.
  const proto = MemoryLockStore.prototype;
  const original = proto.acquire;
  let calls = 0;
  proto.acquire = function (...args) {
    calls++;
    return original.apply(this, args);
  };
  let results;
  try {
    results = await checkLockStore(store, PASSING);
  } finally {
    proto.acquire = original;
  }
  assert.ok(results.length >= 5, `only ${results.length} properties ran`);
  assert.deepEqual(results.filter((r) => !r.ok), []);
  assert.ok(calls >= PASSING.contenders, `the kit called the store's acquire ${calls} times`);
  setLockStore(store);
  assert.deepEqual(await lock("after-the-kit").run(() => "ran"), [true, "ran"]);
});

test("a store written in JS passes", async () => {
  const results = await checkLockStore(mapLockStore(), PASSING);
  assert.deepEqual(results.filter((r) => !r.ok), []);
});

/** keel-lock's memory store behind a release that frees the key for whoever asks. */
function ownerBlindStore() {
  const inner = new MemoryLockStore();
  const holder = new Map(); // key -> owner of the current hold
  return {
    acquire(k, o, t) {
      const ok = inner.acquire(k, o, t);
      if (ok) holder.set(k, o);
      return ok;
    },
    release: (k) => inner.release(k, holder.get(k)),
    extend: (k, o, t) => inner.extend(k, o, t),
    isLocked: (k) => inner.isLocked(k),
    remainingTime: (k) => inner.remainingTime(k),
  };
}

test("a store whose release ignores the owner is rejected, with every result attached", async () => {
  const error = await checkLockStore(ownerBlindStore(), FAST).then(
    () => assert.fail("checkLockStore accepted an owner-blind release"),
    (e) => e,
  );
  assert.ok(error instanceof LockStoreConformanceError, String(error));
  assert.ok(error.failures.length > 0 && error.failures.every((f) => !f.ok));
  assert.ok(error.failures.some((f) => /release/.test(f.property)), JSON.stringify(error.failures));
  assert.equal(error.results.length, (await lockStoreResults(new MemoryLockStore(), FAST)).length);
  const results = await lockStoreResults(ownerBlindStore(), FAST);
  assert.ok(results.some((r) => !r.ok), "lockStoreResults resolves the same failures");
});

test("bad arguments reject with TypeError / RangeError", async () => {
  await assert.rejects(checkLockStore({}), TypeError);
  await assert.rejects(checkLockStore(new MemoryLockStore(), { contenders: -1 }), RangeError);
});
