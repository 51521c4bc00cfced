// The fault suite's Workers scenarios: the Durable Object store and keel-lock/sql on D1, in real
// workerd through Miniflare, with the Worker (workers/lock-worker.js) bundled by wrangler from
// the packed package. Every history goes through checkHistory from keel-lock/testing.
//
//   node workers.js [--soak] [--seconds N] [--results DIR] [--only do|d1|do:restart|d1:crash|d1:errors]
//
// Default (make test): each scenario for 6 s and its own broken variant for 3 s, which must be
// caught in that one run. --soak: every broken variant for 6 s, each of which must be caught,
// `--seconds` (default 120) shared among the correct runs. Each run's history (JSON lines),
// report.json and workerd's output, and summary.md / summary.json, go under the results folder.
//
// Clients are async loops in this process, each bound to one Worker script; one lock operation
// is one request (acquire — immediate or waiting with a timeout —, extend, release, a stranger's
// release/extend, a fenced write), and a hold travels between requests, and between scripts, as
// its serialize() string. Events are stamped here, before the request is sent and after its
// answer arrived, on this process's clock: the one clock every client shares. The stores judge
// expiry by the same machine's clock (the Durable Object's Date.now(), D1's SQLite now), and the
// checker's 5 ms tolerance covers workerd's coarse timers. A request that fails is an unknown
// outcome (`info`).
//
// Scenarios:
//   do/restart  two Worker scripts bound to one LockDurableObject namespace; a quarter into the
//               run (into each 15 s of a soak), the keys' lock objects are reset (their waiters
//               fall back to polling); halfway, with requests waiting in an object's queue and
//               holds open, the workerd runtime is restarted on the same persist directory
//               (Miniflare disposed, which SIGKILLs workerd, and a new one started): every
//               request in flight fails. A lease taken (30 s TTL) just before the restart must
//               be refused to each client's first attempt after it, and then released by its
//               owner.
//   d1/crash    three Worker scripts on one D1 database; a quarter of the holds on the last key
//               are abandoned (acquired, never released): the key must be free again by TTL.
//   d1/errors   the same, with a tenth of the D1 calls failing at the binding, half before the
//               statement reaches D1 and half after it ran.
// Each must give 0 violations with the correct store and ≥ 1 with its own broken variant: the
// restart against a runtime without persistence (it forgets rows and fence counters, while the
// history still calls the store persistent), crash against a store that ignores the TTL, errors
// against owner-blind release. A soak also runs owner-blind, no-expiry and fence-reuse Workers
// against every scenario. In every run a probe also takes a key of its own, lets a stranger try
// to release it, abandons the lease, and asks again only once that lease has certainly run out:
// a store that never expires is refused to it in plain sight, whatever failing calls leave the
// shared keys possibly held.
import { execFileSync } from "node:child_process";
import { appendFileSync, cpSync, createWriteStream, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Miniflare } from "miniflare";
import { checkHistory } from "keel-lock/testing";
import { generator } from "./workers/random.js";

const here = dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const flag = (name) => args.includes(name);
const value = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : fallback;
};
const soak = flag("--soak");
const only = value("--only", null);
const resultsDir = value(
  "--results",
  join(here, "results", soak ? `workers-soak-${new Date().toISOString().replace(/[:.]/g, "-")}` : "workers-short"),
);
const COMPAT_DATE = "2026-04-26";
const TTL_MS = 300;
const ACROSS_TTL_MS = 30_000;
const RESTART = 0xffffffff; // the client number of the runner's own events
const PROBE = 0xfffffffe; // the probe's

const SCENARIOS = {
  "do:restart": { store: "do", scripts: 2, restart: true, broken: "no-persist" },
  "d1:crash": { store: "d1", scripts: 3, abandonLast: 0.25, broken: "no-expiry" },
  "d1:errors": { store: "d1", scripts: 3, errorRate: 0.1, broken: "owner-blind" },
};
const WORKER_VARIANTS = ["owner-blind", "no-expiry", "fence-reuse"];

const runs = [];
for (const [name, s] of Object.entries(SCENARIOS)) {
  if (only && only !== s.store && only !== name) continue;
  runs.push({ name, variant: "correct" });
  const variants = soak ? [...new Set([s.broken, ...WORKER_VARIANTS])] : [s.broken];
  for (const variant of variants) runs.push({ name, variant });
}
const correctRuns = runs.filter((r) => r.variant === "correct").length;
const soakSeconds = Number(value("--seconds", 120));
const CORRECT_MS = soak ? Math.max(6_000, Math.floor((soakSeconds * 1000) / Math.max(1, correctRuns))) : 6_000;
const BROKEN_MS = soak ? 6_000 : 3_000;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const now = () => performance.timeOrigin + performance.now();

// ---------------------------------------------------------------------------------------------
// The Worker, bundled once from the installed package (wrangler honours its `workerd` condition).

const scratch = mkdtempSync(join(tmpdir(), "keel-lock-faults-workers-"));
process.on("exit", () => rmSync(scratch, { recursive: true, force: true }));
for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"]) process.once(signal, () => process.exit(130));

function bundle() {
  const root = join(scratch, "build");
  mkdirSync(root, { recursive: true });
  symlinkSync(join(here, "node_modules"), join(root, "node_modules"));
  cpSync(join(here, "workers"), join(root, "src"), { recursive: true });
  const out = join(root, "out");
  execFileSync(
    join(here, "node_modules", ".bin", "wrangler"),
    ["deploy", "--dry-run", "--outdir", out, "src/lock-worker.js", "--name", "lock-worker", "--compatibility-date", COMPAT_DATE],
    {
      cwd: root,
      env: { ...process.env, WRANGLER_SEND_METRICS: "false", CLOUDFLARE_CF_FETCH_ENABLED: "false", NO_COLOR: "1" },
      stdio: ["ignore", "ignore", "inherit"],
    },
  );
  return out;
}

const modulesRules = [
  { type: "ESModule", include: ["**/*.js", "**/*.mjs"] },
  { type: "CompiledWasm", include: ["**/*.wasm"] },
];

/**
 * One workerd runtime with `scripts` copies of the Worker; answers a client of it. workerd's own
 * output goes to `log`.
 */
async function startRuntime({ out, store, scripts, variant, errorRate, seed, persist, log }) {
  const names = Array.from({ length: scripts }, (_, i) => String.fromCharCode(97 + i)); // a, b, c
  const mf = new Miniflare({
    handleRuntimeStdio(stdout, stderr) {
      const file = createWriteStream(log, { flags: "a" });
      stdout.pipe(file, { end: false });
      stderr.pipe(file, { end: false });
    },
    durableObjectsPersist: persist,
    d1Persist: persist,
    workers: names.map((name, i) => ({
      name,
      modules: true,
      modulesRules,
      modulesRoot: out,
      scriptPath: join(out, "lock-worker.js"),
      compatibilityDate: COMPAT_DATE,
      bindings: { STORE: store, VARIANT: variant, ERROR_RATE: String(errorRate), SEED: String(seed * 10 + i) },
      durableObjects:
        i === 0
          ? {
              LOCKS: { className: "LockDurableObject", useSQLite: true },
              RESOURCE: { className: "FencedResource", useSQLite: true },
            }
          : {
              LOCKS: { className: "LockDurableObject", scriptName: names[0], useSQLite: true },
              RESOURCE: { className: "FencedResource", scriptName: names[0], useSQLite: true },
            },
      d1Databases: { DB: "keel-lock-faults" },
    })),
  });
  await mf.ready;
  const fetchers = new Map();
  for (const name of names.slice(1)) fetchers.set(name, await mf.getWorker(name));
  return {
    names,
    /** POSTs `body` to `path` on Worker `script`; rejects with the Worker's error or the runtime's. */
    async call(script, path, body) {
      const init = { method: "POST", body: JSON.stringify(body) };
      const url = `http://keel.test${path}`;
      const res = script === names[0] ? await mf.dispatchFetch(url, init) : await fetchers.get(script).fetch(url, init);
      const text = await res.text();
      let json;
      try {
        json = JSON.parse(text);
      } catch {
        throw new Error(`${script} ${path}: HTTP ${res.status}: ${text.slice(0, 200)}`);
      }
      if (res.status !== 200) throw new Error(`${script} ${path}: ${json.error ?? res.status}`);
      return json;
    },
    dispose: () => mf.dispose(),
  };
}

// ---------------------------------------------------------------------------------------------
// One run: clients against one runtime, the scenario's faults, the checker's verdict.

async function runOne(out, { name, variant }, seed) {
  const s = SCENARIOS[name];
  const label = `${name.replace(":", "-")}-${variant}`;
  const dir = join(resultsDir, label);
  mkdirSync(dir, { recursive: true });
  const historyFile = join(dir, "history.jsonl");
  writeFileSync(historyFile, "");
  const durationMs = variant === "correct" ? CORRECT_MS : BROKEN_MS;
  const persistDir = mkdtempSync(join(scratch, "persist-"));
  const persist = variant === "no-persist" ? false : persistDir;
  const workerVariant = WORKER_VARIANTS.includes(variant) ? variant : "correct";
  const options = { out, store: s.store, scripts: s.scripts, variant: workerVariant, errorRate: s.errorRate ?? 0, seed, persist, log: join(dir, "workerd.log") };

  const history = [];
  const record = (event) => {
    const t = event.t0 ?? now();
    const e = { ...event, t0: t, t1: event.t1 ?? t };
    history.push(e);
    appendFileSync(historyFile, JSON.stringify(e) + "\n");
  };

  // The runtime: `up` resolves while it serves; a restart swaps it.
  let rt = await startRuntime(options);
  let up = Promise.resolve();
  await rt.call(rt.names[0], "/setup", {});
  const names = rt.names;
  // The scripts share one store: a key held through the first is refused through every other
  // (each call tried again while it fails, for the runs that inject failures).
  const shared = { key: `${label}:shared`, ttlMs: 60_000, timeout: 0 };
  const persistently = async (script) => {
    for (let attempt = 1; ; attempt++) {
      try {
        return await rt.call(script, "/acquire", shared);
      } catch (error) {
        if (attempt === 20) throw error;
      }
    }
  };
  const held = await persistently(names[0]);
  for (const other of names.slice(1)) {
    const seen = await persistently(other);
    if (!held.ok || seen.ok) throw new Error(`Worker scripts ${names[0]} and ${other} do not share one lock store`);
  }
  const keys = [0, 1].map((k) => `${label}:${k}`);
  const CLIENTS = 12;
  const stats = { requests: 0, infos: 0, failedAtRestart: 0, resets: [], restarts: [], abandoned: 0, takeovers: 0, acrossRefused: 0 };
  const waiting = new Set(); // owners of waiting acquires in flight
  const holding = new Set(); // owners holding, from the grant until their release answered
  const abandonedKeys = new Set(); // keys whose last hold was abandoned, not yet granted again
  let restarting = false;
  let generation = 0; // runtime restarts so far; after each, every client tries that restart's `across` key once
  let triedAcross = 0;
  const acrossKey = (g) => `${label}:across${g}`;
  let labels = 0;
  const end = now() + durationMs;

  const call = async (script, path, body, limitMs) => {
    stats.requests++;
    const runtime = rt;
    let timer;
    const limit = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${path}: no answer within ${limitMs} ms`)), limitMs);
    });
    try {
      return await Promise.race([runtime.call(script, path, body), limit]);
    } catch (error) {
      if (runtime !== rt || restarting) stats.failedAtRestart++;
      throw error;
    } finally {
      clearTimeout(timer);
    }
  };

  // One recorded operation: invoke, then ok / fail / info (an error: the outcome is unknown).
  const op = async (client, opName, key, owner, ttlMs, immediate, run) => {
    record({ client, key, owner, type: "invoke", op: opName, ttlMs, immediate });
    try {
      const answer = await run();
      record({ client, key, owner, type: answer.ok ? "ok" : "fail", op: opName, fence: answer.fence ?? null });
      return answer;
    } catch (error) {
      stats.infos++;
      record({ client, key, owner, type: "info", op: opName, error: String(error?.message ?? error).slice(0, 200) });
      return null;
    }
  };

  const client = async (c) => {
    const random = generator(seed * 104729 + c);
    const home = names[c % names.length];
    const elsewhere = () => (random() < 0.5 ? home : names[Math.floor(random() * names.length)]);
    let seenGeneration = 0;
    while (now() < end) {
      await up;
      if (now() >= end) break;
      // After a restart, each client's first round is an immediate acquire of the key held across it.
      const acrossTurn = seenGeneration < generation;
      seenGeneration = generation;
      const key = acrossTurn ? acrossKey(generation) : keys[Math.floor(random() * keys.length)];
      const roll = random();
      if (!acrossTurn && roll < 0.04) {
        const opName = roll < 0.02 ? "release" : "extend";
        await op(c, opName, key, `stranger:${labels++}`, TTL_MS, false, () => call(home, "/stranger", { op: opName, key, ttlMs: TTL_MS }, 15_000));
        continue;
      }
      // Waiting acquires only on the first key; on the others every refusal is one store call,
      // so a key left held for ever shows up as refusals while certainly free.
      const immediate = key !== keys[0] || random() < 0.6;
      const owner = `c${c}:${labels++}`;
      const timeout = immediate ? 0 : TTL_MS;
      if (!immediate) waiting.add(owner);
      const got = await op(c, "acquire", key, owner, TTL_MS, immediate, () => call(home, "/acquire", { key, ttlMs: TTL_MS, timeout }, timeout + 15_000));
      waiting.delete(owner);
      if (acrossTurn) {
        triedAcross++;
        if (got && !got.ok) stats.acrossRefused++;
      }
      if (!got?.ok) {
        await sleep(random() * 3);
        continue;
      }
      if (abandonedKeys.delete(key)) stats.takeovers++; // the first grant after an abandoned hold
      holding.add(owner);
      record({ client: c, key, owner, type: "enter" });
      const t0 = now();
      try {
        const { accepted } = await call(elsewhere(), "/write", { key, fence: got.fence }, 15_000);
        record({ client: c, key, owner, type: "write", t0, t1: now(), fence: got.fence, accepted });
      } catch {
        // the write's outcome is unknown: not recorded
      }
      const fate = random();
      await sleep(random() * 15);
      const { serialized } = got;
      if (fate < 0.15) {
        await op(c, "extend", key, owner, TTL_MS, false, () => call(elsewhere(), "/extend", { serialized, ttlMs: TTL_MS }, 15_000));
      }
      record({ client: c, key, owner, type: "exit" });
      const abandon = key === keys[keys.length - 1] && s.abandonLast ? fate > 1 - s.abandonLast : fate > 0.97;
      if (abandon) {
        // The client goes away holding the lock: only the TTL frees the key.
        stats.abandoned++;
        abandonedKeys.add(key);
        holding.delete(owner);
        continue;
      }
      await op(c, "release", key, owner, 0, false, () => call(elsewhere(), "/release", { serialized }, 15_000));
      holding.delete(owner);
    }
  };

  // The probe: its own key, asked for (immediately) only once its last lease has certainly run
  // out, so every answer is decided while the key is certainly free.
  const prober = async () => {
    const key = `${label}:probe`;
    while (now() < end - TTL_MS) {
      await up;
      const owner = `probe:${labels++}`;
      const got = await op(PROBE, "acquire", key, owner, TTL_MS, true, () =>
        call(names[0], "/acquire", { key, ttlMs: TTL_MS, timeout: 0 }, 15_000),
      );
      if (got?.ok) {
        record({ client: PROBE, key, owner, type: "enter" });
        await op(PROBE, "release", key, `stranger:${labels++}`, TTL_MS, false, () =>
          call(names[names.length - 1], "/stranger", { op: "release", key, ttlMs: TTL_MS }, 15_000),
        );
        record({ client: PROBE, key, owner, type: "exit" });
      }
      // Past the TTL (and the checker's tolerance) from this answer, whatever it was.
      await sleep(TTL_MS + 50);
    }
  };

  // Waits (at most 5 s) until a request waits in a queue and a hold is open; answers who.
  const active = async () => {
    const bound = now() + 5_000;
    while ((waiting.size === 0 || holding.size === 0) && now() < bound) await sleep(2);
    return { waiting: [...waiting], holding: holding.size };
  };
  // Each cycle (the whole run, or about 15 s of a longer one): a quarter in, the keys' lock objects are reset
  // (queues and open calls lost, storage kept); halfway, the runtime is restarted, just after a
  // lease with a long TTL was taken, which its owner releases once every client has tried it.
  const faults = async () => {
    if (!s.restart) return;
    const cycles = Math.max(1, Math.floor(durationMs / 15_000));
    const cycle = durationMs / cycles;
    for (let at = now(); at + cycle / 2 < end; at += cycle) {
      await sleep(Math.max(0, at + cycle / 4 - now()));
      const resetAt = await active();
      const t0 = now();
      for (const key of keys) await call(names[1], "/reset", { key }, 15_000).catch(() => {});
      record({ client: RESTART, type: "restart", t0, t1: now(), persistent: true });
      stats.resets.push(resetAt);

      await sleep(Math.max(0, at + cycle / 2 - now()));
      const g = generation + 1;
      const across = await op(RESTART, "acquire", acrossKey(g), "across" + g, ACROSS_TTL_MS, true, () =>
        call(names[0], "/acquire", { key: acrossKey(g), ttlMs: ACROSS_TTL_MS, timeout: 0 }, 15_000),
      );
      const restartAt = await active();
      let serve;
      up = new Promise((resolve) => (serve = resolve));
      restarting = true;
      const r0 = now();
      await rt.dispose();
      rt = await startRuntime(options);
      record({ client: RESTART, type: "restart", t0: r0, t1: now(), persistent: true });
      restarting = false;
      triedAcross = 0;
      generation = g;
      serve();
      while (triedAcross < CLIENTS && now() < end) await sleep(5);
      let released = null;
      if (across?.ok) {
        const answer = await op(RESTART, "release", acrossKey(g), "across" + g, 0, false, () =>
          call(names[names.length - 1], "/release", { serialized: across.serialized }, 15_000),
        );
        released = answer?.ok ?? null;
      }
      stats.restarts.push({ ...restartAt, ms: Math.round(now() - r0), acrossReleased: released });
    }
  };

  let clientError = null;
  const clients = Array.from({ length: CLIENTS }, (_, c) => client(c).catch((e) => (clientError ??= e)));
  await Promise.all([...clients, prober().catch((e) => (clientError ??= e)), faults().catch((e) => (clientError ??= e))]);
  await rt.dispose();
  rmSync(persistDir, { recursive: true, force: true });

  const report = checkHistory(history, { maxReported: 20 });
  // How the waiters in flight at each reset and restart ended: ok or fail (they went on, by
  // polling), or info (the request failed).
  const outcome = new Map();
  for (const e of history) if (e.op === "acquire" && e.type !== "invoke") outcome.set(e.owner, e.type);
  const ended = (owners) => {
    const n = { ok: 0, fail: 0, info: 0 };
    for (const o of owners) n[outcome.get(o) ?? "info"]++;
    return n;
  };
  for (const f of [...stats.resets, ...stats.restarts]) f.waiting = ended(f.waiting);
  const grants = history.filter((e) => e.type === "ok" && e.op === "acquire").length;
  const injected = history.filter((e) => e.type === "info" && /injected/.test(e.error ?? "")).length;
  const staleRefused = history.filter((e) => e.type === "write" && !e.accepted).length;
  const row = {
    store: s.store === "do" ? "Durable Object" : "D1",
    scenario: name.split(":")[1],
    variant,
    seconds: Math.round(durationMs / 100) / 10,
    scripts: s.scripts,
    clients: CLIENTS,
    operations: report.operations,
    grants,
    faults: stats.resets.length + stats.restarts.length + injected + stats.abandoned,
    injected,
    staleRefused,
    ...stats,
    violations: report.violationCount,
    kinds: [...new Set(report.violations.map((v) => v.kind))],
    losses: report.lossCount,
  };
  writeFileSync(join(dir, "report.json"), JSON.stringify({ ...row, report }, null, 2));
  const problems = [];
  if (clientError) problems.push(`a client failed: ${clientError?.stack ?? clientError}`);
  if (grants === 0) problems.push("no acquisition was granted");
  if (variant === "correct") {
    if (report.violationCount > 0) problems.push(`${report.violationCount} violations: ${report.violations.slice(0, 3).map((v) => `${v.kind}: ${v.message}`).join(" | ")}`);
    if (s.restart) {
      const busy = (f) => f.holding > 0 && f.waiting.ok + f.waiting.fail + f.waiting.info > 0;
      if (stats.restarts.length === 0) problems.push("the runtime was not restarted");
      if (!stats.resets.every(busy) || !stats.restarts.every(busy)) problems.push(`a reset or restart found no waiter or no holder: ${JSON.stringify([stats.resets, stats.restarts])}`);
      if (stats.failedAtRestart === 0) problems.push("no request failed at the restart");
      if (stats.acrossRefused === 0) problems.push("no lease held across a restart was refused to anyone after it");
      if (!stats.restarts.every((r) => r.acrossReleased === true)) problems.push(`a lease held across a restart was not released by its owner: ${JSON.stringify(stats.restarts)}`);
    }
    if (s.abandonLast && stats.takeovers === 0) problems.push("no abandoned key was acquired again");
    if (s.errorRate && injected === 0) problems.push("no D1 call failed");
    if (report.lossCount > 0) problems.push("a persistent store's restart was excused as a loss");
  } else if (report.violationCount === 0) {
    problems.push(`the ${variant} store passed: this scenario cannot tell it from a correct one`);
  }
  row.problems = problems;
  return row;
}

// ---------------------------------------------------------------------------------------------

rmSync(resultsDir, { recursive: true, force: true });
mkdirSync(resultsDir, { recursive: true });
const t0 = Date.now();
const out = bundle();
console.log(`bundled the Worker in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
const rows = [];
let failed = false;
let seed = 1;
for (const run of runs) {
  const started = Date.now();
  const row = await runOne(out, run, seed++);
  rows.push(row);
  if (row.problems.length) failed = true;
  console.log(
    `${(row.problems.length ? "FAIL" : "ok").padEnd(4)} ${row.store}/${row.scenario}/${row.variant}: ${row.operations} ops, ${row.grants} grants, ` +
      `${row.faults} faults, ${row.failedAtRestart} requests failed at the restart, ${row.violations} violations${row.kinds.length ? ` (${row.kinds.join(", ")})` : ""}, ` +
      `${((Date.now() - started) / 1000).toFixed(1)} s${row.problems.length ? `\n     ${row.problems.join("\n     ")}` : ""}`,
  );
}

const table = [
  "| store | scenario | variant | seconds | Worker scripts | operations | grants | faults injected | requests failed at the restart | stale writes refused | violations |",
  "|---|---|---|---|---|---|---|---|---|---|---|",
  ...rows.map(
    (r) =>
      `| ${r.store} | ${r.scenario} | ${r.variant} | ${r.seconds} | ${r.scripts} | ${r.operations} | ${r.grants} | ${r.faults} | ${r.failedAtRestart} | ${r.staleRefused} | ${r.violations}${r.kinds.length ? ` (${r.kinds.join(", ")})` : ""} |`,
  ),
].join("\n");
writeFileSync(join(resultsDir, "summary.md"), `${table}\n`);
writeFileSync(join(resultsDir, "summary.json"), JSON.stringify(rows, null, 2));
console.log(`\n${table}\n\nhistories and reports: ${resultsDir}`);
process.exit(failed ? 1 : 0);
