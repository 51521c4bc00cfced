// The fault suite's Workers scenarios: the Durable Object store and keel-lock/sql on D1, in real
// workerd through Miniflare, with the Worker (workers/lock-worker.js) bundled by wrangler from
// the packed package. Every history goes through checkHistory from keel-lock/testing.
//
//   node workers.js [--soak] [--seconds N] [--results DIR] [--only PART[:PART…]] [--seed N]
//
// --only keeps the runs that every PART names: a store (do, d1), a scenario (restart, crash,
// errors), a primitive (lock, semaphore, rw, multi, leader) or a variant (correct, no-persist,
// limit-blind, …): `--only do`, `--only d1:errors`, `--only leader`, `--only do:multi`.
//
// --seed N: the first run's seed (default 1; each next run's one more).
//
// Default (make test): each run for at least 6 s and its own broken variant for at least 3 s,
// which must be caught in that one run. --soak: every primitive in every scenario, the lock's
// scenarios also against every broken Worker, each broken variant for at least 6 s and each of
// which must be caught, `--seconds` (default 120) shared among the correct runs. Each run's
// history (JSON lines), report.json and workerd's output, and summary.md / summary.json (a row
// per run, with its primitive), go under the results folder.
//
// What a run must show does not hang on how fast the machine is: past its least duration it goes
// on until it has shown it (`unshown` in runOne) — a broken store, a violation; the correct one,
// its faults exercised as the checks in runOne ask — for at most CAP_MS more; its faults wait
// for the state they need (a request waiting and a hold open), not for a time.
//
// Clients are async loops in this process, each bound to one Worker script; one lock operation
// is one request (acquire — immediate or waiting with a timeout —, extend, release, a stranger's
// release/extend, a fenced write), and a hold travels between requests, and between scripts, as
// its serialize() string (a semaphore's permits, a read lock and a set of keys too: restoreLock
// gives each back as what it was). Events are stamped here, before the request is sent and after
// its answer arrived, on this process's clock: the one clock every client shares. The stores
// judge expiry by the same machine's clock (the Durable Object's Date.now(), D1's SQLite now),
// and the checker's 5 ms tolerance covers workerd's coarse timers. A request that fails is an
// unknown outcome (`info`).
//
// Primitives, as the OS-process suite (run.js, lib/client.js) runs them, each with the broken
// store (workers/broken.js) its runs must catch:
//   lock       lock(key) on two keys, waiting only on the first; exclusive holds (a write lock's
//              too) write through their fence to a FencedResource object
//   semaphore  semaphore(key, 3) on the same keys, each hold 1 or 2 permits (the acquire recorded
//              with its limit and weight); limit-blind, permits taken under a limit one larger:
//              over_limit
//   rw         readLock / writeLock on the same keys, half each (readers recorded as shared);
//              writer-shares, a writer taken as one more reader: mutual_exclusion
//   multi      lock([a, b]) on two of three keys, so that sets overlap on one key: each key's calls
//              recorded under the set's one owner label, tied by a `set` event, with each key's
//              fence from l.fences; sets with the first key wait (as the lock does) in some rounds.
//              partial-set, a one-step set that takes its first key only (the Durable Object
//              store, which takes a set a key at a time, is given that one step):
//              mutual_exclusion / partial_set
//   leader     every client campaigns for one key: a waiting acquire (20 TTLs) recorded as op
//              "campaign", kept alive by recorded extends every TTL/3, written through by its
//              fence, resigned by a release; an observer
//              records each leader observe(key) reports in the Worker (pushed by the Durable
//              Object's watch, polled from D1 every 20 ms): the Worker streams each report the
//              moment observe yields it, and it is stamped here from the request's sending to its
//              arrival. A failed or cut observation is followed by a new one under a new observer
//              label. two-leaders, a third of the refused campaigns told they lead:
//              two_leaders / leader_order
// make test runs the lock in every scenario and each other primitive in one — semaphore in
// d1/errors, rw in do/restart, multi in d1/crash, leader in do/restart —; a soak runs every
// primitive in every scenario.
//
// Scenarios:
//   do/restart  two Worker scripts bound to one LockDurableObject namespace; a quarter into the
//               run (into each 15 s of a soak), the keys' lock objects are reset (their waiters
//               fall back to polling); halfway, once a request waits in an object's queue and a
//               hold is open, the workerd runtime is restarted on the same persist directory
//               (Miniflare disposed, which SIGKILLs workerd, and a new one started): every
//               request in flight fails. A lease taken (ACROSS_TTL_MS) just before the restart
//               must be refused to each client's first attempt after it, and then released by
//               its owner. That lease is the primitive's hold that leaves no room: all 3 permits of
//               the semaphore, a write lock, a set of two of the three keys the clients' sets
//               are drawn from (each overlaps it), and for leaders a lock on a key of its own,
//               which each client asks for at once (recorded as an acquire: a campaign would
//               wait its whole timeout behind that lease).
//   d1/crash    three Worker scripts on one D1 database; a quarter of the holds on the last key
//               (for leaders, of the terms on their one key; for sets, of those with the last
//               key) are abandoned (acquired, never released): the key must be free again by
//               TTL. A grant counts as taking over an abandoned hold only when the two could not
//               have been held together: after an exclusive hold, or before one, or 2 permits
//               beside 2 of the semaphore's 3.
//   d1/errors   the same, with a tenth of the D1 calls failing at the binding, half before the
//               statement reaches D1 and half after it ran.
// Each must give 0 violations with the correct store and ≥ 1 with its own broken variant: for
// the lock, the restart against a runtime without persistence (it forgets rows and fence
// counters, while the history still calls the store persistent), crash against a store that
// ignores the TTL, errors against owner-blind release; the other primitives against theirs. A
// soak also runs owner-blind, no-expiry and fence-reuse Workers against the lock in every
// scenario. In every run a probe also takes a key of its own, lets a stranger try to release it,
// abandons the lease, and asks again only once that lease has certainly run out: a store that
// never expires is refused to it in plain sight, whatever failing calls leave the shared keys
// possibly held. In semaphore, rw and multi runs it then crowds keys of its own, in plain sight
// too: holding 2 permits of 3, a read lock or the set [a, b] (for CROWD_TTL_MS), it asks at once
// for what cannot fit beside it — 2 more permits, a write lock, the set [b, c] —, which a correct
// store refuses and its broken variant grants (with a tenth of the D1 calls failing, the clients' own overlaps
// alone leave limit-blind uncaught in some 3 s runs).
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
// The TTL of a hold the runner takes just before a restart: far longer than a restart and every
// client's attempt after it take on a loaded machine, so it is certainly held through them.
const ACROSS_TTL_MS = 120_000;
// The TTL of the probe's crowding holds: far longer than the next ask takes, so that ask is
// certainly decided beside the hold.
const CROWD_TTL_MS = 5_000;
const HOLD_MS = 15; // the longest a client holds (sleeps) inside its section
const SEMAPHORE_LIMIT = 3;
const RESTART = 0xffffffff; // the client number of the runner's own events
const PROBE = 0xfffffffe; // the probe's
const OBSERVER = 0xfffffffd; // the leader observer's

const SCENARIOS = {
  "do:restart": { store: "do", scripts: 2, restart: true, broken: "no-persist" },
  "d1:crash": { store: "d1", scripts: 3, abandonLast: 0.25, broken: "no-expiry" },
  "d1:errors": { store: "d1", scripts: 3, errorRate: 0.1, broken: "owner-blind" },
};
const WORKER_VARIANTS = ["owner-blind", "no-expiry", "fence-reuse"];
// The primitives beyond the lock: the broken store each must catch, and the one scenario it runs
// in make test (a soak runs each in every scenario), DO and D1 taking turns.
const PRIMITIVES = {
  semaphore: { broken: "limit-blind", short: "d1:errors" },
  rw: { broken: "writer-shares", short: "do:restart" },
  multi: { broken: "partial-set", short: "d1:crash" },
  leader: { broken: "two-leaders", short: "do:restart" },
};

const onlyParts = only ? only.split(":") : [];
const runs = [];
for (const [name, s] of Object.entries(SCENARIOS)) {
  const plan = [
    ["lock", soak ? [...new Set([s.broken, ...WORKER_VARIANTS])] : [s.broken]],
    ...Object.entries(PRIMITIVES)
      .filter(([, p]) => soak || p.short === name)
      .map(([primitive, p]) => [primitive, [p.broken]]),
  ];
  for (const [primitive, broken] of plan) {
    for (const variant of ["correct", ...broken]) {
      const names = [s.store, name.split(":")[1], primitive, variant];
      if (onlyParts.every((part) => names.includes(part))) runs.push({ name, primitive, variant });
    }
  }
}
const correctRuns = runs.filter((r) => r.variant === "correct").length;
const soakSeconds = Number(value("--seconds", 120));
// A run's least duration; it goes on past it until it has shown what it must, for at most CAP_MS
// more: a bound for a run that never will, far beyond what a slow machine needs.
const CORRECT_MS = soak ? Math.max(6_000, Math.floor((soakSeconds * 1000) / Math.max(1, correctRuns))) : 6_000;
const BROKEN_MS = soak ? 6_000 : 3_000;
const CAP_MS = 60_000;
// How often a run past its least duration looks at what it has shown.
const LOOK_EVERY_MS = 250;
// How long each observation past a run's least duration lasts (the next starts at its end).
const OBSERVE_MORE_MS = 1_000;

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
    /**
     * POSTs `body` to `path` on Worker `script` and hands each JSON line of the streamed answer
     * to `onLine` the moment it arrives; resolves when the stream ends, rejects when it breaks
     * or has not ended within `limitMs` (then the stream is cancelled: no line comes after).
     */
    async stream(script, path, body, onLine, limitMs) {
      const init = { method: "POST", body: JSON.stringify(body) };
      const url = `http://keel.test${path}`;
      let reader = null;
      let timedOut = false;
      const timer = setTimeout(() => {
        timedOut = true;
        reader?.cancel().catch(() => {});
      }, limitMs);
      try {
        const res = script === names[0] ? await mf.dispatchFetch(url, init) : await fetchers.get(script).fetch(url, init);
        if (res.status !== 200) throw new Error(`${script} ${path}: HTTP ${res.status}: ${(await res.text()).slice(0, 200)}`);
        reader = res.body.getReader();
        const decoder = new TextDecoder();
        let buffered = "";
        for (;;) {
          if (timedOut) await reader.cancel();
          const { done, value } = await reader.read();
          if (timedOut) throw new Error(`${path}: no end within ${limitMs} ms`);
          if (done) return;
          buffered += decoder.decode(value, { stream: true });
          for (let n = buffered.indexOf("\n"); n >= 0; n = buffered.indexOf("\n")) {
            onLine(JSON.parse(buffered.slice(0, n)));
            buffered = buffered.slice(n + 1);
          }
        }
      } finally {
        clearTimeout(timer);
      }
    },
    dispose: () => mf.dispose(),
  };
}

// ---------------------------------------------------------------------------------------------
// One run: clients against one runtime, the scenario's faults, the checker's verdict.

async function runOne(out, { name, primitive, variant }, seed) {
  const s = SCENARIOS[name];
  const label = primitive === "lock" ? `${name.replace(":", "-")}-${variant}` : `${name.replace(":", "-")}-${primitive}-${variant}`;
  const dir = join(resultsDir, label);
  mkdirSync(dir, { recursive: true });
  const historyFile = join(dir, "history.jsonl");
  writeFileSync(historyFile, "");
  const durationMs = variant === "correct" ? CORRECT_MS : BROKEN_MS;
  const persistDir = mkdtempSync(join(scratch, "persist-"));
  const persist = variant === "no-persist" ? false : persistDir;
  // Every broken variant but the runtime's own (no-persist) is a store wrapper in the Worker.
  const workerVariant = variant === "no-persist" ? "correct" : variant;
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
  // The scripts share one store: a key held through the first is seen held through every other
  // (each call tried again while it fails, for the runs that inject failures; seen by isLocked,
  // which no broken variant changes, where two-leaders may answer a refused acquire yes).
  const shared = { key: `${label}:shared`, ttlMs: 60_000, timeout: 0 };
  const persistently = async (script, path) => {
    for (let attempt = 1; ; attempt++) {
      try {
        return await rt.call(script, path, shared);
      } catch (error) {
        if (attempt === 20) throw error;
      }
    }
  };
  const held = await persistently(names[0], "/acquire");
  for (const other of names.slice(1)) {
    const seen = await persistently(other, "/held");
    if (!held.ok || !seen.held) throw new Error(`Worker scripts ${names[0]} and ${other} do not share one lock store`);
  }
  const keys = [0, 1].map((k) => `${label}:${k}`);
  // The keys sets are drawn from: any two of three, so that sets overlap on one key only.
  const setPool = [...keys, `${label}:2`];
  // The key whose holds a crash abandons: the last, or the leaders' one key.
  const crashKey = primitive === "leader" ? keys[0] : keys[keys.length - 1];
  const CLIENTS = 12;
  const stats = {
    requests: 0, infos: 0, failedAtRestart: 0, resets: [], restarts: [], abandoned: 0, takeovers: 0, acrossRefused: 0,
    refusedEarly: 0, observations: 0, observeFailed: 0,
  };
  const waiting = new Set(); // owners of waiting acquires in flight
  const holding = new Set(); // owners holding, from the grant until their release answered
  // Keys whose last abandoned hold no grant has shown gone yet: the hold, as { id, exclusive,
  // weight, limit }; and the abandoned holds some grant showed gone (on one of their keys).
  const abandonedKeys = new Map();
  const shownGone = new Set();
  let restarting = false;
  let generation = 0; // runtime restarts so far; after each, every client tries that restart's `across` key once
  let triedAcross = 0;
  const acrossKey = (g) => `${label}:across${g}`;
  const acrossPool = (g) => [0, 1, 2].map((k) => `${acrossKey(g)}:${k}`);
  let labels = 0;
  // The least duration's end; `over` once the run has shown what it must (or CAP_MS past it).
  const started = now();
  const end = started + durationMs;
  let over = false;
  let faultsDone = !s.restart;

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

  // One recorded operation on a key, or on each key of a set (`target` an array): invoke (with
  // the hold's shape, `holding`), then ok / fail / info (an error: the outcome is unknown). A
  // set's release that answers no is unknown on every key: some may have been released.
  const op = async (client, opName, target, owner, ttlMs, immediate, run, holding = {}) => {
    const each = Array.isArray(target) ? target : [target];
    for (const key of each) record({ client, key, owner, type: "invoke", op: opName, ttlMs, immediate, ...holding });
    try {
      const answer = await run();
      const type = answer.ok ? "ok" : Array.isArray(target) && opName === "release" ? "info" : "fail";
      const t = now();
      for (const key of each) {
        const fence = Array.isArray(target) ? (answer.fences?.[key] ?? null) : (answer.fence ?? null);
        record({ client, key, owner, type, op: opName, fence, t0: t });
      }
      return answer;
    } catch (error) {
      stats.infos++;
      const t = now();
      for (const key of each) record({ client, key, owner, type: "info", op: opName, error: String(error?.message ?? error).slice(0, 200), t0: t });
      return null;
    }
  };
  const mark = (client, target, owner, type) => {
    const t = now();
    for (const key of Array.isArray(target) ? target : [target]) record({ client, key, owner, type, t0: t });
  };

  // What a round asks for: the /acquire body, what the invoke records of the hold (a
  // semaphore's limit and weight, a reader's share), and what the hold leaves room for.
  const shapeOf = (random, kind, target) => {
    if (kind === "semaphore") {
      const permits = random() < 0.5 ? 2 : 1;
      return {
        body: { primitive: "semaphore", key: target, limit: SEMAPHORE_LIMIT, permits },
        holding: { limit: SEMAPHORE_LIMIT, weight: permits },
        exclusive: false,
        weight: permits,
        limit: SEMAPHORE_LIMIT,
      };
    }
    if (kind === "rw" && random() < 0.5) {
      return { body: { primitive: "rw", key: target, mode: "read" }, holding: { shared: true }, exclusive: false, weight: 1, limit: Infinity };
    }
    if (kind === "rw") return { body: { primitive: "rw", key: target, mode: "write" }, holding: {}, exclusive: true, writes: true };
    if (kind === "multi") return { body: { primitive: "multi", keys: target }, holding: {}, exclusive: true };
    return { body: { primitive: "lock", key: target }, holding: {}, exclusive: true, writes: true };
  };

  // A grant that shows the last abandoned hold on a key gone: the two could not be held together.
  const tookOver = (target, shape) => {
    for (const key of Array.isArray(target) ? target : [target]) {
      const gone = abandonedKeys.get(key);
      if (gone && (gone.exclusive || shape.exclusive || gone.weight + shape.weight > gone.limit)) {
        abandonedKeys.delete(key);
        shownGone.add(gone.id);
      }
    }
    stats.takeovers = shownGone.size;
  };
  const abandons = (target, fate) => {
    const onCrashKey = (Array.isArray(target) ? target : [target]).includes(crashKey);
    return onCrashKey && s.abandonLast ? fate > 1 - s.abandonLast : fate > 0.97;
  };
  const abandon = (target, shape) => {
    // The client goes away holding: only the TTL frees the key.
    const id = stats.abandoned++;
    for (const key of Array.isArray(target) ? target : [target]) abandonedKeys.set(key, { ...shape, id });
  };

  // One hold of the run's primitive (a leader's across turn: a plain lock): taken, written
  // through when exclusive and single-key, sometimes extended, released or abandoned.
  const holdRound = async (c, random, home, elsewhere, across) => {
    const kind = primitive === "leader" ? "lock" : primitive;
    let target;
    if (kind === "multi") {
      const pool = across ? acrossPool(generation) : setPool;
      const skip = Math.floor(random() * pool.length);
      target = pool.filter((_, i) => i !== skip);
    } else {
      target = across ? acrossKey(generation) : keys[Math.floor(random() * keys.length)];
      const roll = random();
      if (!across && roll < 0.04) {
        const opName = roll < 0.02 ? "release" : "extend";
        await op(c, opName, target, `stranger:${labels++}`, TTL_MS, false, () =>
          call(home, "/stranger", { op: opName, key: target, ttlMs: TTL_MS }, 15_000),
        );
        return;
      }
    }
    const shape = shapeOf(random, kind, target);
    // Waiting acquires only with the first key; on the others every refusal is one store call,
    // so a key left held for ever shows up as refusals while certainly free.
    const immediate = across || !(Array.isArray(target) ? target : [target]).includes(keys[0]) || random() < 0.6;
    const owner = `c${c}:${labels++}`;
    const timeout = immediate ? 0 : TTL_MS;
    if (kind === "multi") record({ client: c, key: "", owner, type: "set", keys: target });
    if (!immediate) waiting.add(owner);
    const got = await op(c, "acquire", target, owner, TTL_MS, immediate, () =>
      call(home, "/acquire", { ...shape.body, ttlMs: TTL_MS, timeout }, timeout + 15_000),
    shape.holding);
    waiting.delete(owner);
    if (across) {
      triedAcross++;
      if (got && !got.ok) stats.acrossRefused++;
    }
    if (!got?.ok) {
      await sleep(random() * 3);
      return;
    }
    tookOver(target, shape);
    holding.add(owner);
    mark(c, target, owner, "enter");
    // Only exclusive holds write to the fenced resource: permits and readers overlap by design,
    // so a lower fence after a higher one is no stale write there.
    if (shape.writes) {
      const t0 = now();
      try {
        const { accepted } = await call(elsewhere(), "/write", { key: target, fence: got.fence }, 15_000);
        record({ client: c, key: target, owner, type: "write", t0, t1: now(), fence: got.fence, accepted });
      } catch {
        // the write's outcome is unknown: not recorded
      }
    }
    const fate = random();
    await sleep(random() * HOLD_MS);
    let { serialized } = got;
    if (fate < 0.15) {
      const extended = await op(c, "extend", target, owner, TTL_MS, false, () => call(elsewhere(), "/extend", { serialized, ttlMs: TTL_MS }, 15_000));
      if (extended?.ok) serialized = extended.serialized;
    }
    mark(c, target, owner, "exit");
    if (abandons(target, fate)) {
      abandon(target, shape);
      holding.delete(owner);
      return;
    }
    await op(c, "release", target, owner, 0, false, () => call(elsewhere(), "/release", { serialized }, 15_000));
    holding.delete(owner);
  };

  // One campaign for the first key: wait to lead, keep it with recorded extends, write, resign.
  const campaignRound = async (c, random, home, elsewhere) => {
    const key = keys[0];
    const shape = { exclusive: true };
    const owner = `c${c}:${labels++}`;
    const wait = 20 * TTL_MS;
    waiting.add(owner);
    const asked = now();
    const got = await op(c, "campaign", key, owner, TTL_MS, false, () =>
      call(home, "/acquire", { primitive: "lock", key, ttlMs: TTL_MS, timeout: wait }, wait + 15_000),
    );
    waiting.delete(owner);
    if (!got?.ok) {
      // A waiting acquire answers no only once its timeout has run out.
      if (got && now() - asked < wait - 50) stats.refusedEarly++;
      await sleep(random() * 3);
      return;
    }
    tookOver(key, shape);
    holding.add(owner);
    record({ client: c, key, owner, type: "enter" });
    // Most terms are short; a fifth last one to two and a half keep-alive periods, so that
    // leaders are kept by extends and campaigners wait behind them.
    const term = random() < 0.2 ? (TTL_MS / 3) * (1 + random() * 1.5) : random() * 3 * HOLD_MS;
    const until = now() + term;
    let { serialized } = got;
    let kept = true;
    while (kept && now() < until) {
      await sleep(Math.min(TTL_MS / 3, until - now()));
      if (now() >= until) break;
      const extended = await op(c, "extend", key, owner, TTL_MS, false, () => call(elsewhere(), "/extend", { serialized, ttlMs: TTL_MS }, 15_000));
      kept = extended?.ok === true;
      if (kept) serialized = extended.serialized;
    }
    if (kept) {
      const t0 = now();
      try {
        const { accepted } = await call(elsewhere(), "/write", { key, fence: got.fence }, 15_000);
        record({ client: c, key, owner, type: "write", t0, t1: now(), fence: got.fence, accepted });
      } catch {
        // the write's outcome is unknown: not recorded
      }
    }
    record({ client: c, key, owner, type: "exit" });
    if (abandons(key, random())) {
      abandon(key, shape);
      holding.delete(owner);
      return;
    }
    await op(c, "release", key, owner, 0, false, () => call(elsewhere(), "/release", { serialized }, 15_000));
    holding.delete(owner);
  };

  const client = async (c) => {
    const random = generator(seed * 104729 + c);
    const home = names[c % names.length];
    const elsewhere = () => (random() < 0.5 ? home : names[Math.floor(random() * names.length)]);
    let seenGeneration = 0;
    while (!over) {
      await up;
      if (over) break;
      // After a restart, each client's first round is an immediate acquire of what is held across it.
      const acrossTurn = seenGeneration < generation;
      seenGeneration = generation;
      if (primitive === "leader" && !acrossTurn) await campaignRound(c, random, home, elsewhere);
      else await holdRound(c, random, home, elsewhere, acrossTurn);
    }
  };

  // The probe: its own key, asked for (immediately) only once its last lease has certainly run
  // out, so every answer is decided while the key is certainly free. In semaphore, rw and multi
  // runs it then crowds keys of its own in plain sight: with a hold taken there (2 permits of 3, a
  // read lock, the set [a, b]), it asks at once for what cannot fit beside it (2 permits more, a
  // write lock, the set [b, c]), which a correct store refuses, and releases both.
  const probeKeys = [0, 1, 2].map((k) => `${label}:probe-${primitive}:${k}`);
  const crowding = {
    semaphore: () =>
      [0, 1].map(() => ({
        target: probeKeys[0],
        body: { primitive, key: probeKeys[0], limit: SEMAPHORE_LIMIT, permits: 2 },
        holding: { limit: SEMAPHORE_LIMIT, weight: 2 },
      })),
    rw: () =>
      ["read", "write"].map((mode) => ({
        target: probeKeys[0],
        body: { primitive, key: probeKeys[0], mode },
        holding: mode === "read" ? { shared: true } : {},
      })),
    multi: () =>
      [probeKeys.slice(0, 2), probeKeys.slice(1)].map((target) => ({ target, body: { primitive, keys: target }, holding: {} })),
  }[primitive];
  const crowd = async () => {
    const takes = [];
    for (const [i, take] of crowding().entries()) {
      const owner = `probe:${labels++}`;
      if (Array.isArray(take.target)) record({ client: PROBE, key: "", owner, type: "set", keys: take.target });
      const got = await op(PROBE, "acquire", take.target, owner, CROWD_TTL_MS, true, () =>
        call(names[i === 0 ? 0 : names.length - 1], "/acquire", { ...take.body, ttlMs: CROWD_TTL_MS, timeout: 0 }, 15_000),
      take.holding);
      if (!got?.ok) break;
      mark(PROBE, take.target, owner, "enter");
      takes.push({ ...take, owner, serialized: got.serialized });
    }
    for (const take of takes.reverse()) {
      mark(PROBE, take.target, take.owner, "exit");
      await op(PROBE, "release", take.target, take.owner, 0, false, () => call(names[0], "/release", { serialized: take.serialized }, 15_000));
    }
  };
  const prober = async () => {
    const key = `${label}:probe`;
    while (!over) {
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
      if (crowding) await crowd();
      // Past the TTL (and the checker's tolerance) from these answers, whatever they were.
      await sleep(TTL_MS + 50);
    }
  };

  // Leader runs: every leader observe(key) reports, each a `leader` event of the observation's
  // own label, stamped from the request's sending to the report's arrival (observe yielded it
  // somewhere in between). The scripts take turns; one ends at the run's end, a failure, a cut
  // stream (a restart) or after its answer's time limit, and the next starts under a new label.
  const observer = async () => {
    const key = keys[0];
    for (let n = 0; !over; n++) {
      await up;
      if (over) break;
      const windowMs = Math.max(OBSERVE_MORE_MS, Math.floor(end - now()));
      const owner = `observer:${labels++}`;
      const runtime = rt;
      stats.observations++;
      stats.requests++;
      const sent = now();
      let ended = false;
      try {
        await runtime.stream(names[n % names.length], "/observe", { key, windowMs, intervalMs: 20 }, (line) => {
          if (line.end) ended = true;
          else if ("fence" in line) record({ client: OBSERVER, key, owner, type: "leader", fence: line.fence, t0: sent, t1: now() });
        }, windowMs + 15_000);
      } catch {
        // the stream broke (a restart) or timed out: counted below
      }
      if (!ended) {
        stats.observeFailed++;
        await sleep(10);
      }
    }
  };

  // Waits until a request waits in a queue and a hold is open (or the run is over); answers who.
  const active = async () => {
    while ((waiting.size === 0 || holding.size === 0) && !over) await sleep(2);
    return { waiting: [...waiting], holding: holding.size };
  };
  // The hold taken across a restart: the run's primitive with no room left beside it.
  const acrossHold = (g) => {
    if (primitive === "semaphore") {
      const permits = SEMAPHORE_LIMIT;
      return { target: acrossKey(g), body: { primitive, key: acrossKey(g), limit: SEMAPHORE_LIMIT, permits }, holding: { limit: SEMAPHORE_LIMIT, weight: permits } };
    }
    if (primitive === "rw") return { target: acrossKey(g), body: { primitive, key: acrossKey(g), mode: "write" }, holding: {} };
    if (primitive === "multi") {
      const target = acrossPool(g).slice(0, 2);
      return { target, body: { primitive, keys: target }, holding: {} };
    }
    return { target: acrossKey(g), body: { primitive: "lock", key: acrossKey(g) }, holding: {} };
  };
  // Each cycle (the whole run, or about 15 s of a longer one): a quarter in, the keys' lock objects are reset
  // (queues and open calls lost, storage kept); halfway, the runtime is restarted, just after a
  // lease with a long TTL was taken, which its owner releases once every client has tried it.
  const faults = async () => {
    if (!s.restart) return;
    try {
      await faultCycles();
    } finally {
      faultsDone = true;
    }
  };
  const faultCycles = async () => {
    const cycles = Math.max(1, Math.floor(durationMs / 15_000));
    const cycle = durationMs / cycles;
    for (let at = now(); at + cycle / 2 < end && !over; at += cycle) {
      await sleep(Math.max(0, at + cycle / 4 - now()));
      const resetAt = await active();
      const t0 = now();
      for (const key of primitive === "multi" ? setPool : keys) await call(names[1], "/reset", { key }, 15_000).catch(() => {});
      record({ client: RESTART, type: "restart", t0, t1: now(), persistent: true });
      stats.resets.push(resetAt);

      await sleep(Math.max(0, at + cycle / 2 - now()));
      const g = generation + 1;
      const hold = acrossHold(g);
      if (Array.isArray(hold.target)) record({ client: RESTART, key: "", owner: "across" + g, type: "set", keys: hold.target });
      const across = await op(RESTART, "acquire", hold.target, "across" + g, ACROSS_TTL_MS, true, () =>
        call(names[0], "/acquire", { ...hold.body, ttlMs: ACROSS_TTL_MS, timeout: 0 }, 15_000),
      hold.holding);
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
      while (triedAcross < CLIENTS && !over) await sleep(5);
      let released = null;
      if (across?.ok) {
        const answer = await op(RESTART, "release", hold.target, "across" + g, 0, false, () =>
          call(names[names.length - 1], "/release", { serialized: across.serialized }, 15_000),
        );
        released = answer?.ok ?? null;
      }
      stats.restarts.push({ ...restartAt, ms: Math.round(now() - r0), acrossReleased: released });
    }
  };

  // What the run has not shown yet of what it must (nothing: it may end): a broken store, a
  // violation; the correct one, its faults through (the reset and restart cycles, each client's
  // try of the lease held across), an abandoned hold shown gone, a failed D1 call, a leader
  // observed, as the checks below ask. The history is recorded as it happens, in this process:
  // at any moment it is the run's history up to then.
  const unshown = () => {
    const missing = [];
    if (!history.some((e) => e.type === "ok" && (e.op === "acquire" || e.op === "campaign"))) missing.push("a grant");
    if (variant !== "correct") {
      const { violations } = checkHistory(history, { maxReported: 1 }); // one of each kind
      if (!violations.some((v) => v.kind !== "malformed_history")) missing.push("a violation");
      return missing;
    }
    if (!faultsDone) missing.push("the faults");
    if (s.abandonLast && stats.takeovers === 0) missing.push("an abandoned hold shown gone");
    if (s.errorRate && !history.some((e) => e.type === "info" && /injected/.test(e.error ?? ""))) missing.push("a failed D1 call");
    if (primitive === "leader" && !history.some((e) => e.type === "leader" && e.fence !== null)) missing.push("a leader observed");
    return missing;
  };
  const monitor = async () => {
    await sleep(Math.max(0, end - now()));
    while (!over) {
      if (clientError || unshown().length === 0 || now() >= end + CAP_MS) over = true;
      else await sleep(LOOK_EVERY_MS);
    }
  };

  let clientError = null;
  const clients = Array.from({ length: CLIENTS }, (_, c) => client(c).catch((e) => (clientError ??= e)));
  await Promise.all([
    ...clients,
    prober().catch((e) => (clientError ??= e)),
    ...(primitive === "leader" ? [observer().catch((e) => (clientError ??= e))] : []),
    faults().catch((e) => (clientError ??= e)),
    monitor(),
  ]);
  const seconds = (now() - started) / 1000;
  await rt.dispose();
  rmSync(persistDir, { recursive: true, force: true });

  const report = checkHistory(history, { maxReported: 20 });
  // How the waiters in flight at each reset and restart ended: ok or fail (they went on, by
  // polling), or info (the request failed).
  const acquires = (e) => e.op === "acquire" || e.op === "campaign";
  const outcome = new Map();
  for (const e of history) if (acquires(e) && e.type !== "invoke") outcome.set(e.owner, e.type);
  const ended = (owners) => {
    const n = { ok: 0, fail: 0, info: 0 };
    for (const o of owners) n[outcome.get(o) ?? "info"]++;
    return n;
  };
  for (const f of [...stats.resets, ...stats.restarts]) f.waiting = ended(f.waiting);
  // Grants by owner: a set's is one grant of every key.
  const grants = new Set(history.filter((e) => e.type === "ok" && acquires(e)).map((e) => e.owner)).size;
  const injected = history.filter((e) => e.type === "info" && /injected/.test(e.error ?? "")).length;
  const staleRefused = history.filter((e) => e.type === "write" && !e.accepted).length;
  const leaderReports = history.filter((e) => e.type === "leader");
  const row = {
    store: s.store === "do" ? "Durable Object" : "D1",
    primitive,
    scenario: name.split(":")[1],
    variant,
    seconds: Math.round(seconds * 10) / 10,
    scripts: s.scripts,
    clients: CLIENTS,
    operations: report.operations,
    grants,
    faults: stats.resets.length + stats.restarts.length + injected + stats.abandoned,
    injected,
    staleRefused,
    ...stats,
    leaderReports: leaderReports.length,
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
    if (s.abandonLast && stats.takeovers === 0) problems.push("no grant showed an abandoned hold gone");
    if (s.errorRate && injected === 0) problems.push("no D1 call failed");
    if (report.lossCount > 0) problems.push("a persistent store's restart was excused as a loss");
    if (primitive === "leader" && !leaderReports.some((e) => e.fence !== null)) problems.push("observe reported no leader");
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
let seed = Number(value("--seed", 1));
for (const run of runs) {
  const started = Date.now();
  const row = await runOne(out, run, seed++);
  rows.push(row);
  if (row.problems.length) failed = true;
  console.log(
    `${(row.problems.length ? "FAIL" : "ok").padEnd(4)} ${row.store}/${row.primitive}/${row.scenario}/${row.variant}: ${row.operations} ops, ${row.grants} grants, ` +
      `${row.faults} faults, ${row.failedAtRestart} requests failed at the restart, ` +
      `${row.primitive === "leader" ? `${row.leaderReports} leader reports in ${row.observations} observations, ${row.refusedEarly} campaigns refused before their wait ran out, ` : ""}` +
      `${row.violations} violations${row.kinds.length ? ` (${row.kinds.join(", ")})` : ""}, ` +
      `${((Date.now() - started) / 1000).toFixed(1)} s${row.problems.length ? `\n     ${row.problems.join("\n     ")}` : ""}`,
  );
}

const table = [
  "| store | primitive | scenario | variant | seconds | Worker scripts | operations | grants | faults injected | requests failed at the restart | abandoned holds (shown gone by a later grant) | stale writes refused | violations |",
  "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
  ...rows.map(
    (r) =>
      `| ${r.store} | ${r.primitive} | ${r.scenario} | ${r.variant} | ${r.seconds} | ${r.scripts} | ${r.operations} | ${r.grants} | ${r.faults} | ${r.failedAtRestart} | ` +
      `${r.abandoned} (${r.takeovers}) | ${r.staleRefused} | ${r.violations}${r.kinds.length ? ` (${r.kinds.join(", ")})` : ""} |`,
  ),
].join("\n");
writeFileSync(join(resultsDir, "summary.md"), `${table}\n`);
writeFileSync(join(resultsDir, "summary.json"), JSON.stringify(rows, null, 2));
console.log(`\n${table}\n\nhistories and reports: ${resultsDir}\n${((Date.now() - t0) / 1000).toFixed(0)} s in all`);
process.exit(failed ? 1 : 0);
