// Writes pkg/README.md, the package's page on npm, from the repository's README.md, so the two
// cannot drift:
//   - the sections in REPOSITORY_ONLY (the Rust crate, the WebAssembly component, the commands
//     that build and test the repository) are left out, and a closing line sends the reader to
//     the repository's README for them;
//   - every relative link is rewritten to resolve from pkg/ (`docs/api.md` becomes
//     `../docs/api.md`, `pkg/stores/README.md` becomes `stores/README.md`), and a link to a
//     heading of a left-out section points into the repository's README;
//   - a comment under the title says where the page comes from.
// Every relative link of README.md must name a file or directory that exists, and every
// `#anchor` a heading of the file it points into (GitHub's anchors: lower case, punctuation
// dropped, spaces as hyphens); the script fails otherwise, in both modes.
//
//   node scripts/generate-pkg-readme.mjs          write pkg/README.md
//   node scripts/generate-pkg-readme.mjs --check  exit 1 when pkg/README.md is not what README.md gives
//
// Needs only node (no npm packages), so scripts/lint.sh runs the check on a fresh checkout.
import { existsSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { dirname, join, posix, relative } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const SOURCE = "README.md";
const OUT = "pkg/README.md";
// The sections left out, each with how the closing line names it.
const REPOSITORY_ONLY = new Map([
  ["Rust", "the Rust crate"],
  ["WebAssembly component", "the WebAssembly component"],
  ["Development", "the commands that build and test keel-lock (`make demo`, `make test`)"],
]);

const args = process.argv.slice(2);
const unknown = args.filter((a) => a !== "--check");
if (unknown.length) {
  console.error(`generate-pkg-readme: unknown argument ${unknown.join(" ")} (usage: node scripts/generate-pkg-readme.mjs [--check])`);
  process.exit(2);
}

function fail(message) {
  console.error(`generate-pkg-readme: ${message}`);
  process.exit(1);
}

/** Each line of `text` with whether it lies inside a fenced code block (the fences included). */
function fenced(text) {
  let inside = false;
  return text.split("\n").map((line) => {
    const fence = /^\s*```/.test(line);
    const code = inside || fence;
    if (fence) inside = !inside;
    return { line, code };
  });
}

/** GitHub's anchors for the headings of `text`, a repeated one numbered -1, -2, … */
function anchors(text) {
  const seen = new Map();
  const out = new Set();
  for (const { line, code } of fenced(text)) {
    const heading = !code && /^#{1,6} +(.*?) *#* *$/.exec(line);
    if (!heading) continue;
    const base = heading[1]
      .toLowerCase()
      .replace(/[^\p{L}\p{M}\p{N}\s_-]/gu, "")
      .replace(/\s/g, "-");
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

const anchorsOf = new Map();
function anchorsOfFile(path) {
  if (!anchorsOf.has(path)) anchorsOf.set(path, anchors(readFileSync(join(ROOT, path), "utf8")));
  return anchorsOf.get(path);
}

/**
 * `text` with each inline link target outside code replaced by `rewrite(target, where)`. Code
 * spans are left alone; a link whose text is code (`[`x`](y)`) keeps its target outside them.
 */
function mapLinks(text, rewrite) {
  return fenced(text)
    .map(({ line, code }, i) => {
      if (code) return line;
      return line
        .split(/(`[^`]*`)/)
        .map((part, j) => (j % 2 === 1 ? part : part.replace(/\]\(([^)\s]+)\)/g, (_, target) => `](${rewrite(target, `${SOURCE}:${i + 1}`)})`)))
        .join("");
    })
    .join("\n");
}

const source = readFileSync(join(ROOT, SOURCE), "utf8");
if (!source.endsWith("\n")) fail(`${SOURCE} does not end with a newline`);
if (!source.startsWith("# ")) fail(`${SOURCE} does not start with its title`);

// The page in sections: everything before the first `## ` heading, then one per `## ` heading.
const sections = [];
let current = { title: null, lines: [] };
for (const { line, code } of fenced(source.slice(0, -1))) {
  const heading = !code && /^## +(.*)$/.exec(line);
  if (heading) {
    sections.push(current);
    current = { title: heading[1], lines: [] };
  }
  current.lines.push(line);
}
sections.push(current);
for (const title of REPOSITORY_ONLY.keys()) {
  if (!sections.some((s) => s.title === title)) fail(`${SOURCE} has no section "## ${title}" (REPOSITORY_ONLY in this script names it)`);
}
const kept = sections.filter((s) => !REPOSITORY_ONLY.has(s.title));
const leftOut = sections.filter((s) => REPOSITORY_ONLY.has(s.title));
const keptText = kept.map((s) => s.lines.join("\n")).join("\n").replace(/\n+$/, "");

const keptAnchors = anchors(keptText);
const sourceAnchors = anchors(source);

/** A link target of README.md checked, and rewritten to resolve from pkg/. */
function fromPkg(target, where) {
  if (/^[a-z][a-z0-9+.-]*:/i.test(target)) return target; // https:, mailto:
  const hash = target.indexOf("#");
  const path = hash === -1 ? target : target.slice(0, hash);
  const anchor = hash === -1 ? null : target.slice(hash + 1);
  if (path === "") {
    if (!sourceAnchors.has(anchor)) fail(`${where}: #${anchor} is no heading of ${SOURCE}`);
    return keptAnchors.has(anchor) ? target : `../${SOURCE}#${anchor}`;
  }
  const resolved = posix.normalize(path);
  if (resolved.startsWith("../") || !existsSync(join(ROOT, resolved))) fail(`${where}: ${path} does not exist in the repository`);
  if (anchor !== null) {
    if (!resolved.endsWith(".md") || statSync(join(ROOT, resolved)).isDirectory()) fail(`${where}: ${target} has an anchor but is no Markdown file`);
    if (!anchorsOfFile(resolved).has(anchor)) fail(`${where}: #${anchor} is no heading of ${resolved}`);
  }
  const rewritten = relative(dirname(join(ROOT, OUT)), join(ROOT, resolved)).split("\\").join("/");
  return anchor === null ? rewritten : `${rewritten}#${anchor}`;
}

// Every link is checked on the whole of README.md (so a failure names its line there; the
// left-out sections are checked too, README.md being one page on GitHub), then rewritten.
mapLinks(source, fromPkg);
const named = leftOut.map((s) => REPOSITORY_ONLY.get(s.title));
const [title, ...rest] = mapLinks(keptText, fromPkg).split("\n");
const generated = [
  title,
  `<!-- Generated from ${SOURCE} by scripts/generate-pkg-readme.mjs; do not edit. Edit ${SOURCE}, then run`,
  `     \`node scripts/generate-pkg-readme.mjs\`; scripts/lint.sh fails while this file is not what it gives. -->`,
  ...rest,
  "",
  `The repository's [README](../${SOURCE}) also covers ${named.length > 1 ? `${named.slice(0, -1).join(", ")} and ${named.at(-1)}` : named[0]}.`,
  "",
].join("\n");

const path = join(ROOT, OUT);
let existing = null;
try {
  existing = readFileSync(path, "utf8");
} catch {}
if (args.includes("--check")) {
  if (existing === generated) process.exit(0);
  fail(
    existing === null
      ? `${OUT} is missing; write it with \`node scripts/generate-pkg-readme.mjs\``
      : `${OUT} is not what ${SOURCE} gives (${SOURCE} changed without regenerating, or ${OUT} was edited); rewrite it with \`node scripts/generate-pkg-readme.mjs\``,
  );
}
if (existing === generated) console.error(`${OUT} is already what ${SOURCE} gives`);
else {
  writeFileSync(path, generated);
  console.error(`wrote ${OUT}: ${SOURCE} without its ${leftOut.map((s) => `"${s.title}"`).join(", ")} sections`);
}
