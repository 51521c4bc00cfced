// Checks the histories a fault run saved again (after a change to the checker, say):
//   node recheck.js <results folder>/<store>-<scenario>-<variant> [...]
// Prints each run's verdict; exits non-zero when a run of the correct store has violations or a
// run of a broken store (a folder not ending in -correct) has none.
import { readdirSync, readFileSync } from "node:fs";
import { basename, join } from "node:path";
import { judge } from "./lib/judge.js";

let failed = false;
for (const dir of process.argv.slice(2)) {
  const history = [];
  for (const file of readdirSync(dir).filter((f) => f.endsWith(".jsonl")).sort()) {
    for (const line of readFileSync(join(dir, file), "utf8").split("\n")) {
      if (!line) continue;
      try {
        const e = JSON.parse(line);
        if (e.client === -1) e.client = 0xffffffff;
        history.push(e);
      } catch {
        // a line cut short by SIGKILL
      }
    }
  }
  const report = judge(history, basename(dir).startsWith("etcd-") ? "etcd" : null, { maxReported: 5 });
  const correct = basename(dir).endsWith("-correct");
  const missed = !correct && report.violationCount === 0;
  if ((correct && !report.ok) || missed) failed = true;
  console.log(
    `${basename(dir)}: ${report.operations} operations, ${report.violationCount} violations, ${report.lossCount} losses` +
      (missed ? " (a broken store, not caught)" : ""),
  );
  for (const v of report.violations) console.log(`  ${v.kind} on ${v.key}: ${v.message}`);
}
process.exit(failed ? 1 : 0);
