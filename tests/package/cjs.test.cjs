// The package through `require` (CommonJS), and one instance shared with `import`.
const { test } = require("node:test");
const assert = require("node:assert/strict");
const keel = require("keel-lock");

test("require('keel-lock') exposes the API", async () => {
  for (const name of ["lock", "restoreLock", "setLockStore", "getLockStore", "MemoryLockStore", "LockNotHeldError"]) {
    assert.ok(keel[name], `${name} is exported`);
  }
  assert.equal(keel.checkLockStore, undefined, "checkLockStore lives in keel-lock/testing only");
  const [ran, result] = await keel.lock("cjs:invoice").run(() => "charged");
  assert.deepEqual([ran, result], [true, "charged"]);
  await assert.rejects(keel.lock("cjs:never").extend(), keel.LockNotHeldError);
});

test("require and import share one wasm instance (one default store)", async () => {
  const esm = await import("keel-lock");
  assert.equal(esm.getLockStore(), keel.getLockStore());
  const held = keel.lock("cjs:shared");
  await held.acquire();
  assert.equal(await esm.lock("cjs:shared").acquire(), false);
  await held.release();
});

test("require() loads the ESM-only entries (Node >= 20.19 loads ES modules from require)", async () => {
  const testing = require("keel-lock/testing");
  assert.equal(typeof testing.checkLockStore, "function");
  const results = await testing.checkLockStore(new keel.MemoryLockStore(), { shortTtlMs: 50, settleMs: 50, contenders: 5 });
  assert.ok(results.length >= 5 && results.every((r) => r.ok));
  assert.equal(typeof require("keel-lock/redis").redisLockStore, "function");
  assert.equal(typeof require("keel-lock/sql").databaseLockStore, "function");
});
