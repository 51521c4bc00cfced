"use strict";
// Node (and Bun, Deno) entry: wasm-bindgen's `nodejs` build, loaded synchronously from disk.
// The ESM entry (index.mjs) re-exports this very module, so `import` and `require` in one
// process share one wasm instance — and so one default MemoryLockStore.
const wasm = require("../dist/node/keel_lock.js");
const api = wasm.__keelApi(wasm);

module.exports = {
  lock: api.lock,
  restoreLock: api.restoreLock,
  setLockStore: api.setLockStore,
  getLockStore: api.getLockStore,
  MemoryLockStore: wasm.MemoryLockStore,
  Lock: api.Lock,
  LockNotHeldError: wasm.__lockNotHeldErrorClass(),
  LockUnavailableError: wasm.__lockUnavailableErrorClass(),
  LockStoreTimeoutError: wasm.__lockStoreTimeoutErrorClass(),
};
