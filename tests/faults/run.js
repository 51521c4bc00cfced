// The fault suite: concurrent OS processes (lib/client.js) lock with keel-lock — installed from
// the packed tarball — against real stores while this process injects faults, then every
// recorded history goes through the checker (checkHistory from keel-lock/testing).
//
//   node run.js [--soak] [--seconds N] [--results DIR] [--only STORE[:SCENARIO[:VARIANT[:PRIMITIVE]]]] [--seed N]
//
// Stores: memory (in one process), Redis (with and without AOF), Redis Cluster (three masters
// with a replica each, through an ioredis Cluster), Upstash (@upstash/redis over the REST fixture
// of tests/stores, which polls: no pub/sub), better-sqlite3 on a shared file, PostgreSQL, etcd
// (three members, through the JSON gateway; the lock only).
//
// Primitives: `lock` on every store and scenario below; semaphores (1–2 permits of 3),
// read-write locks (readers and writers on one key), several keys at once (`lock([a, b])`, two
// of three keys) and leaders (campaigns kept alive by recorded extends, watched by `observe`).
// make test runs each on the memory store (errors) and Redis (kill), all but leaders also on
// PostgreSQL (kill), and stops read-write writers on PostgreSQL and sets and leaders on Redis
// (SHORT_MATRIX); the soak runs every one on the memory store (errors), Redis and PostgreSQL
// (kill, stop, errors, restart), Redis with AOF (restart), SQLite and Upstash (kill, stop) and
// the Redis Cluster (kill, stop, failover) — all but `stop` for semaphores, whose holders share the key and have no
// fenced write to be refused. Each against a broken store of its own: permits taken under a
// larger limit (limit-blind), a writer taken as one more reader (writer-shares), a one-step set
// that takes its first key only (partial-set), leadership granted while held (two-leaders).
// A campaign refused before its wait ran out fails the run.
//
// Scenarios (each against each store it applies to):
//   kill     a holder is SIGKILLed inside its critical section (and replaced); its key must be
//            granted again once its lease has run out
//   stop     a holder is SIGSTOPped inside its section for 3 TTLs and on until another holder
//            has written a higher fence to its key (at most STOP_CAP_MS), then continued: its
//            fenced write must be refused
//   restart  the store is killed and started again mid-run (Redis with and without AOF, Postgres);
//            on Redis Cluster (soak only), the master serving one of the run's keys is SIGKILLed,
//            its replica is promoted and the node comes back as a replica
//   failover Redis Cluster: CLUSTER FAILOVER on the replica of the master serving one of the
//            run's keys, the coordinated failover that loses no acknowledged write
//   takeover Redis Cluster: that replica stops reading for 0.5 s, then takes over at once
//            (CLUSTER FAILOVER TAKEOVER) without the writes its master acknowledged meanwhile:
//            the failover that loses acknowledged writes (lib/servers.js). With the store as
//            shipped it is recorded as non-persistent and must show up as losses (fences handed
//            out again); with waitForReplicas (the store redis-cluster-wait: WAIT for 1 replica,
//            100 ms) it is recorded as persistent, so a lost grant is a violation, and some
//            grant must have been refused for want of a replica's acknowledgement; its broken
//            variant, no-wait, is that store without the option
//   errors   a tenth of the store calls throw, half before reaching the store, half after
//   leader   etcd: the leader is SIGKILLed mid-run and started again once the other two have
//            elected a new one (recorded as persistent: Raft loses no acknowledged write, so an
//            overlap or a repeated fence across it is a violation); its broken variant is
//            no-compare (acquire reads the key, then puts it without the create_revision compare)
//   member   etcd: a follower is SIGKILLed and started again mid-run (persistent)
// etcd leases are whole seconds with a minimum of one (lib/servers.js's cluster grants no less),
// so its runs lock with a 1 s TTL; and etcd lets a lease live past its TTL — it looks for expired
// leases twice a second, and a new leader restarts every lease's countdown (docs/testing.md: up
// to one more TTL after a leader change). That costs liveness, not safety: a lease still lasts
// at least its TTL from the grant. So on etcd what a lease's upper bound decides — an acquire
// refused while the key was certainly free, an extend or release by an owner whose lease had
// certainly expired — is judged with 4 s of tolerance (a TTL and an election more, lib/judge.js);
// overlaps, fences and stale writes are judged as on every store, with the checker's default.
// A leader or member run must also have granted a key after the fault ended, so that fences are
// compared across it.
// Each scenario must give 0 violations with the correct store, and ≥ 1 with its own broken
// variant (owner-blind release, no expiry or fence reuse), so none passes vacuously; a soak runs
// every broken variant, and each must be caught. A restart of Redis without AOF loses locks and
// fence counters: that must show up as losses, not as silence. A Redis Cluster master killed
// with writes not yet replicated loses them the same way (replication is asynchronous): that
// restart is recorded as non-persistent from the kill until the replica answers as master, and
// whatever it explains is reported as losses (there may be none); a CLUSTER FAILOVER is recorded
// as persistent, so an overlap or a repeated fence across it is a violation. Both cluster faults
// are reliable locally because each first waits until every replica is connected and caught up
// (lib/servers.js); the kill leaves a third of the slots without a master for 2-3 s (1 s node
// timeout, then the election), too much of a short run, so it runs in the soak only, like errors
// on these two stores (the same failing wrapper that make test already runs on Redis). In every
// run one process also probes a key of its own, asking for it only once its last lease there has
// certainly run out.
//
// What a run must show does not hang on how fast the machine is: a run lasts at least its
// seconds, and then goes on until it has shown it (`unshown` below) — a broken store, a
// violation; the correct one, each fault really exercised (a killed holder's key granted again,
// a stopped holder's write refused, a store call failed, the loss a lossy fault must cost, a
// grant refused unreplicated) — for at most CAP_MS more. A store fault that must cost something
// and has not yet is injected again meanwhile.
//
// Default (make test): fixed seeds, a few seconds per run, the correct store and each scenario's
// own broken variant. --soak: every broken variant, `--seconds` (default SOAK_SECONDS or 600)
// shared among the correct runs. Writes every history (JSON lines) and summary.md (a line per
// store × scenario with the broken stores it caught, then every run) / summary.json under the
// results folder.
import { fork } from "node:child_process";
import { closeSync, mkdirSync, mkdtempSync, openSync, readSync, readdirSync, rmSync, statSync, writeFileSync, appendFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { schema } from "keel-lock/sql";
import { startCluster, startEtcd, startPg, startRedis, startUpstash } from "./lib/servers.js";
import { judge } from "./lib/judge.js";
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
  failover: { restart: "failover", broken: "fence-reuse" },
  // On the last key first: it is only ever acquired at once, so grants keep coming during the
  // replica's sleep (hand-overs of the first key may wait on a pub/sub connection to that replica).
  takeover: { restart: "takeover", broken: "fence-reuse", firstKey: 1 },
  errors: { errorRate: 0.1, broken: "owner-blind" },
  leader: { restart: "leader", broken: "no-compare" },
  member: { restart: "member", broken: "fence-reuse" },
};
// Scenarios whose runs must grant a key after the fault (see above).
const ACROSS_LEADERS = new Set(["leader", "member"]);
const VARIANTS = ["owner-blind", "no-expiry", "fence-reuse"];
// Stores with a broken variant of their own: the one their scenarios are shown to catch, and one
// more that a soak runs.
const OWN_BROKEN = { "redis-cluster-wait": "no-wait" };
// Broken variants a soak runs on one store besides VARIANTS (make test runs them where a
// scenario names them).
const SOAK_BROKEN = { etcd: ["no-compare"] };
// A store's TTL where the suite's is too short for it: etcd's leases are whole seconds.
const TTL_OF = { etcd: 1_000 };

// The options of the store redis-cluster-wait: the store as shipped on the same cluster, waiting
// for one replica after every grant.
const WAIT_FOR_REPLICAS = { replicas: 1, timeoutMs: 100 };
// What a grant refused for want of replicas says (LockNotReplicatedError).
const NOT_REPLICATED = /not confirmed by \d+ replica/;
const MATRIX = [
  ["memory", ["errors"]],
  ["redis", ["kill", "stop", "restart", "errors"]],
  ["redis-aof", ["restart"]],
  ["sqlite", ["kill", "stop", "errors"]],
  ["pg", ["kill", "stop", "restart", "errors"]],
  ["redis-cluster", ["kill", "stop", "failover", "takeover", ...(soak ? ["errors", "restart"] : [])]],
  ["redis-cluster-wait", ["takeover"]],
  ["upstash", ["kill", "stop", ...(soak ? ["errors"] : [])]],
  ["etcd", ["leader", "member", "kill", "stop"]],
];

// The shared holds, each with the broken store its runs must catch: permits over the limit, and
// a writer beside readers. The checker judges them by the limit and weight each acquire records.
const PRIMITIVES = {
  semaphore: { broken: "limit-blind" },
  rw: { broken: "writer-shares" },
  multi: { broken: "partial-set" },
  leader: { broken: "two-leaders" },
};
const SHARED_MATRIX = {
  memory: ["errors"],
  redis: ["kill", "stop", ...(soak ? ["errors", "restart"] : [])],
  pg: ["kill", "stop", ...(soak ? ["errors", "restart"] : [])],
  ...(soak && { "redis-aof": ["restart"], sqlite: ["kill", "stop"], "redis-cluster": ["kill", "stop", "failover"], upstash: ["kill", "stop"] }),
};
// make test runs fewer: each primitive killed on Redis (and PostgreSQL), stopped on one store.
const SHORT_MATRIX = {
  semaphore: { memory: ["errors"], redis: ["kill"], pg: ["kill"] },
  rw: { memory: ["errors"], redis: ["kill"], pg: ["kill", "stop"] },
  multi: { memory: ["errors"], redis: ["kill", "stop"], pg: ["kill"] },
  leader: { memory: ["errors"], redis: ["kill", "stop"] },
};
// A stopped holder proves the fault by its fenced write, refused once it continues: a
// semaphore's permit holders share the key and have nothing to fence, so they are not stopped.
const STOPPABLE = new Set(["lock", "rw", "multi", "leader"]);

const [onlyStore, onlyScenario, onlyVariant, onlyPrimitive] = only ? only.split(":") : [];
const runs = [];
for (const [store, scenarios] of MATRIX) {
  if (onlyStore && onlyStore !== store) continue;
  const matrixOf = (p) => ((soak ? SHARED_MATRIX : SHORT_MATRIX[p])[store] ?? []).filter((f) => f !== "stop" || STOPPABLE.has(p));
  const plan = [["lock", scenarios], ...Object.keys(PRIMITIVES).map((p) => [p, matrixOf(p)])];
  for (const [primitive, list] of plan) {
    if (onlyPrimitive && onlyPrimitive !== primitive) continue;
    for (const scenario of list) {
      if (onlyScenario && onlyScenario !== scenario) continue;
      const own = OWN_BROKEN[store];
      const lockBroken = soak ? [...VARIANTS, ...(own ? [own] : []), ...(SOAK_BROKEN[store] ?? [])] : [own ?? SCENARIOS[scenario].broken];
      const brokenOnes = primitive === "lock" ? lockBroken : [PRIMITIVES[primitive].broken];
      for (const variant of ["correct", ...brokenOnes]) {
        if (!onlyVariant || onlyVariant === variant) runs.push({ store, primitive, scenario, variant });
      }
    }
  }
}
const correctRuns = runs.filter((r) => r.variant === "correct").length;
const soakSeconds = Number(value("--seconds", process.env.SOAK_SECONDS ?? 600));
// A run's least duration; it goes on past it until it has shown what it must (`unshown`), for
// at most CAP_MS more: a bound for a run that never will, far beyond what a slow machine needs.
const CORRECT_MS = soak ? Math.max(5_000, Math.floor((soakSeconds * 1000) / Math.max(1, correctRuns))) : 5_000;
const BROKEN_MS = soak ? 6_000 : 3_000;
const CAP_MS = 60_000;
// How often a run past its least duration looks at what it has shown.
const LOOK_EVERY_MS = 250;
// The longest a stopped holder stays stopped waiting for another holder's higher fence on its
// key: with a correct store that comes a TTL or so after the stop; a stopped process may hold a
// database lock the others wait for (SQLite's busy timeout is 10 s), and a broken store may
// never let the key go.
const STOP_CAP_MS = 5_000;
// A store fault that must cost something and has not yet is injected again once this long has
// passed since the last one ended (pacing only: the run goes on until the cost shows).
const REFAULT_MS = 2_000;

rmSync(resultsDir, { recursive: true, force: true });
mkdirSync(resultsDir, { recursive: true });
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const now = () => performance.timeOrigin + performance.now();

/** The events a run's processes have written to `dir` so far; each read goes on from the last. */
function historyOf(dir) {
  const read = new Map(); // file → bytes consumed (whole lines only)
  const events = [];
  return () => {
    for (const file of readdirSync(dir).filter((f) => f.endsWith(".jsonl")).sort()) {
      const path = join(dir, file);
      const from = read.get(file) ?? 0;
      const size = statSync(path).size;
      if (size <= from) continue;
      const bytes = Buffer.alloc(size - from);
      const fd = openSync(path, "r");
      try {
        readSync(fd, bytes, 0, bytes.length, from);
      } finally {
        closeSync(fd);
      }
      const end = bytes.lastIndexOf(10);
      if (end < 0) continue;
      read.set(file, from + end + 1);
      for (const line of bytes.subarray(0, end).toString("utf8").split("\n")) {
        if (!line) continue;
        try {
          const e = JSON.parse(line);
          if (e.client === -1) e.client = 0xffffffff;
          events.push(e);
        } catch {
          // a line cut short by SIGKILL
        }
      }
    }
    return events;
  };
}

// What a history shows, counted as the problems below judge it.
const isGrant = (e) => e.type === "ok" && (e.op === "acquire" || e.op === "campaign");
const countGrants = (history) => history.filter(isGrant).length;
const countInjected = (history) => history.filter((e) => e.type === "info" && /injected/.test(e.error ?? "")).length;
const countNotReplicated = (history) => history.filter((e) => e.type === "info" && NOT_REPLICATED.test(e.error ?? "")).length;
// Grants asked for after the last store fault had ended (a fence to compare with the ones before).
const countGrantsAfterFault = (history) => {
  const ended = Math.max(...history.filter((e) => e.type === "restart").map((e) => e.t1));
  return history.filter((e) => isGrant(e) && e.t0 > ended).length;
};
const countStaleRefused = (history) => history.filter((e) => e.type === "write" && e.afterStop && !e.accepted).length;
// A killed holder never releases: its key is free again only once its lease has run out.
const countTakenOver = (history, kills) => kills.filter((k) => history.some((e) => isGrant(e) && e.key === k.key && e.t0 > k.at)).length;
// Where this process's clock stands against the machine's monotonic clock (process.hrtime, which
// performance.now() counts too): clients stamp with hrtime plus this anchor, so their stamps and
// this process's share one timeline. The largest of a few readings: the least delayed between
// its two reads.
const CLOCK_ANCHOR = Math.max(...Array.from({ length: 9 }, () => now() - Number(process.hrtime.bigint()) / 1e6));

// The store redis-cluster-wait runs on the cluster of redis-cluster.
const serverKind = (store) => (store === "redis-cluster-wait" ? "redis-cluster" : store);

async function server(kind) {
  if (kind === "redis") return startRedis({ aof: false });
  if (kind === "redis-aof") return startRedis({ aof: true });
  if (kind === "pg") return startPg();
  if (kind === "redis-cluster") return startCluster();
  if (kind === "upstash") return startUpstash();
  if (kind === "etcd") return startEtcd();
  return null;
}

function storeSpec(kind, srv, dir) {
  if (kind === "memory") return { kind: "memory" };
  if (kind === "redis" || kind === "redis-aof") return { kind: "redis", port: srv.port };
  if (kind === "sqlite") return { kind: "sqlite", path: join(dir, "locks.sqlite") };
  if (kind === "redis-cluster") return { kind, nodes: srv.nodes };
  if (kind === "redis-cluster-wait") return { kind: "redis-cluster", nodes: srv.nodes, waitForReplicas: WAIT_FOR_REPLICAS };
  if (kind === "upstash") return { kind, url: srv.url, token: srv.token };
  if (kind === "etcd") return { kind, endpoints: srv.endpoints };
  return { kind: "pg", url: srv.url };
}

async function runOne(run, seed, srv) {
  const { store, primitive, scenario, variant } = run;
  const name = primitive === "lock" ? `${store}-${scenario}-${variant}` : `${store}-${primitive}-${scenario}-${variant}`;
  const dir = join(resultsDir, name);
  mkdirSync(dir, { recursive: true });
  const s = SCENARIOS[scenario];
  const durationMs = variant === "correct" ? CORRECT_MS : BROKEN_MS;
  const ttlMs = TTL_OF[store] ?? TTL_MS;
  const inProcess = store === "memory";
  let spec = storeSpec(store, srv, dir);
  let scratch = null;
  if (store === "sqlite") {
    scratch = mkdtempSync(join(tmpdir(), "keel-lock-faults-sqlite-"));
    spec = { ...spec, path: join(scratch, "locks.sqlite") };
  }
  if (store === "pg") {
    // A fresh schema per run: a table of its own, found through search_path.
    const schemaName = `run_${runs.indexOf(run)}_${seed}`;
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
  const historySoFar = historyOf(dir);
  // The run's clock starts once the first processes have their stores ready (starting Node and
  // connecting can take seconds on a loaded machine), so the faults have the whole run to happen.
  let end = Infinity;
  let stopping = false; // the run is over: no more faults, every process told to stop
  const faults = { kill: 0, stop: 0, restart: 0 };
  let lossyRestart = false;
  const procs = new Set();
  const outputs = [];
  let nextId = 0;
  let lastStop = 0;
  let victimAlive = false;

  const kills = [];
  const spawnClient = (victim, probe = false) => {
    const id = nextId++;
    const config = {
      id,
      store: spec,
      primitive,
      variant,
      keys: 2,
      ttlMs,
      holdMs: 15,
      seed,
      errorRate: s.errorRate ?? 0,
      // A process that is killed runs its victim alone: nothing else of it is left mid-call,
      // with an outcome no one can know, when it dies.
      clients: inProcess ? 8 : victim === "kill" ? 1 : 2,
      probe,
      clockAnchor: CLOCK_ANCHOR,
      history: join(dir, `client-${id}.jsonl`),
      keyPrefix: `${name}:`,
      victim,
    };
    const child = fork(join(here, "lib", "client.js"), [JSON.stringify(config)], { stdio: ["ignore", "pipe", "pipe", "ipc"] });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (out += d));
    const exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
    const proc = { id, child, exited, victim, cuts: new Map() };
    procs.add(proc);
    if (victim) victimAlive = true;
    child.on("message", async (m) => {
      if (m?.ready) proc.ready = true;
      if (m?.cut !== undefined) {
        proc.cuts.get(m.cut)?.(m.at);
        proc.cuts.delete(m.cut);
      }
      if (!m?.inside) return;
      if (victim === "kill" && !stopping) {
        child.kill("SIGKILL");
        kills.push({ key: m.inside, at: now() });
        faults.kill++;
        victimAlive = false;
        return;
      }
      let stopped = false;
      if (victim === "stop" && !stopping && Date.now() - lastStop > ttlMs) {
        child.kill("SIGSTOP");
        faults.stop++;
        // Past its TTL, and on until another holder has written a higher fence to the key, so
        // that the stale write it makes once continued meets it.
        const since = Date.now();
        const overtaken = () =>
          m.fence == null ||
          historySoFar().some((e) => e.type === "write" && e.key === m.inside && e.owner !== m.label && e.accepted && e.fence > m.fence);
        await sleep(3 * ttlMs);
        while (!stopping && Date.now() - since < STOP_CAP_MS && !overtaken()) await sleep(20);
        child.kill("SIGCONT");
        lastStop = Date.now();
        stopped = true;
      }
      if (child.connected) child.send({ go: true, stopped }, () => {});
    });
    exited.then(({ code, signal }) => {
      procs.delete(proc);
      outputs.push({ id, code, signal, out, killed: victim === "kill" && signal === "SIGKILL" });
    });
    return proc;
  };

  // The history of the run up to one instant. Each process answers a cut with the time of its
  // answer, having written every event it stamped before it (it stamps and writes an event in
  // one synchronous step), so every event stamped before the earliest answer is in the files;
  // the later ones are left out. The runner's restarts, written as each ends (never during a
  // look), are kept whole. Files read as they are could hold one process's recent events and
  // not another's, a history the run never had.
  let cuts = 0;
  const cut = async () => {
    const n = ++cuts;
    const answers = [...procs].map(
      (p) =>
        new Promise((resolve) => {
          p.cuts.set(n, resolve);
          p.exited.then(() => resolve(Infinity));
          if (p.child.connected) p.child.send({ cut: n }, () => {});
          else resolve(Infinity);
        }),
    );
    const at = Math.min(...(await Promise.all(answers)));
    return historySoFar().filter((e) => e.client === 0xffffffff || e.t1 <= at);
  };

  // What the run has not shown yet of what it must (nothing: it may end): a broken store, a
  // violation (one a history cut short cannot fake: not a set cut between its call's keys); the
  // correct one, each fault of its scenario exercised, as the problems below ask.
  const lossMustShow = (s.restart && store === "redis") || (scenario === "takeover" && store === "redis-cluster");
  const unshown = (history) => {
    const missing = [];
    if (countGrants(history) === 0) missing.push("a grant");
    if (variant !== "correct") {
      const { violations } = judge(history, store, { maxReported: 1 }); // one of each kind
      if (!violations.some((v) => v.kind !== "malformed_history")) missing.push("a violation");
      return missing;
    }
    if (s.victim === "kill" && countTakenOver(history, kills) === 0) missing.push("a killed holder's key granted again");
    if (s.victim === "stop" && countStaleRefused(history) === 0) missing.push("a stopped holder's stale write refused");
    if (s.restart && faults.restart === 0) missing.push("a store restart");
    if (ACROSS_LEADERS.has(scenario) && countGrantsAfterFault(history) === 0) missing.push("a grant after the store fault");
    if (s.errorRate && countInjected(history) === 0) missing.push("a failed store call");
    if (lossMustShow && judge(history, store, { maxReported: 1 }).lossCount === 0) missing.push("a loss");
    if (store === "redis-cluster-wait" && countNotReplicated(history) === 0) missing.push("a grant refused unreplicated");
    return missing;
  };
  // What only another store fault can show.
  const costOfAFault = (missing) => missing.some((m) => m === "a loss" || m === "a grant refused unreplicated");

  const processes = inProcess ? 1 : 4;
  for (let i = 0; i < processes; i++) spawnClient(i === 0 && s.victim ? s.victim : null, i === processes - 1);
  const first = [...procs];
  const readyBy = Date.now() + 60_000;
  while (first.some((p) => !p.ready && procs.has(p)) && Date.now() < readyBy) await sleep(20);
  const started = Date.now();
  end = started + durationMs;
  const restartAt = [Date.now() + durationMs / 2];
  if (soak && s.restart) for (let t = 1; t < Math.floor(durationMs / 15_000); t++) restartAt.push(Date.now() + t * 15_000);
  restartAt.sort((a, b) => a - b);
  let lastFaultEnded = 0;
  let lastLook = 0;
  let stoppedAt = Infinity;
  while (procs.size > 0 && Date.now() < stoppedAt + 30_000) {
    if (!stopping && s.victim === "kill" && !victimAlive) spawnClient("kill");
    if (!stopping && s.restart && srv && restartAt.length && Date.now() >= restartAt[0]) {
      restartAt.shift();
      const t0 = now();
      // The cluster's faults hit the master serving one of the run's keys (key 0, then key 1, …;
      // a scenario's firstKey first).
      const fault = typeof s.restart === "string" ? s.restart : "restart";
      const done = (await srv[fault]({ key: `${name}:${(faults.restart + (s.firstKey ?? 0)) % 2}` })) ?? {};
      const { t1 = now() } = done;
      // waitForReplicas claims that a takeover loses no answered grant: held to it.
      const persistent = store === "redis-cluster-wait" ? true : (done.persistent ?? srv.persistent);
      faults.restart++;
      if (!persistent) lossyRestart = true;
      appendFileSync(parentHistory, JSON.stringify({ client: -1, type: "restart", fault, t0: done.t0 ?? t0, t1, persistent }) + "\n");
      lastFaultEnded = Date.now();
    }
    if (!stopping && Date.now() >= end && Date.now() - lastLook >= LOOK_EVERY_MS) {
      const missing = unshown(await cut());
      lastLook = Date.now();
      const crashedAlready = outputs.some((o) => !o.killed && o.code !== 0);
      if (missing.length === 0 || crashedAlready || Date.now() >= end + CAP_MS) {
        stopping = true;
        stoppedAt = Date.now();
        for (const p of procs) if (p.child.connected) p.child.send({ stop: true }, () => {});
      } else if (s.restart && srv && !restartAt.length && costOfAFault(missing) && Date.now() - lastFaultEnded >= REFAULT_MS) {
        restartAt.push(Date.now());
      }
    }
    await sleep(20);
  }
  const seconds = ((stoppedAt === Infinity ? Date.now() : stoppedAt) - started) / 1000;
  const hung = [...procs];
  for (const p of hung) p.child.kill("SIGKILL");
  await Promise.all(hung.map((p) => p.exited));
  await sleep(10);
  const crashed = outputs.filter((o) => !o.killed && o.code !== 0);
  if (scratch) rmSync(scratch, { recursive: true, force: true });

  const history = historySoFar();
  const report = judge(history, store, { maxReported: 20 });
  const stats = outputs.map((o) => {
    try {
      return JSON.parse(o.out.trim().split("\n").pop());
    } catch {
      return {};
    }
  });
  const sum = (k) => stats.reduce((n, x) => n + (x[k] ?? 0), 0);
  const grants = countGrants(history);
  const injected = countInjected(history);
  const notReplicated = countNotReplicated(history);
  // What a fault cost in grants: fences handed out more than once (each a grant lost by the store
  // and given again), and the grants answered while a store fault was under way.
  const fenced = history.filter((e) => e.type === "ok" && e.op === "acquire" && e.fence != null);
  const perFence = new Map();
  for (const e of fenced) perFence.set(`${e.key}\0${e.fence}`, (perFence.get(`${e.key}\0${e.fence}`) ?? 0) + 1);
  const fencesReused = [...perFence.values()].filter((n) => n > 1).length;
  const storeFaults = history.filter((e) => e.type === "restart");
  const faultGrants = fenced.filter((e) => storeFaults.some((r) => e.t1 >= r.t0 && e.t0 <= r.t1)).length;
  const staleRefused = countStaleRefused(history);
  const takenOver = countTakenOver(history, kills);
  const row = {
    store,
    primitive,
    scenario,
    variant,
    seconds: Math.round(seconds * 10) / 10,
    processes: nextId,
    operations: report.operations,
    grants,
    faults: faults.kill + faults.stop + faults.restart + injected,
    staleRefused,
    takenOver,
    storeErrors: sum("errors"),
    refusedEarly: sum("refusedEarly"),
    violations: report.violationCount,
    kinds: [...new Set(report.violations.map((v) => v.kind))],
    losses: report.lossCount ?? report.losses.length,
    lossKinds: [...new Set(report.losses.map((v) => v.kind))],
    notReplicated,
    fencesReused,
    faultGrants,
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
    if (s.victim === "kill" && takenOver === 0) problems.push("no killed holder's key was granted again");
    if (s.victim === "stop" && faults.stop === 0) problems.push("no holder was stopped");
    if (s.victim === "stop" && staleRefused === 0) problems.push("no stopped holder's stale write was refused");
    if (s.restart && faults.restart === 0) problems.push("the store was not restarted");
    if (ACROSS_LEADERS.has(scenario) && countGrantsAfterFault(history) === 0) problems.push("no key was granted after the store fault ended");
    if (s.errorRate && injected === 0) problems.push("no store call failed");
    if (s.restart && store === "redis" && (report.lossCount ?? report.losses.length) === 0) problems.push("Redis without AOF restarted and no loss was detected");
    if (s.restart && store !== "redis" && !lossyRestart && (report.lossCount ?? report.losses.length) > 0) problems.push("a persistent store's restart was excused as a loss");
    // The takeover must cost the store as shipped something, or the option's clean run proves nothing.
    if (scenario === "takeover" && store === "redis-cluster" && (report.lossCount ?? report.losses.length) === 0) {
      problems.push("a takeover after unreplicated grants lost none: the fault did not bite");
    }
    // A waiting acquire answers no only once its timeout has run out.
    if (row.refusedEarly > 0) problems.push(`${row.refusedEarly} campaigns were refused before their wait ran out`);
    if (store === "redis-cluster-wait" && notReplicated === 0) problems.push("no grant was refused for want of a replica: waitForReplicas was not exercised");
  } else if (report.violationCount === 0) {
    problems.push(`the ${variant} store passed: this scenario cannot tell it from a correct one`);
  }
  row.problems = problems;
  return row;
}

const rows = [];
const servers = new Map();
let failed = false;
try {
  let seed = Number(value("--seed", 1));
  for (const run of runs) {
    const kind = serverKind(run.store);
    if (!servers.has(kind)) {
      for (const [k, srv] of servers) {
        if (srv) await srv.stop();
        servers.delete(k);
      }
      servers.set(kind, await server(kind));
    }
    const started = Date.now();
    const row = await runOne(run, seed++, servers.get(kind));
    rows.push(row);
    const verdict = row.problems.length ? "FAIL" : "ok";
    if (row.problems.length) failed = true;
    console.log(
      `${verdict.padEnd(4)} ${row.store}/${row.primitive}/${row.scenario}/${row.variant}: ${row.operations} ops, ${row.grants} grants, ` +
        `${row.faults} faults, ${row.violations} violations${row.kinds.length ? ` (${row.kinds.join(", ")})` : ""}, ` +
        `${row.losses} losses${row.lossKinds.length ? ` (${row.lossKinds.join(", ")})` : ""}, ` +
        `${row.scenario === "takeover" ? `${row.fencesReused} fences granted twice, ${row.faultGrants} grants answered during the takeover, ` : ""}` +
        `${row.notReplicated ? `${row.notReplicated} grants refused unreplicated, ` : ""}` +
        `${row.refusedEarly ? `${row.refusedEarly} campaigns refused before their wait ran out, ` : ""}` +
        `${((Date.now() - started) / 1000).toFixed(1)} s${row.problems.length ? `\n     ${row.problems.join("\n     ")}` : ""}`,
    );
  }
} finally {
  for (const srv of servers.values()) if (srv) await srv.stop();
}

// One line per store × scenario (its correct run, and which broken stores it caught), then every run.
const violations = (r) => `${r.violations}${r.kinds.length ? ` (${r.kinds.join(", ")})` : ""}`;
const scenarioRows = rows.filter((r) => r.variant === "correct");
const brokenRuns = (r) =>
  rows.filter((b) => b.store === r.store && b.primitive === r.primitive && b.scenario === r.scenario && b.variant !== "correct");
const caught = (r) => {
  const runsOf = brokenRuns(r);
  const missed = runsOf.filter((b) => b.violations === 0).map((b) => b.variant);
  const each = runsOf.map((b) => `${b.variant} ${b.violations}`).join(", ");
  return `${runsOf.length - missed.length}/${runsOf.length} (${each}${missed.length ? `; missed: ${missed.join(", ")}` : ""})`;
};
const overview = [
  "| store | primitive | scenario | seconds | processes | operations | grants | faults injected | stale writes refused | killed holders' keys granted again | violations | losses | broken stores caught (violations each) |",
  "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
  ...scenarioRows.map(
    (r) =>
      `| ${r.store} | ${r.primitive} | ${r.scenario} | ${r.seconds} | ${r.processes} | ${r.operations} | ${r.grants} | ${r.faults} | ` +
      `${SCENARIOS[r.scenario].victim === "stop" ? r.staleRefused : "–"} | ${SCENARIOS[r.scenario].victim === "kill" ? r.takenOver : "–"} | ` +
      `${violations(r)} | ${r.losses} | ${caught(r)} |`,
  ),
].join("\n");
const table = [
  "| store | primitive | scenario | variant | seconds | processes | operations | grants | faults injected | stale writes refused | violations | losses |",
  "|---|---|---|---|---|---|---|---|---|---|---|---|",
  ...rows.map(
    (r) =>
      `| ${r.store} | ${r.primitive} | ${r.scenario} | ${r.variant} | ${r.seconds} | ${r.processes} | ${r.operations} | ${r.grants} | ${r.faults} | ${r.staleRefused} | ${violations(r)} | ${r.losses} |`,
  ),
].join("\n");
const total = (k, list = scenarioRows) => list.reduce((n, r) => n + r[k], 0);
const broken = rows.filter((r) => r.variant !== "correct");
const totals =
  `Correct stores: ${total("operations")} operations, ${total("grants")} grants, ${total("faults")} faults injected, ` +
  `${total("violations")} violations, ${total("losses")} losses in ${Math.round(total("seconds"))} s of runs. ` +
  `Broken stores caught: ${broken.filter((r) => r.violations > 0).length} of ${broken.length} runs` +
  [...VARIANTS, ...Object.values(OWN_BROKEN), ...Object.values(SOAK_BROKEN).flat(), ...Object.values(PRIMITIVES).map((p) => p.broken)].map((v) => {
    const of = broken.filter((r) => r.variant === v);
    return of.length ? `; ${v} ${of.filter((r) => r.violations > 0).length}/${of.length}` : "";
  }).join("") +
  ".";
writeFileSync(join(resultsDir, "summary.md"), `${overview}\n\n${totals}\n\nEvery run:\n\n${table}\n`);
writeFileSync(join(resultsDir, "summary.json"), JSON.stringify(rows, null, 2));
console.log(`\n${overview}\n\n${totals}\n\nhistories and reports: ${resultsDir}`);
process.exit(failed ? 1 : 0);
