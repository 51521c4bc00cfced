// The fault suite: concurrent OS processes (lib/client.js) lock with keel-lock — installed from
// the packed tarball — against real stores while this process injects faults, then every
// recorded history goes through the checker (checkHistory from keel-lock/testing).
//
//   node run.js [--soak] [--seconds N] [--results DIR] [--only STORE[:SCENARIO]]
//
// Scenarios (each against each store it applies to):
//   kill     a holder is SIGKILLed inside its critical section (and replaced)
//   stop     a holder is SIGSTOPped inside its section for 3 TTLs, then continued: its fenced
//            write must be refused
//   restart  the store is killed and started again mid-run (Redis with and without AOF, Postgres)
//   errors   a tenth of the store calls throw, half before reaching the store, half after
// Each scenario must give 0 violations with the correct store, and ≥ 1 with its own broken
// variant (owner-blind release, no expiry or fence reuse), so none passes vacuously; a soak also
// runs the other broken variants and reports whether the scenario caught them. A restart of Redis
// without AOF loses locks and fence counters: that must show up as losses, not as silence.
//
// Default (make test): fixed seeds, a few seconds per run, the correct store and each scenario's
// own broken variant. --soak: every broken variant, `--seconds` (default SOAK_SECONDS or 600)
// shared among the correct runs. Writes every history (JSON lines) and summary.md / summary.json
// under the results folder.
import { fork } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync, appendFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { checkHistory } from "keel-lock/testing";
import { schema } from "keel-lock/sql";
import { startPg, startRedis } from "./lib/servers.js";
import { prepare } from "./lib/stores.js";

const here = dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const flag = (name) => args.includes(name);
const value = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : fallback;
};
const soak = flag("--soak");
const only = value("--only", null);
const resultsDir = value("--results", join(here, "results", soak ? `soak-${new Date().toISOString().replace(/[:.]/g, "-")}` : "short"));
const TTL_MS = 300;

const SCENARIOS = {
  kill: { victim: "kill", broken: "no-expiry" },
  stop: { victim: "stop", broken: "owner-blind" },
  restart: { restart: true, broken: "fence-reuse" },
  errors: { errorRate: 0.1, broken: "owner-blind" },
};
const VARIANTS = ["owner-blind", "no-expiry", "fence-reuse"];
const MATRIX = [
  ["memory", ["errors"]],
  ["redis", ["kill", "stop", "restart", "errors"]],
  ["redis-aof", ["restart"]],
  ["sqlite", ["kill", "stop", "errors"]],
  ["pg", ["kill", "stop", "restart", "errors"]],
];

const runs = [];
for (const [store, scenarios] of MATRIX) {
  for (const scenario of scenarios) {
    if (only && only !== store && only !== `${store}:${scenario}`) continue;
    runs.push({ store, scenario, variant: "correct" });
    for (const variant of soak ? VARIANTS : [SCENARIOS[scenario].broken]) runs.push({ store, scenario, variant });
  }
}
const correctRuns = runs.filter((r) => r.variant === "correct").length;
const soakSeconds = Number(value("--seconds", process.env.SOAK_SECONDS ?? 600));
const CORRECT_MS = soak ? Math.max(5_000, Math.floor((soakSeconds * 1000) / Math.max(1, correctRuns))) : 5_000;
const BROKEN_MS = soak ? 6_000 : 3_000;

rmSync(resultsDir, { recursive: true, force: true });
mkdirSync(resultsDir, { recursive: true });
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const now = () => performance.timeOrigin + performance.now();

async function server(kind) {
  if (kind === "redis") return startRedis({ aof: false });
  if (kind === "redis-aof") return startRedis({ aof: true });
  if (kind === "pg") return startPg();
  return null;
}

function storeSpec(kind, srv, dir) {
  if (kind === "memory") return { kind: "memory" };
  if (kind === "redis" || kind === "redis-aof") return { kind: "redis", port: srv.port };
  if (kind === "sqlite") return { kind: "sqlite", path: join(dir, "locks.sqlite") };
  return { kind: "pg", url: srv.url };
}

async function runOne({ store, scenario, variant, longer = false }, seed, srv) {
  const name = `${store}-${scenario}-${variant}${longer ? "-again" : ""}`;
  const dir = join(resultsDir, name);
  mkdirSync(dir, { recursive: true });
  const s = SCENARIOS[scenario];
  const durationMs = variant === "correct" ? CORRECT_MS : longer ? 3 * BROKEN_MS : BROKEN_MS;
  const inProcess = store === "memory";
  let spec = storeSpec(store, srv, dir);
  let scratch = null;
  if (store === "sqlite") {
    scratch = mkdtempSync(join(tmpdir(), "keel-lock-faults-sqlite-"));
    spec = { ...spec, path: join(scratch, "locks.sqlite") };
  }
  if (store === "pg") {
    // A fresh schema per run: a table of its own, found through search_path.
    const schemaName = `run_${runs.indexOf(runs.find((r) => r.store === store && r.scenario === scenario && r.variant === variant))}_${seed}`;
    const { default: pg } = await import("pg");
    const c = new pg.Client({ connectionString: srv.url });
    await c.connect();
    await c.query(`CREATE SCHEMA ${schemaName}`);
    await c.end();
    spec = { ...spec, url: `${srv.url}?options=-c%20search_path%3D${schemaName}` };
  }
  await prepare(spec, schema);
  const parentHistory = join(dir, "parent.jsonl");
  writeFileSync(parentHistory, "");
  const end = Date.now() + durationMs;
  const faults = { kill: 0, stop: 0, restart: 0 };
  const procs = new Set();
  const outputs = [];
  let nextId = 0;
  let lastStop = 0;
  let victimAlive = false;

  const spawnClient = (victim) => {
    const id = nextId++;
    const config = {
      id,
      store: spec,
      variant,
      keys: 2,
      ttlMs: TTL_MS,
      holdMs: 15,
      durationMs: Math.max(500, end - Date.now()),
      seed,
      errorRate: s.errorRate ?? 0,
      clients: inProcess ? 8 : 2,
      history: join(dir, `client-${id}.jsonl`),
      keyPrefix: `${name}:`,
      victim,
    };
    const child = fork(join(here, "lib", "client.js"), [JSON.stringify(config)], { stdio: ["ignore", "pipe", "pipe", "ipc"] });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (out += d));
    const exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
    const proc = { id, child, exited, victim };
    procs.add(proc);
    if (victim) victimAlive = true;
    child.on("message", async (m) => {
      if (!m?.inside) return;
      if (victim === "kill" && Date.now() < end - 1000) {
        child.kill("SIGKILL");
        faults.kill++;
        victimAlive = false;
        return;
      }
      let stopped = false;
      if (victim === "stop" && Date.now() < end - 4 * TTL_MS && Date.now() - lastStop > TTL_MS) {
        child.kill("SIGSTOP");
        faults.stop++;
        await sleep(3 * TTL_MS);
        child.kill("SIGCONT");
        lastStop = Date.now();
        stopped = true;
      }
      if (child.connected) child.send({ go: true, stopped });
    });
    exited.then(({ code, signal }) => {
      procs.delete(proc);
      outputs.push({ id, code, signal, out, killed: victim === "kill" && signal === "SIGKILL" });
    });
    return proc;
  };

  const processes = inProcess ? 1 : 4;
  for (let i = 0; i < processes; i++) spawnClient(i === 0 && s.victim ? s.victim : null);
  const restartAt = [Date.now() + durationMs / 2];
  if (soak && s.restart) for (let t = 1; t < Math.floor(durationMs / 15_000); t++) restartAt.push(Date.now() + t * 15_000);
  restartAt.sort((a, b) => a - b);
  const hardStop = end + 30_000;
  while ((procs.size > 0 || Date.now() < end) && Date.now() < hardStop) {
    if (s.victim === "kill" && !victimAlive && Date.now() < end - 1500) spawnClient("kill");
    if (s.restart && srv && restartAt.length && Date.now() >= restartAt[0]) {
      restartAt.shift();
      const t0 = now();
      await srv.restart();
      faults.restart++;
      appendFileSync(parentHistory, JSON.stringify({ client: -1, type: "restart", t0, t1: now(), persistent: srv.persistent }) + "\n");
    }
    await sleep(20);
  }
  const hung = [...procs];
  for (const p of hung) p.child.kill("SIGKILL");
  await Promise.all(hung.map((p) => p.exited));
  await sleep(10);
  const crashed = outputs.filter((o) => !o.killed && o.code !== 0);
  if (scratch) rmSync(scratch, { recursive: true, force: true });

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
  const report = checkHistory(history, { maxReported: 20 });
  const stats = outputs.map((o) => {
    try {
      return JSON.parse(o.out.trim().split("\n").pop());
    } catch {
      return {};
    }
  });
  const sum = (k) => stats.reduce((n, x) => n + (x[k] ?? 0), 0);
  const grants = history.filter((e) => e.type === "ok" && e.op === "acquire").length;
  const injected = history.filter((e) => e.type === "info" && /injected/.test(e.error ?? "")).length;
  const staleRefused = history.filter((e) => e.type === "write" && e.afterStop && !e.accepted).length;
  const row = {
    store,
    scenario,
    variant,
    seconds: Math.round(durationMs / 100) / 10,
    processes: nextId,
    operations: report.operations,
    grants,
    faults: faults.kill + faults.stop + faults.restart + injected,
    staleRefused,
    storeErrors: sum("errors"),
    violations: report.violationCount,
    kinds: [...new Set(report.violations.map((v) => v.kind))],
    losses: report.lossCount ?? report.losses.length,
    crashed: crashed.map((c) => `client ${c.id} exited ${c.code ?? c.signal}: ${c.out.slice(-400)}`),
  };
  writeFileSync(join(dir, "report.json"), JSON.stringify({ ...row, report }, null, 2));
  // What must hold for this run to count.
  const problems = [];
  if (crashed.length) problems.push(`client processes failed: ${row.crashed.join("; ")}`);
  if (grants === 0) problems.push("no acquisition was granted");
  if (variant === "correct") {
    if (report.violationCount > 0) problems.push(`${report.violationCount} violations: ${report.violations.slice(0, 3).map((v) => `${v.kind}: ${v.message}`).join(" | ")}`);
    if (s.victim === "kill" && faults.kill === 0) problems.push("no holder was killed");
    if (s.victim === "stop" && faults.stop === 0) problems.push("no holder was stopped");
    if (s.victim === "stop" && staleRefused === 0) problems.push("no stopped holder's stale write was refused");
    if (s.restart && faults.restart === 0) problems.push("the store was not restarted");
    if (s.errorRate && injected === 0) problems.push("no store call failed");
    if (s.restart && store === "redis" && (report.lossCount ?? report.losses.length) === 0) problems.push("Redis without AOF restarted and no loss was detected");
    if (s.restart && store !== "redis" && (report.lossCount ?? report.losses.length) > 0) problems.push("a persistent store's restart was excused as a loss");
  } else if (report.violationCount === 0) {
    // The scenario's own broken variant must be caught; in a soak, the others are reported.
    const note = `the ${variant} store passed: this scenario cannot tell it from a correct one`;
    if (variant === s.broken) problems.push(note);
    else row.note = note;
  }
  row.problems = problems;
  return row;
}

const rows = [];
const servers = new Map();
let failed = false;
try {
  let seed = 1;
  for (const run of runs) {
    const kind = run.store;
    if (!servers.has(kind)) {
      for (const [k, srv] of servers) {
        if (srv) await srv.stop();
        servers.delete(k);
      }
      servers.set(kind, await server(kind));
    }
    const started = Date.now();
    let row = await runOne(run, seed++, servers.get(kind));
    // A short run of a broken store can happen to schedule no interleaving that exposes it (the
    // soak measured 37 of 39 caught at 6 s); before the scenario counts as unable to tell the
    // broken store from a correct one, it gets one run three times as long, with another seed.
    if (!soak && run.variant !== "correct" && row.violations === 0 && row.problems.length) {
      console.log(`...  ${row.store}/${row.scenario}/${row.variant}: not caught in ${row.seconds} s; once more, longer`);
      row = await runOne({ ...run, longer: true }, seed++, servers.get(kind));
    }
    rows.push(row);
    const verdict = row.problems.length ? "FAIL" : "ok";
    if (row.problems.length) failed = true;
    console.log(
      `${verdict.padEnd(4)} ${row.store}/${row.scenario}/${row.variant}: ${row.operations} ops, ${row.grants} grants, ` +
        `${row.faults} faults, ${row.violations} violations${row.kinds.length ? ` (${row.kinds.join(", ")})` : ""}, ` +
        `${row.losses} losses, ${((Date.now() - started) / 1000).toFixed(1)} s${row.problems.length ? `\n     ${row.problems.join("\n     ")}` : ""}` +
        (row.note ? `\n     (${row.note})` : ""),
    );
  }
} finally {
  for (const srv of servers.values()) if (srv) await srv.stop();
}

const table = [
  "| store | scenario | variant | seconds | processes | operations | grants | faults injected | stale writes refused | violations | losses |",
  "|---|---|---|---|---|---|---|---|---|---|---|",
  ...rows.map(
    (r) =>
      `| ${r.store} | ${r.scenario} | ${r.variant} | ${r.seconds} | ${r.processes} | ${r.operations} | ${r.grants} | ${r.faults} | ${r.staleRefused} | ${r.violations}${r.kinds.length ? ` (${r.kinds.join(", ")})` : ""} | ${r.losses} |`,
  ),
].join("\n");
writeFileSync(join(resultsDir, "summary.md"), `${table}\n`);
writeFileSync(join(resultsDir, "summary.json"), JSON.stringify(rows, null, 2));
console.log(`\n${table}\n\nhistories and reports: ${resultsDir}`);
process.exit(failed ? 1 : 0);
