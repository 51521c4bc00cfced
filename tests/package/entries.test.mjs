// The package's entry files each name what they export (ESM export lists are static, and each
// entry loads a different wasm build, so the names are written in each). This keeps them from
// drifting: every entry of the installed package exports exactly the values its types declare.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

const require = createRequire(import.meta.url);
const root = dirname(require.resolve("keel-lock/package.json"));
const read = (file) => readFileSync(join(root, file), "utf8");

/** Value exports a .d.ts declares (functions, classes, consts), re-exports followed. */
function declared(file) {
  const text = read(file);
  const names = new Set();
  for (const [, name] of text.matchAll(/^export declare (?:function|class|const) (\w+)/gm)) names.add(name);
  if (/^export \* from "\.\.\/index\.js";/m.test(text)) {
    for (const name of declared("index.d.ts")) names.add(name);
  }
  return names;
}

/** Names an ESM entry exports: `export const { a, b } = …`, `export const a`, `export class a`, `export { a }`. */
function esmExports(file) {
  const text = read(file);
  const names = new Set();
  for (const [, list] of text.matchAll(/^export const \{([^}]*)\}/gm)) {
    for (const name of list.split(",").map((n) => n.trim()).filter(Boolean)) names.add(name);
  }
  for (const [, name] of text.matchAll(/^export (?:const|class|function) (\w+)/gm)) names.add(name);
  for (const [, list] of text.matchAll(/^export \{([^}]*)\}/gm)) {
    for (const name of list.split(",").map((n) => n.trim().split(/\s+as\s+/).pop()).filter(Boolean)) names.add(name);
  }
  return names;
}

const sorted = (set) => [...set].sort();

test("every entry exports exactly the values index.d.ts declares", () => {
  const types = declared("index.d.ts");
  assert.ok(types.has("lock") && types.has("LockUnavailableError"), `index.d.ts declares ${sorted(types)}`);
  assert.deepEqual(sorted(Object.keys(require("keel-lock"))), sorted(types), "require('keel-lock')");
  assert.deepEqual(sorted(esmExports("node/index.mjs")), sorted(types), "node/index.mjs");
  assert.deepEqual(sorted(esmExports("browser/index.js")), sorted(types), "browser/index.js");
});

test("the Workers entry exports what its own types declare: the main API plus the Durable Object parts", () => {
  const types = declared("workerd/index.d.ts");
  for (const name of declared("index.d.ts")) assert.ok(types.has(name), `workerd/index.d.ts lacks ${name}`);
  assert.ok(types.has("DurableObjectLockStore") && types.has("LockDurableObject"));
  assert.deepEqual(sorted(esmExports("workerd/index.js")), sorted(types), "workerd/index.js");
});
