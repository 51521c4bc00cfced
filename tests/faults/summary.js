// One table for every fault run under a results folder: the OS-process suite's rows
// (summary.json, from run.js), workerd's (workers/summary.json, from workers.js) and the
// component's on a failing wasi:keyvalue host (component.jsonl, from tests/component-host). One
// line per store × primitive × fault with its correct runs summed and the broken stores it
// caught, then the totals. Printed, and written to all.md in the folder.
//   node summary.js <results folder>
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const dir = process.argv[2];
if (!dir) {
  console.error("usage: node summary.js <results folder>");
  process.exit(2);
}

const rows = [];
const readJson = (file) => (existsSync(file) ? JSON.parse(readFileSync(file, "utf8")) : []);
rows.push(...readJson(join(dir, "summary.json")));
rows.push(...readJson(join(dir, "workers", "summary.json")));
const component = join(dir, "component.jsonl");
if (existsSync(component)) {
  for (const line of readFileSync(component, "utf8").split("\n")) if (line.trim()) rows.push(JSON.parse(line));
}
if (rows.length === 0) {
  console.error(`no fault runs found under ${dir}`);
  process.exit(1);
}

const groups = new Map();
for (const r of rows) {
  const primitive = r.primitive ?? "lock";
  const id = `${r.store}\u0000${primitive}\u0000${r.scenario}`;
  if (!groups.has(id)) groups.set(id, { store: r.store, primitive, scenario: r.scenario, correct: [], broken: [] });
  groups.get(id)[r.variant === "correct" ? "correct" : "broken"].push(r);
}
const sum = (list, k) => list.reduce((n, r) => n + (r[k] ?? 0), 0);
const kindsOf = (list) => [...new Set(list.flatMap((r) => r.kinds ?? []))];
const lines = [
  "| store | primitive | fault | correct runs | seconds | operations | faults injected | violations | losses | broken stores caught |",
  "|---|---|---|---:|---:|---:|---:|---:|---:|---|",
];
for (const g of groups.values()) {
  const violations = sum(g.correct, "violations");
  const kinds = kindsOf(g.correct);
  const missed = g.broken.filter((b) => !(b.violations > 0));
  const variants = [...new Set(g.broken.map((b) => b.variant))].join(", ");
  const caught = g.broken.length ? `${g.broken.length - missed.length}/${g.broken.length} (${variants})` : "–";
  lines.push(
    `| ${g.store} | ${g.primitive} | ${g.scenario} | ${g.correct.length} | ${Math.round(sum(g.correct, "seconds"))} | ` +
      `${sum(g.correct, "operations")} | ${sum(g.correct, "faults")} | ${violations}${kinds.length ? ` (${kinds.join(", ")})` : ""} | ` +
      `${sum(g.correct, "losses")} | ${caught} |`,
  );
}
const correct = rows.filter((r) => r.variant === "correct");
const broken = rows.filter((r) => r.variant !== "correct");
const totals =
  `Correct stores: ${sum(correct, "operations")} operations, ${sum(correct, "faults")} faults injected, ` +
  `${sum(correct, "violations")} violations, ${sum(correct, "losses")} losses, in ${correct.length} runs. ` +
  `Broken stores caught in ${broken.filter((r) => r.violations > 0).length} of ${broken.length} runs.`;
const text = `${lines.join("\n")}\n\n${totals}\n`;
writeFileSync(join(dir, "all.md"), text);
console.log(`\n${text}`);
process.exit(correct.some((r) => r.violations > 0) || broken.some((r) => !(r.violations > 0)) ? 1 : 0);
