// Node ESM entry: the CommonJS entry's exports under their names (one wasm instance for both).
import keel from "./index.cjs";

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
} = keel;
