// Trims the workerd build (pkg/dist/workerd) of what keel-lock's workerd entry cannot reach, for
// scripts/build-pkg.sh: wasm-bindgen writes an async loader, and pkg/workerd/index.js, through
// which a user's Worker imports keel-lock, instantiates the module with initSync instead. (Built
// with workers-rs, the module also exported that crate's and wasm-streams' own classes; the list
// below is where such names go.) Two steps:
//
//   node scripts/trim-workerd-glue.mjs exports DIR   after wasm-bindgen, before wasm-opt: drops
//       those declarations from DIR/keel_lock.js, then every wasm export the glue no longer
//       names, so that wasm-opt removes the code only they reached
//   node scripts/trim-workerd-glue.mjs imports DIR   after wasm-opt: drops the glue's import
//       functions the optimised .wasm no longer imports, then top-level helpers nothing refers
//       to any more; then checks the result
//
// The glue is cut into top-level statements by wasm-bindgen's layout (each starts in column 0).
// Anything unexpected fails the build: a name to drop that is not there, a dropped name still
// mentioned, a syntax error, a `wasm.<export>` the module lacks, an import the glue does not
// provide (the module is instantiated in Node), or a name the entry or src/js/core.js (the one
// JS file that holds the glue's exports) takes from the glue that it no longer exports.
import { readFileSync, writeFileSync, mkdtempSync, rmSync } from "node:fs";
import { spawnSync } from "node:child_process";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [mode, dir] = process.argv.slice(2);
if (!["exports", "imports"].includes(mode) || !dir) {
  console.error("usage: trim-workerd-glue.mjs exports|imports DIR");
  process.exit(2);
}
const gluePath = join(dir, "keel_lock.js");
const wasmPath = join(dir, "keel_lock_bg.wasm");
const entryPath = new URL("../pkg/workerd/index.js", import.meta.url);

/** Exported glue classes and functions that keel-lock's workerd entry never uses. */
const DROP = [
  // wasm-bindgen's async loader (the default export): the entry uses initSync.
  "__wbg_init",
  "__wbg_init_once",
  "__wbg_init_promise",
  "__wbg_load",
];

function fail(message) {
  console.error(`trim-workerd-glue: ${message} (${gluePath}); has wasm-bindgen's output changed?`);
  process.exit(1);
}

const ident = (name) => new RegExp(`(?<![\\w$])${name.replace(/\$/g, "\\$")}(?![\\w$])`);

// ---- the glue as top-level statements ------------------------------------------------------

/** Splits the glue into top-level statements, a leading doc comment kept with its statement. */
function statements(text) {
  const lines = text.split("\n");
  const out = [];
  let cur = null;
  let comment = [];
  let inComment = false;
  for (const line of lines) {
    if (inComment) {
      comment.push(line);
      if (line.includes("*/")) inComment = false;
      continue;
    }
    if (/^\/\*\*/.test(line)) {
      if (cur) out.push(cur), (cur = null);
      comment = [line];
      inComment = !line.includes("*/");
      continue;
    }
    const starts = /^[^\s})\]]/.test(line);
    if (starts) {
      if (cur) out.push(cur);
      cur = { lines: [...comment, line] };
      comment = [];
    } else if (cur) {
      cur.lines.push(line);
    } else {
      if (comment.length) fail("a doc comment followed by an indented line");
      out.push({ lines: [line] });
    }
  }
  if (comment.length) fail("a trailing doc comment");
  if (cur) out.push(cur);
  for (const s of out) {
    s.text = s.lines.join("\n");
    const head = s.lines.find((l) => !/^(\/\*\*|\s*\*)/.test(l)) ?? "";
    let m;
    if ((m = /^(?:export )?(?:async )?function\s+([\w$]+)/.exec(head)) || (m = /^(?:export )?class ([\w$]+)/.exec(head))) {
      s.names = [m[1]];
      s.exported = head.startsWith("export ");
    } else if ((m = /^(?:export )?(?:const|let) ([\w$]+(?:\s*,\s*[\w$]+)*)\s*[=;]/.exec(head))) {
      s.names = m[1].split(",").map((n) => n.trim());
      s.exported = head.startsWith("export ");
    } else if ((m = /^if \(Symbol\.dispose\) ([\w$]+)\.prototype\[Symbol\.dispose\]/.exec(head))) {
      s.attachedTo = m[1];
    }
  }
  if (out.map((s) => s.text).join("\n") !== text) fail("splitting the glue into statements lost text");
  return out;
}

const join_ = (stmts) => stmts.map((s) => s.text).join("\n");

/** Drops the statements declaring (or attached to) `names`; each must be found. */
function dropDeclarations(stmts, names) {
  const found = new Set();
  const kept = stmts.filter((s) => {
    const hit = s.names?.filter((n) => names.includes(n)) ?? [];
    if (hit.length && hit.length !== s.names.length) fail(`${s.names.join(", ")} are declared together; only some are to be dropped`);
    hit.forEach((n) => found.add(n));
    return hit.length === 0 && !names.includes(s.attachedTo);
  });
  const missing = names.filter((n) => !found.has(n));
  if (missing.length) fail(`not found: ${missing.join(", ")}`);
  return kept;
}

/** Drops non-exported top-level declarations nothing else mentions, until none is left. */
function dropUnreferenced(stmts) {
  for (;;) {
    const dead = stmts.filter(
      (s) => s.names && !s.exported && s.names.every((n) => !stmts.some((o) => o !== s && ident(n).test(o.text))),
    );
    if (dead.length === 0) return stmts;
    stmts = stmts.filter((s) => !dead.includes(s));
  }
}

// ---- the wasm module's export section ----------------------------------------------------------

function leb(bytes, pos) {
  let value = 0;
  let shift = 0;
  for (;;) {
    const b = bytes[pos++];
    value += (b & 0x7f) * 2 ** shift;
    shift += 7;
    if (b < 0x80) return [value, pos];
  }
}

function encodeLeb(value) {
  const out = [];
  do {
    let b = value & 0x7f;
    value = Math.floor(value / 128);
    if (value) b |= 0x80;
    out.push(b);
  } while (value);
  return out;
}

/** `bytes` with only the exports `keep` answers true for. */
function filterExports(bytes, keep) {
  const parts = [bytes.subarray(0, 8)];
  let pos = 8;
  let seen = false;
  while (pos < bytes.length) {
    const id = bytes[pos];
    const [size, start] = leb(bytes, pos + 1);
    const end = start + size;
    if (id !== 7) {
      parts.push(bytes.subarray(pos, end));
    } else {
      seen = true;
      let [count, p] = leb(bytes, start);
      const entries = [];
      for (let i = 0; i < count; i++) {
        const from = p;
        const [len, q] = leb(bytes, p);
        const name = new TextDecoder().decode(bytes.subarray(q, q + len));
        p = leb(bytes, q + len + 1)[1];
        if (keep(name)) entries.push(bytes.subarray(from, p));
      }
      if (p !== end) fail("the wasm export section did not parse");
      const body = [...encodeLeb(entries.length), ...entries.flatMap((e) => [...e])];
      parts.push(Uint8Array.from([7, ...encodeLeb(body.length), ...body]));
    }
    pos = end;
  }
  if (!seen) fail("the wasm module has no export section");
  return Buffer.concat(parts);
}

// ---- the steps --------------------------------------------------------------------------------

const glue = readFileSync(gluePath, "utf8");
const wasmNames = (text) => new Set([...text.matchAll(/(?<![\w$])wasm\.([\w$]+)/g)].map((m) => m[1]));

if (mode === "exports") {
  let stmts = dropDeclarations(statements(glue), DROP);
  const exportList = stmts.filter((s) => /^export \{/.test(s.text));
  const defaultExport = /^export \{ initSync, __wbg_init as default \};(\n*)$/;
  if (exportList.length !== 1 || !defaultExport.test(exportList[0].text))
    fail("expected `export { initSync, __wbg_init as default };`");
  exportList[0].text = exportList[0].text.replace(defaultExport, "export { initSync };$1");
  const text = join_(stmts);
  for (const name of DROP) if (ident(name).test(text)) fail(`${name} is still mentioned`);
  const named = wasmNames(text);
  const before = new WebAssembly.Module(readFileSync(wasmPath));
  const dropped = WebAssembly.Module.exports(before).filter((e) => !named.has(e.name));
  writeFileSync(wasmPath, filterExports(readFileSync(wasmPath), (name) => named.has(name)));
  writeFileSync(gluePath, text);
  console.error(`trim-workerd-glue: dropped ${DROP.length} glue declarations and ${dropped.length} wasm exports`);
} else {
  const module = new WebAssembly.Module(readFileSync(wasmPath));
  const imported = new Set(WebAssembly.Module.imports(module).filter((i) => i.module === "./keel_lock_bg.js").map((i) => i.name));
  // import0's entries: `        name: function(…) {` … `        },` (`        }, arguments); },` when
  // wrapped in handleError), or a one-line `name: value,`.
  const entryEnd = /^ {8}\}(?:, arguments\); \})?,$/;
  const lines = glue.split("\n");
  const open = lines.findIndex((l) => l === "    const import0 = {");
  if (open < 0) fail("no `const import0 = {`");
  const out = lines.slice(0, open + 1);
  let i = open + 1;
  let provided = 0;
  let removed = 0;
  for (; lines[i] !== "    };"; ) {
    if (i >= lines.length) fail("import0 does not end");
    const m = /^ {8}([\w$]+): /.exec(lines[i]);
    if (!m) fail(`unexpected line in import0: ${lines[i]}`);
    let j = i;
    if (/: function\(.*\{$/.test(lines[i])) {
      while (!entryEnd.test(lines[j])) {
        j++;
        if (j >= lines.length || /^ {0,7}\S/.test(lines[j])) fail(`${m[1]} does not end`);
      }
    } else if (!lines[i].endsWith(",")) fail(`unexpected line in import0: ${lines[i]}`);
    if (m[1] === "__proto__" || imported.has(m[1])) {
      out.push(...lines.slice(i, j + 1));
      if (m[1] !== "__proto__") provided++;
    } else removed++;
    i = j + 1;
  }
  out.push(...lines.slice(i));
  if (provided !== imported.size) fail(`the glue provides ${provided} of the module's ${imported.size} imports`);
  const text = join_(dropUnreferenced(statements(out.join("\n"))));
  for (const name of DROP) if (ident(name).test(text)) fail(`${name} is still mentioned`);

  // Checks: syntax, the module's exports the glue uses, what the entry and core.js take from it.
  const exports = new Set(WebAssembly.Module.exports(module).map((e) => e.name));
  for (const name of wasmNames(text)) if (!exports.has(name)) fail(`the glue uses wasm.${name}, which the module does not export`);
  writeFileSync(gluePath, text);
  const tmp = mkdtempSync(join(tmpdir(), "trim-workerd-"));
  try {
    writeFileSync(join(tmp, "glue.mjs"), text);
    const check = spawnSync(process.execPath, ["--check", join(tmp, "glue.mjs")], { encoding: "utf8" });
    if (check.status !== 0) fail(`the trimmed glue does not parse:\n${check.stderr}`);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
  const g = await import(pathToFileURL(gluePath).href);
  g.initSync({ module });
  const entry = readFileSync(entryPath, "utf8");
  const needed = new Set(wasmNames(entry));
  for (const m of entry.matchAll(/export const \{([^}]*)\} = wasm;/g)) m[1].split(",").forEach((n) => needed.add(n.trim()));
  for (const m of entry.matchAll(/import \{([^}]*)\} from "\.\.\/dist\/workerd\/keel_lock\.js"/g)) m[1].split(",").forEach((n) => needed.add(n.trim()));
  const corePath = new URL("../src/js/core.js", import.meta.url);
  const fromEntry = needed.size;
  for (const m of readFileSync(corePath, "utf8").matchAll(/(?<![\w$.])glue\.([\w$]+)/g)) needed.add(m[1]);
  // Both files are read by pattern: finding nothing means the pattern no longer fits them.
  if (fromEntry < 3 || needed.size - fromEntry < 3) fail("could not tell which glue exports pkg/workerd/index.js and src/js/core.js use");
  for (const name of needed) if (!(name in g)) fail(`pkg/workerd/index.js or src/js/core.js uses ${name}, which the trimmed glue does not export`);
  console.error(`trim-workerd-glue: dropped ${removed} import functions; ${glue.length} → ${text.length} bytes of glue`);
}
