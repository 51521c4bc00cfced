// wasm-bindgen's web glue imports a JS snippet module once per `#[wasm_bindgen(module = …)]`
// block that names it (`import * as import1 from "./snippets/…/api.js"`, `import3` from the same
// file, …) and lists each of those in the wasm's import object under the same key. The object
// literal then repeats keys — bundlers warn ("Duplicate key") — though every copy is the same
// module namespace. This keeps the first import of each module and its one entry in the object,
// for scripts/build-pkg.sh:
//
//   node scripts/dedupe-glue-imports.mjs DIR     rewrites DIR/keel_lock.js in place
//
// Fails the build if a dropped name is still mentioned afterwards.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const dir = process.argv[2];
if (!dir) {
  console.error("usage: dedupe-glue-imports.mjs DIR");
  process.exit(2);
}
const path = join(dir, "keel_lock.js");
const lines = readFileSync(path, "utf8").split("\n");
const IMPORT = /^import \* as (import\d+) from "([^"]+)";?$/;
const firstFor = new Map(); // module path → the name kept
const dropped = new Set();
for (const line of lines) {
  const m = IMPORT.exec(line);
  if (!m) continue;
  if (firstFor.has(m[2])) dropped.add(m[1]);
  else firstFor.set(m[2], m[1]);
}
const ENTRY = /^\s+"([^"]+)": (import\d+),?$/;
const out = lines.filter((line) => {
  const i = IMPORT.exec(line);
  if (i) return !dropped.has(i[1]);
  const e = ENTRY.exec(line);
  if (e && firstFor.has(e[1])) return !dropped.has(e[2]);
  return true;
});
const text = out.join("\n");
for (const name of dropped) {
  if (new RegExp(`\\b${name}\\b`).test(text)) {
    console.error(`dedupe-glue-imports: ${name} is still used in ${path}`);
    process.exit(1);
  }
}
writeFileSync(path, text);
console.log(`${path}: ${dropped.size} repeated snippet imports dropped`);
