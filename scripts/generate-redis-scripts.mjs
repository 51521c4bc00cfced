// Writes pkg/stores/redis-scripts.generated.js, the Lua scripts of keel-lock/redis and their
// SHA-1 digests, from the sources in pkg/stores/redis/lua/:
//   - each .lua file there is one script, exported under its name in capitals with _SCRIPT
//     (acquire-many.lua: ACQUIRE_MANY_SCRIPT), and its SHA-1 with _SHA: the name Redis caches it
//     under, so the store sends EVALSHA with no SCRIPT LOAD first. The digests are computed here
//     because edge runtimes have no synchronous SHA-1 to compute them when the module loads.
//   - parts/ holds what several scripts share. A line `-- include parts/NAME.lua` is replaced by
//     that file's text, every line of it indented as the directive is; `name=value` pairs after
//     the path (values without spaces) fill the part's {{name}} placeholders.
//   - {{MAX_FENCE}} (pkg/stores/args.js), {{CHANNEL}} and {{WATCH_SUFFIX}}
//     (pkg/stores/redis-names.js) are those constants' values.
//   - The lines starting with "---" at the top of a file, and one blank line after them, document
//     it; they are not part of the text.
// A part whose text appears in more than one place is written into the module once, as a
// constant the scripts' template literals interpolate.
//
//   node scripts/generate-redis-scripts.mjs          write the module
//   node scripts/generate-redis-scripts.mjs --check  exit 1 when the module is not what the sources give
//
// Needs only node (no npm packages), so scripts/lint.sh runs the check on a fresh checkout.
import { createHash } from "node:crypto";
import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { MAX_FENCE } from "../pkg/stores/args.js";
import { CHANNEL, WATCH_SUFFIX } from "../pkg/stores/redis-names.js";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const SOURCES = "pkg/stores/redis/lua";
const OUT = "pkg/stores/redis-scripts.generated.js";
const CONSTANTS = { MAX_FENCE: String(MAX_FENCE), CHANNEL, WATCH_SUFFIX };
const INCLUDE = /^( *)-- include (\S+)((?: +[A-Za-z_]\w*=\S+)*) *$/;
const PLACEHOLDER = /\{\{(\w+)\}\}/g;

const args = process.argv.slice(2);
const unknown = args.filter((a) => a !== "--check");
if (unknown.length) {
  console.error(`generate-redis-scripts: unknown argument ${unknown.join(" ")} (usage: node scripts/generate-redis-scripts.mjs [--check])`);
  process.exit(2);
}

function fail(message) {
  console.error(`generate-redis-scripts: ${message}`);
  process.exit(1);
}

/** The lines of the source at `path` (relative to SOURCES), without its documentation. */
function sourceLines(path) {
  let text;
  try {
    text = readFileSync(join(ROOT, SOURCES, path), "utf8");
  } catch (error) {
    fail(`${SOURCES}/${path}: ${error.message}`);
  }
  if (!text.endsWith("\n")) fail(`${SOURCES}/${path} does not end with a newline`);
  if (text.includes("\r")) fail(`${SOURCES}/${path} has a carriage return`);
  const lines = text.slice(0, -1).split("\n");
  let first = 0;
  while (first < lines.length && lines[first].startsWith("---")) first++;
  if (first > 0 && lines[first] === "") first++;
  return lines.slice(first);
}

/** `line` with its placeholders filled from `params`, then CONSTANTS; `used` collects the params read. */
function fill(line, params, used, where) {
  return line.replace(PLACEHOLDER, (_, name) => {
    if (Object.hasOwn(params, name)) {
      used.add(name);
      return params[name];
    }
    if (Object.hasOwn(CONSTANTS, name)) return CONSTANTS[name];
    fail(`${where}: {{${name}}} is neither a parameter given to it nor a constant (${Object.keys(CONSTANTS).join(", ")})`);
  });
}

// A piece of text: one source with its parameters at one indentation. `pieces` are strings and
// the units it includes, in order.
const units = new Map();
const including = [];

function unit(path, params, indent, script) {
  const key = JSON.stringify([path, Object.entries(params).sort(), indent, script]);
  if (units.has(key)) return units.get(key);
  if (including.includes(path)) fail(`${SOURCES}/${path} includes itself: ${[...including, path].join(" -> ")}`);
  including.push(path);
  const where = `${SOURCES}/${path}`;
  const used = new Set();
  const lines = sourceLines(path);
  const pieces = [];
  lines.forEach((line, i) => {
    const filled = fill(line, params, used, where);
    const include = INCLUDE.exec(filled);
    if (include) {
      const given = Object.fromEntries(
        include[3]
          .trim()
          .split(/ +/)
          .filter(Boolean)
          .map((pair) => [pair.slice(0, pair.indexOf("=")), pair.slice(pair.indexOf("=") + 1)]),
      );
      if (!include[2].startsWith("parts/")) fail(`${where}: includes ${include[2]}, not a file in parts/`);
      pieces.push(unit(include[2], given, indent + include[1].length, false));
    } else if (/^\s*-- include\b/.test(filled)) {
      fail(`${where}:${i + 1}: not an include directive (-- include parts/NAME.lua name=value ...): ${line.trim()}`);
    } else {
      pieces.push(filled === "" ? "" : " ".repeat(indent) + filled);
    }
    // A script keeps its last newline; a part's last line ends where the directive's line did.
    if (i < lines.length - 1 || script) pieces.push("\n");
  });
  const unused = Object.keys(params).filter((name) => !used.has(name));
  if (unused.length) fail(`${where}: given ${unused.join(", ")}, which it has no placeholder for`);
  including.pop();
  const made = { path, params, indent, pieces, text: null };
  made.text = pieces.map((p) => (typeof p === "string" ? p : p.text)).join("");
  units.set(key, made);
  return made;
}

const scriptFiles = readdirSync(join(ROOT, SOURCES), { withFileTypes: true })
  .filter((entry) => entry.isFile() && entry.name.endsWith(".lua"))
  .map((entry) => entry.name)
  .sort();
if (scriptFiles.length === 0) fail(`no .lua files in ${SOURCES}`);
const scripts = scriptFiles.map((file) => ({
  file,
  name: file.slice(0, -".lua".length).toUpperCase().replace(/-/g, "_"),
  unit: unit(file, {}, 0, true),
}));

// How often each part is referenced once every part is written once: those referenced more than
// once become constants; the others are written where they are referenced.
const references = new Map();
const counted = new Set();
function countReferences(u) {
  for (const piece of u.pieces) {
    if (typeof piece === "string") continue;
    references.set(piece, (references.get(piece) ?? 0) + 1);
    if (!counted.has(piece)) {
      counted.add(piece);
      countReferences(piece);
    }
  }
}
for (const script of scripts) countReferences(script.unit);

// The constants, each after those it interpolates, named after their file (numbered when one
// file gives several texts).
const shared = [];
const names = new Map();
const visited = new Set();
function declare(u) {
  if (visited.has(u)) return;
  visited.add(u);
  for (const piece of u.pieces) {
    if (typeof piece !== "string") declare(piece);
  }
  if ((references.get(u) ?? 0) >= 2) shared.push(u);
}
for (const script of scripts) declare(script.unit);
const base = (u) =>
  u.path
    .replace(/^parts\//, "")
    .replace(/\.lua$/, "")
    .toUpperCase()
    .replace(/-/g, "_");
for (const u of shared) {
  const same = shared.filter((other) => base(other) === base(u));
  names.set(u, same.length === 1 ? base(u) : `${base(u)}_${same.indexOf(u) + 1}`);
}

const escape = (text) => text.replace(/[\\`]/g, "\\$&").replace(/\$\{/g, "\\${");
const literal = (u) =>
  u.pieces
    .map((piece) => {
      if (typeof piece === "string") return escape(piece);
      return names.get(piece) ? `\${${names.get(piece)}}` : literal(piece);
    })
    .join("");
const describe = (u) => {
  const params = Object.entries(u.params).map(([k, v]) => `${k}=${v}`);
  const how = [u.indent ? `indented ${u.indent}` : "", params.length ? params.join(" ") : ""].filter(Boolean).join("; ");
  return `${SOURCES}/${u.path}${how ? ` (${how})` : ""}`;
};

const sha1 = (text) => createHash("sha1").update(text).digest("hex");
const out = [
  "// Generated by scripts/generate-redis-scripts.mjs from the Lua sources in pkg/stores/redis/lua/;",
  "// do not edit. After changing a source, run `node scripts/generate-redis-scripts.mjs`; scripts/lint.sh",
  "// runs it with --check, which fails while this file is not what the sources give. What each script",
  "// does: the comment at the top of its source. The store reads these through redis-scripts.js.",
];
for (const u of shared) out.push("", `// ${describe(u)}`, `const ${names.get(u)} = \`${literal(u)}\`;`);
for (const { name, unit: u } of scripts) {
  out.push(
    "",
    `// ${describe(u)}`,
    `export const ${name}_SCRIPT = \`${literal(u)}\`;`,
    `/** SHA-1 of ${name}_SCRIPT, the name Redis caches it under. */`,
    `export const ${name}_SHA = "${sha1(u.text)}";`,
  );
}
const generated = `${out.join("\n")}\n`;

// The module's template literals must give the texts composed here.
const module = await import(`data:text/javascript;base64,${Buffer.from(generated).toString("base64")}`);
for (const { name, unit: u } of scripts) {
  if (module[`${name}_SCRIPT`] !== u.text) fail(`${name}_SCRIPT in the generated module is not the composed text (an escaping bug here)`);
}

const path = join(ROOT, OUT);
let current = null;
try {
  current = readFileSync(path, "utf8");
} catch {}
if (args.includes("--check")) {
  if (current === generated) process.exit(0);
  fail(
    current === null
      ? `${OUT} is missing; write it with \`node scripts/generate-redis-scripts.mjs\``
      : `${OUT} is not what the sources in ${SOURCES} give (a source changed without regenerating, or the module was edited); rewrite it with \`node scripts/generate-redis-scripts.mjs\``,
  );
}
if (current === generated) console.error(`${OUT} is already what the sources give`);
else {
  writeFileSync(path, generated);
  console.error(`wrote ${OUT}: ${scripts.length} scripts, ${shared.length} shared parts`);
}
