// The conformance kit's wasm for browsers and bundlers: wasm-bindgen's `web` build of the
// `testing` feature, located with `new URL(…, import.meta.url)` and compiled with top-level await.
import init, { checkLockStore, checkHistory } from "../dist/testing/web/keel_lock.js";

await init({ module_or_path: new URL("../dist/testing/web/keel_lock_bg.wasm", import.meta.url) });

export { checkLockStore, checkHistory };
