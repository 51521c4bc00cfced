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

test("a second copy of the same build, at another path, is the same instance too", async () => {
  // As when a package manager installs keel-lock twice, or one loader sees it through a symlink.
  const { cpSync, mkdtempSync, rmSync } = require("node:fs");
  const { join, dirname } = require("node:path");
  const root = dirname(require.resolve("keel-lock/package.json"));
  const copy = mkdtempSync(join(require("node:os").tmpdir(), "keel-lock-copy-"));
  try {
    for (const part of ["package.json", "node", "dist/node"]) cpSync(join(root, part), join(copy, part), { recursive: true });
    const other = require(join(copy, "node/index.cjs"));
    assert.equal(other.lock, keel.lock);
    const held = other.lock("cjs:copy");
    await held.acquire();
    assert.equal(await keel.lock("cjs:copy").acquire(), false, "a lock taken through one copy holds for the other");
    await held.release();
  } finally {
    rmSync(copy, { recursive: true, force: true });
  }
});

test("require() loads the ESM-only entries (Node >= 20.19 loads ES modules from require)", async () => {
  const testing = require("keel-lock/testing");
  assert.equal(typeof testing.checkLockStore, "function");
  // A short TTL of a second: the owner's extend reaches it inside that TTL on any machine.
  const results = await testing.checkLockStore(new keel.MemoryLockStore(), { shortTtlMs: 1_000, settleMs: 50, contenders: 5 });
  assert.ok(results.length >= 5 && results.every((r) => r.ok));
  assert.equal(typeof require("keel-lock/redis").redisLockStore, "function");
  assert.equal(typeof require("keel-lock/sql").databaseLockStore, "function");
  assert.equal(typeof require("keel-lock/etcd").etcdLockStore, "function");
});
