// The conformance kit's wasm for Node, Bun and Deno: wasm-bindgen's `nodejs` build of the
// `testing` feature (CommonJS), loaded synchronously from disk.
import wasm from "../dist/testing/node/keel_lock.js";

export const { checkLockStore, checkHistory } = wasm;
