// Turns a wasm-bindgen `nodejs` build (<out>/keel_lock.js, CommonJS, plus our JS snippets — the
// ES modules of src/js/ — copied under <out>/snippets/) into one file per module system:
//
//   <out>/keel_lock.js   CommonJS: the glue with the snippets inlined, rewritten as CommonJS
//                        (a table of module functions, each run on its first use, as require()
//                        would), so loading it reads and compiles one file. <out>/snippets/ is
//                        removed.
//   <out>/keel_lock.mjs  with --esm: the same code as an ES module whose `load()` answers the
//                        glue's exports. The Node ESM entry loads this one: an ES module that
//                        require()s CommonJS pays for Node's CommonJS loader on top of its own.
// Either form instantiates the wasm only if the other has not in this process (a key on
// globalThis), so `import` and `require` share one instance.
//
// Measured in fresh Node 20 processes (import + first run(), medians, docs/wasm-size.md):
// require() of each snippet as a file of its own cost ≈ 1.3 ms; the ESM entry's require() of
// the CommonJS glue ≈ 1.1 ms more.
//
// The snippets keep to forms this rewrite knows, and anything else stops the build:
//   import { a, b } from "./x.js";   →  const { a, b } = snippet("<dir>/x.js");
//   export function f / export class C / export const c   →  the same without `export`, and
//                                                            return { f, … } at the end
// A snippet is named by its path below its crate's folder of snippets (src/js/x.js). They import
// one another without cycles: a snippet asked for while it runs stops the load.
// The glue may require() nothing but its snippets and "fs".
// Usage: node scripts/node-glue.mjs <out> [--esm]
import { readdirSync, readFileSync, writeFileSync, statSync, rmSync } from "node:fs";
import { join, relative } from "node:path";
import { createHash } from "node:crypto";

const [out, flag] = process.argv.slice(2);

function files(dir) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return files(path);
    return name.endsWith(".js") ? [path] : [];
  });
}

/** A snippet as the body of a function answering its exports; `dir` is its folder as the table names it. */
function rewrite(path, dir) {
  const names = [];
  const lines = readFileSync(path, "utf8").split("\n").map((line, i) => {
    const imported = /^import \{([\w\s,]+)\} from "\.\/([\w.-]+\.js)";$/.exec(line);
    if (imported) return `const {${imported[1]}} = snippet(${JSON.stringify(dir + imported[2])});`;
    const exported = /^export (async function\*? |function\*? |class |const )(\w+)/.exec(line);
    if (exported) {
      names.push(exported[2]);
      return line.slice("export ".length);
    }
    if (/^\s*(import|export)\b/.test(line)) {
      throw new Error(`${path}:${i + 1}: no CommonJS rewrite for: ${line}`);
    }
    return line;
  });
  return ['"use strict";', ...lines, `return { ${names.join(", ")} };`].join("\n");
}

/** A snippet's name in the table, from its path as the glue require()s it (./snippets/<crate>/…). */
const short = (name) => name.replace(/^\.\/snippets\/[^/]+\//, "");

const table = files(join(out, "snippets")).map((path) => {
  const name = short(`./${relative(out, path).split("\\").join("/")}`);
  const body = rewrite(path, name.slice(0, name.lastIndexOf("/") + 1));
  return `  ${JSON.stringify(name)}: function () {\n${body}\n  },`;
});
const loader = [
  "// The JS snippets (src/js/*.js), inlined by scripts/node-glue.mjs: each runs on its first use.",
  "const snippet = (() => {",
  "  const sources = {",
  ...table,
  "  };",
  "  const loaded = new Map();",
  "  return (name) => {",
  "    let exports = loaded.get(name);",
  "    if (exports === undefined) {",
  "      loaded.set(name, null);",
  "      exports = sources[name]();",
  "      loaded.set(name, exports);",
  "    }",
  "    if (exports === null) throw new Error(`keel-lock: ${name} imports itself through a cycle`);",
  "    return exports;",
  "  };",
  "})();",
].join("\n");

const required = /require\((?:String\.raw`|")(\.\/snippets\/[^`"]+\.js)(?:`|")\)/g;
const source = readFileSync(join(out, "keel_lock.js"), "utf8");
const types = /^\/\* @ts-self-types=.*\n/.exec(source)?.[0] ?? "";
const lines = source.slice(types.length).split("\n");
const first = lines.findIndex((line) => line.search(required) >= 0);
if (first < 0) throw new Error(`${out}/keel_lock.js: no snippet require() found`);
lines.splice(first, 0, loader);
const glue = lines.join("\n").replace(required, (_, name) => `snippet(${JSON.stringify(short(name))})`);
for (const [call] of glue.matchAll(/\brequire\([^)]*\)/g)) {
  if (call !== "require('fs')") throw new Error(`${out}/keel_lock.js: unexpected ${call}`);
}
// The glue reads the .wasm at `${__dirname}/keel_lock_bg.wasm`, with require('fs').
const wasmPath = "const wasmPath = `${__dirname}/keel_lock_bg.wasm`;";
const wasmBytes = "const wasmBytes = require('fs').readFileSync(wasmPath);";
if (!glue.includes(wasmPath) || !glue.includes(wasmBytes)) {
  throw new Error(`${out}/keel_lock.js: the .wasm is not read as this script expects`);
}

// Both forms instantiate the wasm once per process: the first to load leaves its exports on
// globalThis under a key naming this build (a hash of its .wasm and glue), and the other answers
// those — `import` and `require` share one instance, so one default store, whatever path each
// reached the package by (symlinks, --preserve-symlinks, a second copy of the same build).
const build = createHash("sha256")
  .update(readFileSync(join(out, "keel_lock_bg.wasm")))
  .update(glue)
  .digest("hex")
  .slice(0, 16);
const register = [
  "/** Leaves `exports` where the other form of this glue finds them; answers them. */",
  "function register(exports) {",
  "  try {",
  "    Object.defineProperty(globalThis, key, { value: exports });",
  "  } catch {",
  "    // A frozen globalThis: this form keeps an instance of its own.",
  "  }",
  "  return exports;",
  "}",
];
const instantiate = (body) => [
  "/** Runs the wasm-bindgen glue: compiles and instantiates the wasm, fills `exports`. */",
  "function instantiate(exports) {",
  body,
  "return exports;",
  "}",
];
writeFileSync(
  join(out, "keel_lock.js"),
  [
    types + "// wasm-bindgen's glue, with the JS snippets inlined by scripts/node-glue.mjs.",
    `const key = Symbol.for(${JSON.stringify(`keel-lock ${build}`)});`,
    "",
    ...register,
    "",
    ...instantiate(glue),
    "",
    "module.exports = globalThis[key] ?? register(instantiate(exports));",
    "",
  ].join("\n"),
);
rmSync(join(out, "snippets"), { recursive: true });

if (flag === "--esm") {
  const body = glue
    .replace(wasmPath, 'const wasmPath = new URL("keel_lock_bg.wasm", import.meta.url);')
    .replace(wasmBytes, "const wasmBytes = readFileSync(wasmPath);");
  writeFileSync(
    join(out, "keel_lock.mjs"),
    [
      "// Generated by scripts/node-glue.mjs from keel_lock.js: the same glue as an ES module.",
      'import { readFileSync } from "node:fs";',
      "",
      `const key = Symbol.for(${JSON.stringify(`keel-lock ${build}`)});`,
      "",
      ...register,
      "",
      ...instantiate(body),
      "",
      "/** The glue's exports: this process's instance of the wasm, made on the first call. */",
      "export function load() {",
      "  return globalThis[key] ?? register(instantiate({}));",
      "}",
      "",
    ].join("\n"),
  );
}
