// Where keel-lock's in-isolate run() time goes (case 1 of the bench), three ways:
//   1. boundary crossings per run(): WebAssembly.Instance is wrapped before the package loads, so
//      every JS→wasm export call and wasm→JS import call is counted by name;
//   2. decomposition by subtraction: lock() alone, the memory store's acquire+release called
//      directly from JS, run() on a reused handle, and a fresh lock(key).run(fn);
//   3. a V8 CPU profile of the run() loop (node:inspector), self time grouped by kind.
// Writes bench/results/profile.json and prints a markdown summary. Not a test: no assertions.
import { createRequire } from "node:module";
import { spawnSync } from "node:child_process";
import { Session } from "node:inspector/promises";
import { writeFileSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { performance } from "node:perf_hooks";
import { randomUUID } from "node:crypto";
import { FloorLock, FloorStore } from "./lib/floor.mjs";
import { median, round } from "./lib/stats.mjs";

const HERE = dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);

// --- 1. count crossings (in a child process: the instrumented module must not be the one timed) --
async function countCrossings() {
  const counts = new Map();
  let counting = false;
  const bump = (name) => {
    if (counting) counts.set(name, (counts.get(name) ?? 0) + 1);
  };
  const RealInstance = WebAssembly.Instance;
  WebAssembly.Instance = function (module, imports) {
    const wrapped = {};
    for (const [ns, fns] of Object.entries(imports)) {
      wrapped[ns] = {};
      for (const [name, f] of Object.entries(fns)) {
        const short = "import " + name.replace(/^__wbg_/, "").replace(/_[0-9a-f]{16}$/, "");
        wrapped[ns][name] = typeof f === "function" ? function (...a) { bump(short); return f.apply(this, a); } : f;
      }
    }
    const instance = new RealInstance(module, wrapped);
    const exports = {};
    for (const [name, f] of Object.entries(instance.exports)) {
      exports[name] = typeof f === "function" && !name.startsWith("__wbindgen_start") ? (...a) => { bump("export " + name); return f(...a); } : f;
    }
    return { exports };
  };
  const glue = require("../pkg/dist/node/keel_lock.js");
  WebAssembly.Instance = RealInstance;
  // The package's API over the instrumented module, as pkg/node/index.cjs builds it.
  const counted = glue.__keelApi(glue);

  const store = new glue.MemoryLockStore();
  counted.setLockStore(store);
  const fn = () => 1;
  for (let i = 0; i < 200; i++) await counted.lock("p", 30_000).run(fn); // fill the token pool etc.
  const N_COUNT = 1600; // a multiple of the 16-token random pool
  counts.clear();
  counting = true;
  for (let i = 0; i < N_COUNT; i++) await counted.lock("p", 30_000).run(fn);
  counting = false;
  const crossings = [...counts.entries()].map(([name, n]) => ({ name, perRun: round(n / N_COUNT, 3) })).sort((a, b) => b.perRun - a.perRun);
  const totalCrossings = round(crossings.reduce((s, c) => s + c.perRun, 0), 2);

  return crossings;
}
if (process.argv[2] === "--count") {
  process.stdout.write(JSON.stringify(await countCrossings()));
  process.exit(0);
}
const child = spawnSync(process.execPath, [fileURLToPath(import.meta.url), "--count"], { encoding: "utf8" });
if (child.status !== 0) throw new Error(`crossing counter failed: ${child.stderr}`);
const crossings = JSON.parse(child.stdout);
const totalCrossings = round(crossings.reduce((s, c) => s + c.perRun, 0), 2);

// --- 2. decomposition, with the uninstrumented package --------------------------------------
const keel = await import("../pkg/node/index.mjs");
const mem = new keel.MemoryLockStore();
keel.setLockStore(mem);
const reused = keel.lock("reused", 30_000);
const floorStore = new FloorStore();
const fn = () => 1;
const registry = new FinalizationRegistry(() => {});
const owner = "0123456789abcdef0123456789abcdef";
const parts = {
  "await of a resolved promise (baseline)": async () => { await Promise.resolve(1); },
  "crypto.randomUUID()": async () => { randomUUID(); },
  "new object + FinalizationRegistry.register (what a wasm-bindgen class costs per object)": async () => { registry.register({ p: 1 }, 1); },
  "performance.now() × 2 (the clock reads of a run(): at its start and at its release)": async () => { performance.now(); performance.now(); },
  "keel lock(key, ttl) only (a JS object; the key checked in the wasm once, then remembered)": async () => { keel.lock("k", 30_000); },
  "keel MemoryLockStore.acquire + release called from JS (2 calls, 4 strings into wasm)": async () => { mem.acquire("s", owner, 30_000); mem.release("s", owner); },
  "keel reused handle .run(fn)": () => reused.run(fn),
  "keel lock(key, ttl).run(fn)": () => keel.lock("k", 30_000).run(fn),
  "floor new FloorLock(...).run(fn)": () => new FloorLock(floorStore, "k", 30_000).run(fn),
};
const OPS = 20_000;
const ns = Object.fromEntries(Object.keys(parts).map((k) => [k, []]));
for (let r = 0; r < 7; r++) {
  for (const [name, f] of Object.entries(parts)) {
    await new Promise((res) => setImmediate(res));
    const t0 = performance.now();
    for (let i = 0; i < OPS; i++) await f();
    ns[name].push(((performance.now() - t0) * 1e6) / OPS);
  }
}
const decomposition = Object.entries(ns).map(([name, v]) => ({ name, nsPerOp: round(median(v.slice(1)), 0) }));

// --- 3. CPU profile of the fresh-handle run() loop ---------------------------------------------
const session = new Session();
session.connect();
await session.post("Profiler.enable");
await session.post("Profiler.setSamplingInterval", { interval: 50 });
await session.post("Profiler.start");
const tEnd = performance.now() + 1500;
while (performance.now() < tEnd) for (let i = 0; i < 1000; i++) await keel.lock("k", 30_000).run(fn);
const { profile } = await session.post("Profiler.stop");
session.disconnect();

const self = new Map();
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const hits = new Map();
for (const id of profile.samples) hits.set(id, (hits.get(id) ?? 0) + 1);
const totalSamples = profile.samples.length;
const kindOf = (cf) => {
  const url = cf.url ?? "";
  const name = cf.functionName || "(anonymous)";
  if (name.startsWith("(")) return name; // (program), (garbage collector), (idle)
  if (url.startsWith("wasm://") || /^(wasm-function|\$)/.test(name) || url === "" && /^\d+$/.test(name)) return "wasm code";
  if (url.includes("keel_lock.js")) return "wasm-bindgen JS glue";
  if (url.includes("profile.mjs")) return "bench loop";
  if (url.startsWith("node:") || url === "") return `node/V8 built-in (${name})`;
  return `other JS (${url.split("/").pop()})`;
};
for (const [id, n] of hits) {
  const node = byId.get(id);
  const cf = node.callFrame;
  const kind = kindOf(cf);
  const fnName = `${cf.functionName || "(anonymous)"} ${(cf.url ?? "").split("/").pop()}`.trim();
  const k = self.get(kind) ?? { samples: 0, fns: new Map() };
  k.samples += n;
  k.fns.set(fnName, (k.fns.get(fnName) ?? 0) + n);
  self.set(kind, k);
}
const cpu = [...self.entries()]
  .map(([kind, v]) => ({
    kind,
    selfPct: round((100 * v.samples) / totalSamples, 1),
    top: [...v.fns.entries()].sort((a, b) => b[1] - a[1]).slice(0, 4).map(([f, s]) => `${f} ${round((100 * s) / totalSamples, 1)}%`),
  }))
  .sort((a, b) => b.selfPct - a.selfPct);

const out = { date: new Date().toISOString(), crossingsPerRun: totalCrossings, crossings, decomposition, cpuProfileSelfTime: cpu, samples: totalSamples };
mkdirSync(join(HERE, "results"), { recursive: true });
writeFileSync(join(HERE, "results/profile.json"), JSON.stringify(out, null, 2) + "\n");

const L = ["", "#### Profile: keel-lock lock(key).run(fn) on the memory store", ""];
L.push(`wasm boundary crossings per run(): **${totalCrossings}** (JS→wasm exports and wasm→JS imports):`, "");
L.push("| crossing | per run() |", "|---|---:|");
for (const c of crossings) L.push(`| ${c.name} | ${c.perRun} |`);
L.push("", "Decomposition (median ns per op, same process, interleaved):", "", "| operation | ns/op |", "|---|---:|");
for (const d of decomposition) L.push(`| ${d.name} | ${d.nsPerOp} |`);
L.push("", `CPU profile of the loop (${totalSamples} samples, self time):`, "", "| kind | self % | top functions |", "|---|---:|---|");
for (const c of cpu.slice(0, 10)) L.push(`| ${c.kind} | ${c.selfPct} | ${c.top.join("; ")} |`);
process.stdout.write(L.join("\n") + "\n");
