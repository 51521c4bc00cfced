"use strict";
// Node (and Bun, Deno) entry for require(): wasm-bindgen's `nodejs` build, loaded synchronously
// from disk. `import` gets index.mjs, which loads the same glue as an ES module; the two share
// one wasm instance per process — so one default MemoryLockStore — and one exports object,
// built by whichever entry comes first (the two build it alike).
const wasm = require("../dist/node/keel_lock.js");

if (wasm.__keelEntry === undefined) {
  const api = wasm.__keelApi(wasm);
  wasm.__keelEntry = {
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
}
module.exports = wasm.__keelEntry;
