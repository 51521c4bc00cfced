// What the installed tarball holds, beyond the code paths the other suites run: the files a
// registry page and a licence check read, and which wasm carries the conformance kit.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { fileURLToPath } from "node:url";

const installed = fileURLToPath(new URL("./node_modules/keel-lock/", import.meta.url));
const repo = fileURLToPath(new URL("../../", import.meta.url));
const read = (path) => readFileSync(path, "utf8");

test("the package ships its README and both licence texts", () => {
  const readme = read(`${installed}README.md`);
  assert.equal(readme, read(`${repo}pkg/README.md`));
  assert.match(readme, /^# keel-lock\n/);
  assert.match(readme, /npm install keel-lock/);
  for (const license of ["LICENSE-MIT", "LICENSE-APACHE"]) {
    assert.equal(read(`${installed}${license}`), read(`${repo}${license}`), license);
  }
  const manifest = JSON.parse(read(`${installed}package.json`));
  assert.equal(manifest.license, "MIT OR Apache-2.0");
});

/** Export names of the wasm module at `path` (relative to the installed package). */
function wasmExports(path) {
  const module = new WebAssembly.Module(readFileSync(`${installed}${path}`));
  return WebAssembly.Module.exports(module).map((e) => e.name);
}

test("only the testing wasm carries checkLockStore", () => {
  for (const build of ["node", "web", "workerd"]) {
    const names = wasmExports(`dist/${build}/keel_lock_bg.wasm`);
    assert.ok(names.includes("__kBegin"), `dist/${build} exports the lock's numeric face`);
    assert.ok(!names.includes("checkLockStore"), `dist/${build} exports checkLockStore`);
  }
  for (const build of ["node", "web"]) {
    assert.ok(wasmExports(`dist/testing/${build}/keel_lock_bg.wasm`).includes("checkLockStore"), `dist/testing/${build}`);
  }
  assert.deepEqual(readdirSync(`${installed}dist/testing`).sort(), ["node", "web"]);
});
