// (2b) Uncontended run() on the Durable Object store in local workerd (Miniflare): keel-lock's
// DurableObjectLockStore + LockDurableObject (bench/workers/keel.js) and the plain-JS Durable
// Object floor (bench/workers/floor.js), both Workers in one Miniflare instance. A third row
// drives keel-lock's objects from a plain-JS client, to tell the client's share of a run() from
// the object's. A round is one request to a Worker doing `runs` sequential lock(key).run(() => 1)
// on one key (the same key in every round, so its object exists and is warm after the warm-up
// round). Measured inside the
// Worker (bench/workers/shared.js `uncontended`):
//   - RPCs per run(), counted on the stubs the Worker hands out (every method, by name);
//   - time per run(): the loop's performance.now() span ÷ runs;
//   - client time per run(): that span minus the time during which an RPC was pending (each
//     stub call timed from the call to its promise's settlement), ÷ runs. Runs are sequential,
//     so this is the Worker's own CPU plus its scheduling between RPC answers and next calls;
//     CPU the Worker spends while a call is in flight (after sending it) counts as RPC time.
// workerd's clocks advance during CPU work but in whole ms; the loop's span is exact to 1 ms,
// and the pending time is a sum of whole-ms differences: a tick lands in a given gap between
// RPCs with probability (gap ÷ 1 ms), so the client time is an unbiased count with a spread of
// about √(client ms) per round. Hence rounds of hundreds of runs and medians over rounds.
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { performance } from "node:perf_hooks";
import { median, round } from "./stats.mjs";
import { buildWorkers, startWorkers, COMPAT_DATE } from "./workerd.mjs";

const BENCH = join(dirname(fileURLToPath(import.meta.url)), "..");
const version = (p) => JSON.parse(readFileSync(join(BENCH, "node_modules", p, "package.json"), "utf8")).version;

export const DO_UNCONTENDED_CONTENDERS = [
  {
    name: "keel-lock (DurableObjectLockStore)",
    worker: "keel",
    settings: "lock(key, 30000).run(fn) — a fresh handle per run; the store routes each call to idFromName(key)'s LockDurableObject",
  },
  {
    name: "floor: plain-JS Durable Object lock",
    worker: "floor",
    settings: "bench/workers/floor.js — acquire RPC, fn, release RPC; one object per key, SQLite row, no alarm",
  },
  {
    name: "keel-lock's LockDurableObject, plain-JS client",
    worker: "keel",
    path: "/uncontended-plain-client",
    settings: "the same objects as keel-lock's row, driven as the floor's client drives its objects (stub.acquire, fn, stub.release; no keel-lock code in the Worker): its RPC time is keel-lock's object's, its client time a plain client's",
  },
];

/**
 * Runs section 2b. `interleave(contenders, rounds, body)` and `pairedRatio(perImpl, name, base,
 * field)` are run.mjs's, so rounds rotate and ratios pair as in every other section.
 * Answers the section's results object.
 */
export async function durableObjectUncontended({ quick, log, interleave, pairedRatio }) {
  const contenders = DO_UNCONTENDED_CONTENDERS;
  // ≈ 1 ms per keel-lock run() and ≈ 0.4 ms per floor run() on the 2-core bench machines: a
  // round of 800 runs takes about 0.3–0.8 s. Rounds vary 2× and more with the machine's load,
  // and the client time is a count of 1 ms ticks: 9 rounds for the medians.
  const RUNS = quick ? 160 : 800;
  const ROUNDS = quick ? 3 : 9;
  const key = "bench:do-uncontended";
  log("(2b) Durable Object uncontended: bundling the bench Workers from the packed package");
  buildWorkers();
  const w = await startWorkers([...new Set(contenders.map((c) => c.worker))]);
  try {
    const body = async (c) => {
      const t0 = performance.now();
      const r = await w.call(c.worker, c.path ?? "/uncontended", { key, runs: RUNS });
      const wallMs = performance.now() - t0;
      const clientMs = r.totalMs - r.awaitingMs;
      return {
        runs: r.runs,
        totalMs: r.totalMs,
        awaitingMs: r.awaitingMs,
        clientMs,
        wallMs,
        requests: r.requests,
        byMethod: r.byMethod,
        usPerRun: (r.totalMs * 1000) / r.runs,
        clientUsPerRun: (clientMs * 1000) / r.runs,
        rpcUsPerRun: (r.awaitingMs * 1000) / r.runs,
      };
    };
    // The first requests create the key's object and compile the Worker's code paths (the
    // wasm included): one unrecorded round each.
    log("(2b) Durable Object uncontended: warm-up");
    for (const c of contenders) await body(c);
    log(`(2b) Durable Object uncontended: ${ROUNDS} rounds × ${RUNS} sequential runs`);
    const per = await interleave(contenders, ROUNDS, body);
    const keel = contenders[0].name;
    return {
      measured: true,
      runtime: `local workerd through Miniflare ${version("miniflare")} (compatibility date ${COMPAT_DATE}), Workers bundled by wrangler ${version("wrangler")} from the packed package, both in one Miniflare instance`,
      runsPerRound: RUNS,
      rounds: ROUNDS,
      key,
      measuredHow:
        "inside the Worker, one request per round: time = performance.now() span of the sequential runs; RPC time = time during which a stub call was pending (call → settlement); client time = time − RPC time (the Worker's CPU and scheduling outside RPCs; CPU spent while a call is in flight counts as RPC time); workerd's clocks advance in whole ms",
      rows: contenders.map((c) => {
        const recs = per[c.name];
        const runs = recs.reduce((s, r) => s + r.runs, 0);
        const byMethod = {};
        for (const r of recs) for (const [k, v] of Object.entries(r.byMethod)) byMethod[k] = (byMethod[k] ?? 0) + v;
        return {
          impl: c.name,
          settings: c.settings,
          rpcsPerRun: round(recs.reduce((s, r) => s + r.requests, 0) / runs, 2),
          rpcsPerRunByMethod: Object.fromEntries(Object.entries(byMethod).map(([k, v]) => [k, round(v / runs, 2)])),
          usPerRun: round(median(recs.map((r) => r.usPerRun)), 1),
          clientUsPerRun: round(median(recs.map((r) => r.clientUsPerRun)), 1),
          rpcUsPerRun: round(median(recs.map((r) => r.rpcUsPerRun)), 1),
          requestWallUsPerRun: round(median(recs.map((r) => (r.wallMs * 1000) / r.runs)), 1),
          keelTimeOverThis: round(pairedRatio(per, keel, c.name, "usPerRun"), 3),
          keelMinusThisUsPerRun: round(median(per[keel].map((r, i) => r.usPerRun - recs[i].usPerRun)), 1),
          keelClientTimeOverThis: round(pairedRatio(per, keel, c.name, "clientUsPerRun"), 3),
          roundsUsPerRun: recs.map((r) => round(r.usPerRun, 1)),
          roundsClientUsPerRun: recs.map((r) => round(r.clientUsPerRun, 1)),
        };
      }),
    };
  } finally {
    await w.dispose();
  }
}

/** The section's markdown lines (run.mjs prints them after section 2). */
export function durableObjectUncontendedMarkdown(d) {
  const L = [];
  L.push("", `#### 2b. Durable Object store run(), uncontended (${d.rounds} interleaved rounds × ${d.runsPerRound} sequential runs on one key, inside one request each; ${d.runtime})`, "");
  L.push(
    "| implementation | RPCs / run() | µs / run() | client µs / run() (outside RPCs) | RPC µs / run() | keel time ÷ this (>1 = keel slower) | keel − this, µs / run() | keel client time ÷ this | client µs / run() per round |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---|",
  );
  for (const r of d.rows) {
    const methods = Object.entries(r.rpcsPerRunByMethod).map(([k, v]) => `${k} ${v}`).join(", ");
    L.push(`| ${r.impl} | ${r.rpcsPerRun} (${methods}) | ${r.usPerRun} | ${r.clientUsPerRun} | ${r.rpcUsPerRun} | ${r.keelTimeOverThis} | ${r.keelMinusThisUsPerRun} | ${r.keelClientTimeOverThis} | ${r.roundsClientUsPerRun.join(", ")} |`);
  }
  L.push("", `Measured ${d.measuredHow}. Ratios and differences: keel-lock's ÷ (−) the row's in the same round, median over rounds. Against keel-lock's own objects driven by a plain-JS client (same objects, same RPCs), the difference is what keel-lock's client side adds to a run()'s time, CPU that overlaps in-flight calls included.`);
  return L;
}
