// Browser / bundler entry: wasm-bindgen's `web` build. The .wasm is located with
// `new URL(…, import.meta.url)`, which Vite, Rollup, webpack 5 and esbuild understand, and is
// compiled once here with top-level await so that `lock()` can stay synchronous.
import init, * as wasm from "../dist/web/keel_lock.js";

await init({ module_or_path: new URL("../dist/web/keel_lock_bg.wasm", import.meta.url) });

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
  Lock,
  MemoryLockStore,
  LockNotHeldError,
  LockUnavailableError,
  LockStoreTimeoutError,
  LimitMismatchError,
} = wasm.__keelApi(wasm);
