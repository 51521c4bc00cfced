"use strict";
// Node (and Bun, Deno) entry for require(): wasm-bindgen's `nodejs` build, loaded synchronously
// from disk. `import` gets index.mjs, which loads the same glue as an ES module; the two share
// one wasm instance per process — so one default MemoryLockStore — and one set of exports.
const wasm = require("../dist/node/keel_lock.js");

module.exports = wasm.__keelApi(wasm);
