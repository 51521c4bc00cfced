"use strict";
// Node (and Bun, Deno) entry: wasm-bindgen's `nodejs` build, loaded synchronously from disk.
// The ESM entry (index.mjs) re-exports this very module, so `import` and `require` in one
// process share one wasm instance — and so one default MemoryLockStore.
const wasm = require("../dist/node/keel_lock.js");

module.exports = {
  lock: wasm.lock,
  restoreLock: wasm.restoreLock,
  setLockStore: wasm.setLockStore,
  getLockStore: wasm.getLockStore,
  MemoryLockStore: wasm.MemoryLockStore,
  Lock: wasm.Lock,
  LockNotHeldError: wasm.__lockNotHeldErrorClass(),
  LockUnavailableError: wasm.__lockUnavailableErrorClass(),
  LockStoreTimeoutError: wasm.__lockStoreTimeoutErrorClass(),
};
