// Rewrites the JS snippets of a wasm-bindgen `nodejs` build (our own ES modules under
// src/js/, copied into <out>/snippets/) as CommonJS, so that the CommonJS glue's require() of
// them is a plain CommonJS load: Node's require() of an ES module goes through the ESM loader,
// which cost ≈ 3 ms of import time here (bench/README.md, start-up).
//
// The snippets keep to forms this rewrite knows, and anything else stops the build:
//   import { a, b } from "./x.js";   →  const { a, b } = require("./x.js");
//   export function f / export class C   →  the same without `export`, and exports.f = f at the end
// Usage: node scripts/cjs-snippets.mjs <dir> (every .js under it).
import { readdirSync, readFileSync, writeFileSync, statSync } from "node:fs";
import { join } from "node:path";

function files(dir) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return files(path);
    return name.endsWith(".js") ? [path] : [];
  });
}

function rewrite(path) {
  const source = readFileSync(path, "utf8");
  const names = [];
  const lines = source.split("\n").map((line, i) => {
    const imported = /^import \{([\w\s,]+)\} from ("\.\/[\w.-]+\.js");$/.exec(line);
    if (imported) return `const {${imported[1]}} = require(${imported[2]});`;
    const exported = /^export (async function\*? |function\*? |class )(\w+)/.exec(line);
    if (exported) {
      names.push(exported[2]);
      return line.slice("export ".length);
    }
    if (/^\s*(import|export)\b/.test(line)) {
      throw new Error(`${path}:${i + 1}: no CommonJS rewrite for: ${line}`);
    }
    return line;
  });
  const tail = names.map((name) => `exports.${name} = ${name};`);
  writeFileSync(path, ['"use strict";', ...lines, ...tail, ""].join("\n"));
}

for (const path of files(process.argv[2])) rewrite(path);
