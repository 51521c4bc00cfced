// Node (and Bun, Deno) entry for `import`: the glue of index.cjs as an ES module
// (dist/node/keel_lock.mjs), so that an import does not also pay for Node's CommonJS loader
// (≈ 1.1 ms of start-up, docs/wasm-size.md). The two entries share one wasm instance per
// process — so one default MemoryLockStore — and one set of exports.
import { load } from "../dist/node/keel_lock.mjs";

const wasm = load();

export const {
  lock,
  semaphore,
  readLock,
  writeLock,
  restoreLock,
  inspect,
  campaign,
  observe,
  onLockEvent,
  setLockStore,
  getLockStore,
  MemoryLockStore,
  Lock,
  LockNotHeldError,
  LockUnavailableError,
  LockStoreTimeoutError,
  LimitMismatchError,
} = wasm.__keelApi(wasm);
