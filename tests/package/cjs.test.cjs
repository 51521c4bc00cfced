// The package through `require` (CommonJS), and one instance shared with `import`.
const { test } = require("node:test");
const assert = require("node:assert/strict");
const keel = require("keel-lock");

test("require('keel-lock') exposes the API", async () => {
  for (const name of ["lock", "restoreLock", "setLockStore", "getLockStore", "MemoryLockStore", "LockNotHeldError", "checkLockStore"]) {
    assert.ok(keel[name], `${name} is exported`);
  }
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
