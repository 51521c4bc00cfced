// Cloudflare Workers (workerd) entry. Workers cannot fetch or compile wasm at runtime: the
// module is imported as a CompiledWasm module (wrangler and Miniflare do this for `.wasm`
// imports) and instantiated synchronously.
import wasmModule from "../dist/web/keel_lock_bg.wasm";
import { initSync } from "../dist/web/keel_lock.js";
import * as wasm from "../dist/web/keel_lock.js";

initSync({ module: wasmModule });

export const {
  lock,
  restoreLock,
  setLockStore,
  getLockStore,
  MemoryLockStore,
  Lock,
  checkLockStore,
} = wasm;
export const LockNotHeldError = wasm.__lockNotHeldErrorClass();
