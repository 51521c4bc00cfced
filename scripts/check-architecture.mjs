// Holds ARCHITECTURE.md's map to the tree: every source file under src/, wit/ and pkg/ (the
// package's own modules, not its build output) is named in the map, and every file the map
// names exists.
//
//   node scripts/check-architecture.mjs
//
// The map is the first fenced block of ARCHITECTURE.md. A line that starts with a directory
// (`src/lock/`) lists that directory's files by name; lines indented past it continue the list.
// `*.lua` names every file of that kind in the directory. Text in parentheses is commentary.
import { readFileSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";

const root = new URL("..", import.meta.url).pathname;
const KINDS = /\.(rs|js|mjs|cjs|wit|lua)$/;
const SKIP = new Set(["node_modules", "dist", "deps"]);

const text = readFileSync(join(root, "ARCHITECTURE.md"), "utf8");
const map = text.split("```")[1];
if (map === undefined) fail(["ARCHITECTURE.md has no map (a fenced block)"]);

// The map's directories and the file names each line gives them.
const named = new Map();
let dir = null;
for (const line of map.split("\n")) {
  const start = /^\s*((?:src|pkg|wit)(?:\/[\w.-]+)*\/)(?=\s|$)/.exec(line);
  if (start) dir = start[1];
  else if (!/^\s{4,}\S/.test(line)) dir = null;
  if (dir === null) continue;
  const rest = start ? line.slice(start.index + start[0].length) : line;
  const names = named.get(dir) ?? new Set();
  for (const m of rest.replace(/\([^)]*\)/g, " ").matchAll(/(?:^|[\s,])(\*\.(?:rs|js|wit|lua)|[\w.-]+\.(?:rs|js|mjs|cjs|wit|lua))(?=[\s,;:]|$)/g)) {
    names.add(m[1]);
  }
  named.set(dir, names);
}

// The tree's source files, by directory.
const tree = new Map();
function walk(rel) {
  for (const entry of readdirSync(join(root, rel))) {
    if (SKIP.has(entry)) continue;
    const path = `${rel}${entry}`;
    if (statSync(join(root, path)).isDirectory()) walk(`${path}/`);
    else if (KINDS.test(entry) && !entry.endsWith(".d.ts")) {
      if (!tree.has(rel)) tree.set(rel, new Set());
      tree.get(rel).add(entry);
    }
  }
}
walk("src/");
walk("wit/");
walk("pkg/");

const problems = [];
for (const [d, files] of tree) {
  const names = named.get(d);
  if (names === undefined) {
    problems.push(`${d} (${[...files].join(", ")}) is not in the map`);
    continue;
  }
  for (const f of files) {
    const kind = `*${f.slice(f.lastIndexOf("."))}`;
    if (!names.has(f) && !names.has(kind)) problems.push(`${d}${f} is not in the map`);
  }
}
for (const [d, names] of named) {
  const files = tree.get(d) ?? new Set();
  for (const n of names) {
    if (n.startsWith("*")) {
      if (![...files].some((f) => f.endsWith(n.slice(1)))) problems.push(`the map's ${d}${n} names no file`);
    } else if (!files.has(n)) problems.push(`the map names ${d}${n}, which does not exist`);
  }
}
if (problems.length > 0) fail(problems);
console.log(`ARCHITECTURE.md's map names all ${[...tree.values()].reduce((n, s) => n + s.size, 0)} source files in ${tree.size} directories`);

function fail(lines) {
  console.error(`ARCHITECTURE.md's map and the tree differ:\n  ${lines.join("\n  ")}`);
  process.exit(1);
}
