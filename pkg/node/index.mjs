// Node ESM entry: the CommonJS entry's exports under their names (one wasm instance for both).
// Loaded with require() rather than `import keel from "./index.cjs"`: an ES module importing a
// CommonJS one makes Node run its CommonJS export lexer first, ≈ 1.2 ms more start-up measured
// here (import + first run(), fresh processes).
import { createRequire } from "node:module";

const keel = createRequire(import.meta.url)("./index.cjs");

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
