// The README's summary of the latest full run, from results/latest.json (bench/lib/summary.mjs
// renders it; bench/run.mjs calls the same after a full run).
//
//   node bench/summary.mjs           rewrite the section of bench/README.md between its markers
//   node bench/summary.mjs --check   exit 1 when that section is not what results/latest.json gives
//   node bench/summary.mjs --print   print the section, touch nothing
//
// Needs only node (no npm packages), so `make lint` can run the check on a fresh checkout.
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { BEGIN, END, currentSummary, sectionText, summaryMarkdown, withSummary } from "./lib/summary.mjs";

const HERE = dirname(fileURLToPath(import.meta.url));
const README = join(HERE, "README.md");
const LATEST = join(HERE, "results/latest.json");
const args = process.argv.slice(2);
const unknown = args.filter((a) => a !== "--check" && a !== "--print");
if (unknown.length) {
  console.error(`bench/summary.mjs: unknown argument ${unknown.join(" ")} (usage: node bench/summary.mjs [--check | --print])`);
  process.exit(2);
}

const results = JSON.parse(readFileSync(LATEST, "utf8"));
if (args.includes("--print")) {
  process.stdout.write(summaryMarkdown(results));
  process.exit(0);
}
const expected = sectionText(results);
const readme = readFileSync(README, "utf8");
const found = currentSummary(readme);
if (found === null) {
  console.error(`bench/README.md: the summary markers are missing or out of order; the section must sit between\n  ${BEGIN}\n  ${END}`);
  process.exit(1);
}

if (args.includes("--check")) {
  if (found === expected) process.exit(0);
  const want = expected.split("\n");
  const have = found.split("\n");
  let i = 0;
  while (i < want.length && want[i] === have[i]) i++;
  const at = readme.slice(0, readme.indexOf(BEGIN)).split("\n").length + 1 + i;
  console.error(
    [
      "bench/README.md: the summary of the latest full run is not what bench/results/latest.json gives",
      "(edited by hand, or the results changed without the README being rewritten).",
      `First difference, README line ${at}:`,
      `  README:       ${have[i] ?? "(section ends)"}`,
      `  latest.json:  ${want[i] ?? "(section ends)"}`,
      "Rewrite it with `node bench/summary.mjs` (a full `make bench` does it too); text that is not",
      "from the run belongs outside the markers.",
    ].join("\n"),
  );
  process.exit(1);
}

if (found === expected) console.error("bench/README.md: the summary is already what results/latest.json gives");
else {
  writeFileSync(README, withSummary(readme, expected));
  console.error("bench/README.md: summary rewritten from results/latest.json");
}
