// The conformance kit's wasm for Cloudflare Workers: the same `web` build as the browser's,
// imported as a CompiledWasm module (Workers cannot compile wasm at runtime) and instantiated
// synchronously.
import wasmModule from "../dist/testing/web/keel_lock_bg.wasm";
import { initSync, checkLockStore, checkHistory } from "../dist/testing/web/keel_lock.js";

initSync({ module: wasmModule });

export { checkLockStore, checkHistory };
