// Node (and Bun, Deno) entry for `import`: the glue of index.cjs as an ES module
// (dist/node/keel_lock.mjs), so that an import does not also pay for Node's CommonJS loader
// (≈ 1.1 ms of start-up, docs/wasm-size.md). The two entries share one wasm instance per
// process — so one default MemoryLockStore — and one exports object, built by whichever entry
// comes first (the two build it alike).
import { load } from "../dist/node/keel_lock.mjs";

const wasm = load();
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

export const {
  lock,
  restoreLock,
  setLockStore,
  getLockStore,
  MemoryLockStore,
  Lock,
  LockNotHeldError,
  LockUnavailableError,
  LockStoreTimeoutError,
} = wasm.__keelEntry;
