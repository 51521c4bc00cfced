// `make bench`: keel-lock side by side with the locks users would pick instead, and with a plain-JS
// floor, in ONE process run, rounds interleaved (A, B, C, A, B, C, …) so drift on this shared,
// noisy machine hits every contender alike. Ratios are per-round pairs (keel ÷ peer in the same
// round), medians over rounds. A full run (every section, not --quick) writes
// bench/results/latest.json and bench/results/results.md and rewrites the summary at the top of
// bench/README.md from them (bench/lib/summary.mjs); any other run writes
// bench/results/partial.json only. Prints the markdown to stdout.
//
//   node run.mjs [--quick] [--only=1,2,2b,3,4,5,6,7,8,9,10,11]
import { spawnSync } from "node:child_process";
import { readFileSync, writeFileSync, mkdirSync, existsSync, readdirSync, statSync } from "node:fs";
import { gzipSync } from "node:zlib";
import os from "node:os";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { performance } from "node:perf_hooks";

import Redis from "ioredis";
import { Mutex as AsyncMutex } from "async-mutex";
import { Redlock } from "@sesamecare-oss/redlock";
import { Mutex as RedisSemaphoreMutex } from "redis-semaphore";
import { createLock as createUniversalLock, IoredisAdapter } from "redlock-universal";

import pg from "pg";

import { lock, setLockStore, getLockStore, MemoryLockStore } from "../pkg/node/index.mjs";
import { redisLockStore } from "../pkg/stores/redis.js";
import { databaseLockStore } from "../pkg/stores/sql.js";
import { AsyncMapStore, FloorLock, FloorLockAsync, FloorStore } from "./lib/floor.mjs";
import { median, summarize, round } from "./lib/stats.mjs";
import { startRedis, commandStats, statsDelta } from "./lib/redis-server.mjs";
import { startPostgres } from "./lib/postgres.mjs";
import { buildWorkers, startWorkerd, startWorkers } from "./lib/workerd.mjs";
import { staggered, orderStats } from "./lib/contention.mjs";
import { durableObjectUncontended, durableObjectUncontendedMarkdown } from "./lib/durable-object-uncontended.mjs";
import { semaphoreInIsolate, semaphoreRedis, semaphoreDurableObject, semaphoreMarkdown } from "./lib/semaphores.mjs";
import { multiKeyRedis, multiKeyMarkdown } from "./lib/multi.mjs";
import { replicasRedis, replicasMarkdown } from "./lib/replicas.mjs";
import { writeSummary } from "./lib/summary.mjs";
import { cliStartup, cliStartupMarkdown } from "./lib/cli-startup.mjs";
import { etcdSection, etcdMarkdown } from "./lib/etcd.mjs";

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, "..");
const argv = process.argv.slice(2);
const QUICK = argv.includes("--quick");
const SECTIONS = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11];
const ONLY = (argv.find((a) => a.startsWith("--only="))?.slice(7) ?? SECTIONS.join(",")).split(",").map(Number);
// Every section ran (and not --quick): the results are written as the latest full run.
const FULL = !QUICK && SECTIONS.every((n) => ONLY.includes(n));
// Section 2b (Durable Object, uncontended) runs in a full run, or when named: --only=2b.
const DO_UNCONTENDED = !argv.some((a) => a.startsWith("--only=")) || argv.find((a) => a.startsWith("--only=")).slice(7).split(",").includes("2b");
const scale = (n) => (QUICK ? Math.max(1, Math.round(n / 5)) : n);

const TTL = 30_000; // every lock, every library
const pkgVersion = (p) => JSON.parse(readFileSync(join(HERE, "node_modules", p, "package.json"), "utf8")).version;
const MINIFLARE_VERSION = pkgVersion("miniflare");
const WRANGLER_VERSION = pkgVersion("wrangler");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const log = (...a) => console.error("[bench]", ...a);
const results = { meta: {}, sections: {} };
const started = performance.now();
// The package's default store, before any section installs another (section 5 runs on it).
const DEFAULT_STORE = getLockStore();

// Every contention-with-arrival-order scenario (1b ordered, 3, 3b, 3c): WAITERS waiters on one
// key, waiter i started ORDER_GAP_MS after waiter i − 1, each holding the key for CS_MS (sleep)
// and waiting up to WAIT_TIMEOUT ms.
const WAITERS = 32;
const ORDER_GAP_MS = 2;
const CS_MS = 5;
const WAIT_TIMEOUT = 10_000;
const csSleep = () => sleep(CS_MS);

/** A contention table row from per-round records { acquired, failed, gaps, overlaps, overtakes, totalMs, requests }. */
function contentionRow(name, recs, extra = {}) {
  const acquired = recs.reduce((s, r) => s + r.acquired, 0);
  const gaps = summarize(recs.flatMap((r) => r.gaps));
  const sum = (f) => recs.reduce((s, r) => s + (r[f] ?? 0), 0);
  return {
    impl: name,
    acquired,
    failed: sum("failed"),
    overlaps: sum("overlaps"),
    overtakes: sum("overtakes"),
    overtakesPerRound: recs.map((r) => r.overtakes),
    requestsPerAcquisition: recs.every((r) => r.requests === undefined) ? null : round(sum("requests") / acquired, 2),
    handOffP50ms: round(gaps.p50, 3),
    handOffP99ms: round(gaps.p99, 3),
    drainMs: round(median(recs.map((r) => r.totalMs)), 0),
    roundsDrainMs: recs.map((r) => round(r.totalMs, 0)),
    ...extra,
  };
}

// Yield to the event loop between rounds so timers/GC from one contender do not land in the next.
const settle = () => new Promise((r) => setImmediate(r));

/** Runs `rounds` interleaved rounds of every contender; `body(impl)` returns a round's record. */
async function interleave(contenders, rounds, body) {
  const perImpl = Object.fromEntries(contenders.map((c) => [c.name, []]));
  for (let r = 0; r < rounds; r++) {
    // Rotate the start so no contender always runs first in a round.
    for (let k = 0; k < contenders.length; k++) {
      const c = contenders[(r + k) % contenders.length];
      await settle();
      perImpl[c.name].push(await body(c));
    }
  }
  return perImpl;
}

/** Median over rounds of (value of `name` ÷ value of `base`) in the same round. */
function pairedRatio(perImpl, name, base, field) {
  const a = perImpl[name];
  const b = perImpl[base];
  return median(a.map((rec, i) => rec[field] / b[i][field]));
}

// ---------------------------------------------------------------------------------------------
// (1) In-isolate: memory store vs the plain-JS floor vs async-mutex

async function inIsolate() {
  const memory = new MemoryLockStore();
  setLockStore(memory);
  const floorStore = new FloorStore();
  const mutexes = new Map();
  const mutexFor = (key) => {
    let m = mutexes.get(key);
    if (m === undefined) mutexes.set(key, (m = new AsyncMutex()));
    return m;
  };
  const fn = () => 1;
  const reused = lock("iso:reused", TTL);

  const contenders = [
    { name: "keel-lock", run: (key, f, o) => lock(key, TTL).run(f, o) },
    { name: "floor (plain JS)", run: (key, f, o) => new FloorLock(floorStore, key, TTL).run(f, o) },
    { name: "async-mutex", run: (key, f) => mutexFor(key).runExclusive(f) },
    { name: "keel-lock, reused handle", run: (_key, f, o) => reused.run(f, o), uncontendedOnly: true },
  ];

  // Uncontended: one caller, sequential run()s on one key.
  const OPS = scale(20_000);
  const ROUNDS = QUICK ? 3 : 9;
  // OPS sequential run()s, run i on keyOf(i): once untimed, for the throughput (the ratios), then
  // once with each run timed, for the percentiles. Reading the clock twice per run costs about
  // as much as a quarter of a run here, the same for every contender, so throughput measured
  // through it would pull every ratio towards 1.
  const sequential = (keyOf) => async (c) => {
    const t0 = performance.now();
    for (let i = 0; i < OPS; i++) {
      const r = await c.run(keyOf(i), fn);
      if (Array.isArray(r) && r[0] !== true) throw new Error(`${c.name}: uncontended run() did not run`);
    }
    const ms = performance.now() - t0;
    const lat = new Float64Array(OPS);
    for (let i = 0; i < OPS; i++) {
      const s = performance.now();
      await c.run(keyOf(i), fn);
      lat[i] = performance.now() - s;
    }
    return { opsPerSec: (OPS * 1000) / ms, lat };
  };
  const uncontended = sequential(() => "iso:uc");
  log("(1) in-isolate uncontended: warm-up");
  for (const c of contenders) await uncontended(c);
  log(`(1) in-isolate uncontended: ${ROUNDS} rounds × ${OPS} ops`);
  const uc = await interleave(contenders, ROUNDS, uncontended);

  // The same over many keys, as an application locking one entity at a time does: run i takes
  // key i mod 1000 (a new handle per run; the reused handle has one key, so it sits this out).
  const KEYS = Array.from({ length: 1000 }, (_, i) => `iso:entity:${i}`);
  const manyKeys = sequential((i) => KEYS[i % KEYS.length]);
  const mContenders = contenders.filter((c) => !c.uncontendedOnly);
  for (const c of mContenders) await manyKeys(c);
  log(`(1) in-isolate uncontended, ${KEYS.length} keys: ${ROUNDS} rounds × ${OPS} ops`);
  const mk = await interleave(mContenders, ROUNDS, manyKeys);

  // Contended: N callers on one key, each doing K runs that wait (timeout), a critical section
  // that spans one macrotask (setImmediate), so the others really find the key held.
  const N = 16;
  const K = scale(10);
  // One round is ~1 ms of keel-lock or async-mutex work, which a GC pause or the load can move by
  // half: 31 rounds of those two (9 moved the median between 0.2 and 0.6 from run to run); the
  // polling floor takes ~0.7 s a round, so it is measured against keel-lock in 3 rounds of its own.
  const C_ROUNDS = QUICK ? 1 : 31;
  const FLOOR_ROUNDS = QUICK ? 1 : 3;
  const csFn = () => new Promise((r) => setImmediate(() => r(1)));
  const contended = async (c) => {
    const lat = [];
    let failed = 0;
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: N }, async () => {
        for (let i = 0; i < K; i++) {
          const s = performance.now();
          const r = await c.run("iso:contended", csFn, { timeout: 10_000 });
          if (Array.isArray(r) && r[0] === false) failed++;
          else lat.push(performance.now() - s);
        }
      }),
    );
    const ms = performance.now() - t0;
    return { opsPerSec: (lat.length * 1000) / ms, lat, failed };
  };
  const cContenders = contenders.filter((c) => !c.uncontendedOnly);
  // One unrecorded round each first, as every other section does: the waiting path's code is
  // not the uncontended one's, and is otherwise still being compiled in the first rounds.
  log("(1) in-isolate contended: warm-up");
  for (const c of cContenders) await contended(c);
  log(`(1) in-isolate contended: ${C_ROUNDS} rounds × ${N} callers × ${K} runs`);
  const polls = (c) => c.name === "floor (plain JS)";
  const ct = await interleave(cContenders.filter((c) => !polls(c)), C_ROUNDS, contended);
  const ctFloor = await interleave(cContenders.filter((c) => c.name === "keel-lock" || polls(c)), FLOOR_ROUNDS, contended);

  // Contended, arrival order known: WAITERS one-shot waiters started ORDER_GAP_MS apart.
  const O_ROUNDS = QUICK ? 1 : 3;
  const ordered = async (c) => {
    const calls0 = floorStore.acquireCalls;
    const r = await staggered((f, timeout) => c.run("iso:ordered", f, { timeout }).then((x) => !Array.isArray(x) || x[0] === true), {
      waiters: WAITERS,
      gapMs: ORDER_GAP_MS,
      timeout: WAIT_TIMEOUT,
      criticalSection: csSleep,
    });
    const stats = orderStats(r.spans);
    // Only the floor's store calls are visible from JS (acquire attempts + one release each).
    const requests = c.name === "floor (plain JS)" ? floorStore.acquireCalls - calls0 + r.spans.length : undefined;
    return { ...r, ...stats, acquired: r.spans.length, requests };
  };
  log(`(1) in-isolate contended, ordered arrival: ${O_ROUNDS} rounds × ${WAITERS} waiters ${ORDER_GAP_MS} ms apart`);
  const ord = await interleave(cContenders, O_ROUNDS, ordered);

  const table = (perImpl, list) =>
    list.map((c) => {
      const recs = perImpl[c.name];
      const all = summarize(recs.flatMap((r) => Array.from(r.lat)));
      return {
        impl: c.name,
        opsPerSec: round(median(recs.map((r) => r.opsPerSec)), 0),
        p50us: round(all.p50 * 1000, 1),
        p99us: round(all.p99 * 1000, 1),
        keelOverThis: round(pairedRatio(perImpl, "keel-lock", c.name, "opsPerSec"), 3),
        failed: recs.reduce((s, r) => s + (r.failed ?? 0), 0),
        roundsOpsPerSec: recs.map((r) => round(r.opsPerSec, 0)),
      };
    });
  results.sections.inIsolate = {
    uncontended: { opsPerRound: OPS, rounds: ROUNDS, rows: table(uc, contenders) },
    manyKeys: { keys: KEYS.length, opsPerRound: OPS, rounds: ROUNDS, rows: table(mk, mContenders) },
    contended: {
      callers: N,
      runsPerCaller: K,
      rounds: C_ROUNDS,
      floorRounds: FLOOR_ROUNDS,
      criticalSection: "one setImmediate",
      timeoutMs: 10_000,
      rows: cContenders.map((c) => table(polls(c) ? ctFloor : ct, [c])[0]),
    },
    ordered: {
      waiters: WAITERS,
      gapMs: ORDER_GAP_MS,
      criticalSectionMs: CS_MS,
      timeoutMs: WAIT_TIMEOUT,
      rounds: O_ROUNDS,
      rows: cContenders.map((c) =>
        contentionRow(c.name, ord[c.name], { keelOverThisDrain: round(pairedRatio(ord, "keel-lock", c.name, "totalMs"), 3) }),
      ),
    },
  };
}

// ---------------------------------------------------------------------------------------------
// (2a) run() over an async JS store: a Map answering through already-resolved promises (no I/O),
// keel-lock (setLockStore(store), lock(key).run(fn)) vs the plain-JS floor driving the same store
// object. What remains is each side's cost per run() of a store that answers with promises —
// for keel-lock, the JS-store path (wasm → store method → promise → back into wasm).

async function asyncStoreRuns() {
  const store = new AsyncMapStore();
  const fn = () => 1;
  const contenders = [
    { name: "keel-lock", run: (key) => lock(key, TTL).run(fn) },
    { name: "floor (plain JS)", run: (key) => new FloorLockAsync(store, key, TTL).run(fn) },
  ];
  setLockStore(store);
  const OPS = scale(20_000);
  const ROUNDS = QUICK ? 3 : 9;
  // Untimed for the throughput, then timed per run for the percentiles, as in section 1 (the
  // loops are written out in both: a shared helper would put an async call of its own into
  // every run it measures).
  const body = async (c) => {
    const t0 = performance.now();
    for (let i = 0; i < OPS; i++) {
      const r = await c.run("async:uc");
      if (r[0] !== true) throw new Error(`${c.name}: run() over the async store did not run`);
    }
    const ms = performance.now() - t0;
    const lat = new Float64Array(OPS);
    for (let i = 0; i < OPS; i++) {
      const s = performance.now();
      await c.run("async:uc");
      lat[i] = performance.now() - s;
    }
    return { ms, opsPerSec: (OPS * 1000) / ms, lat };
  };
  log("(2a) async JS store: warm-up");
  for (const c of contenders) await body(c);
  log(`(2a) async JS store: ${ROUNDS} rounds × ${OPS} runs`);
  const per = await interleave(contenders, ROUNDS, body);
  results.sections.asyncStore = {
    store: "AsyncMapStore (bench/lib/floor.mjs): a Map, every answer an already-resolved promise, acquire answers { fence }",
    opsPerRound: OPS,
    rounds: ROUNDS,
    rows: contenders.map((c) => {
      const recs = per[c.name];
      const all = summarize(recs.flatMap((r) => Array.from(r.lat)));
      return {
        impl: c.name,
        opsPerSec: round(median(recs.map((r) => r.opsPerSec)), 0),
        p50us: round(all.p50 * 1000, 1),
        p99us: round(all.p99 * 1000, 1),
        keelTimeOverThis: round(pairedRatio(per, "keel-lock", c.name, "ms"), 3),
        roundsOpsPerSec: recs.map((r) => round(r.opsPerSec, 0)),
      };
    }),
  };
}

// ---------------------------------------------------------------------------------------------
// Redis contenders: all through ioredis 5, each with its own connection to the same server.

/** An ioredis client whose sendCommand is counted: one call = one request = one round trip. */
function countedClient(port) {
  const client = new Redis({ port, host: "127.0.0.1", lazyConnect: true, enableAutoPipelining: false });
  client.requests = 0;
  const send = client.sendCommand.bind(client);
  client.sendCommand = (...args) => {
    client.requests++;
    return send(...args);
  };
  return client;
}

async function redisContenders(port) {
  const clients = [];
  const make = async () => {
    const c = countedClient(port);
    await c.connect();
    clients.push(c);
    return c;
  };
  const keelClient = await make();
  const keelStore = redisLockStore(keelClient);
  // The same waiting store, used by callers with a short retryDelay: the safety-net look must
  // not follow it.
  const keelShortDelayClient = await make();
  const keelShortDelayStore = redisLockStore(keelShortDelayClient);
  // The same store without its waiting pair: keel-lock then polls acquire every retryDelay.
  const keelPollClient = await make();
  const { acquire, release, extend, isLocked, remainingTime } = redisLockStore(keelPollClient);
  const keelPollStore = { acquire, release, extend, isLocked, remainingTime };
  const sesameClient = await make();
  const redlock = new Redlock([sesameClient]); // library defaults: retryCount 10, retryDelay 200, retryJitter 200
  redlock.on("error", () => {}); // contention makes it emit ResourceLockedError; documented to be ignored
  const semClient = await make();
  const uniClient = await make();
  const uniAdapter = new IoredisAdapter(uniClient);

  const contenders = [
    {
      name: "keel-lock (redisLockStore)",
      client: keelClient,
      settings: "lock(key, 30000).run(fn, { timeout }) — waits in Redis (acquireOrWait: FIFO queue, the release script hands over and PUBLISHes); safety-net look every retryDelay (default 50 ms)",
      async run(key, fn, timeout) {
        setLockStore(keelStore);
        const [ran] = await lock(key, TTL).run(fn, timeout ? { timeout } : undefined);
        return ran;
      },
      // Section 2 installs the store once per round, as an application does once at start-up,
      // and times run() alone (setLockStore itself costs several µs: it inspects the store and
      // drops the handles' cached binding).
      install: () => setLockStore(keelStore),
      async runInstalled(key, fn) {
        const [ran] = await lock(key, TTL).run(fn);
        return ran;
      },
    },
    {
      name: "keel-lock (redisLockStore), retryDelay 10",
      client: keelShortDelayClient,
      contentionOnly: true,
      settings: "lock(key, 30000).run(fn, { timeout, retryDelay: 10 }) — the same waiting store: its safety-net look stays at safetyNetMs (1 s), whatever retryDelay",
      async run(key, fn, timeout) {
        setLockStore(keelShortDelayStore);
        const [ran] = await lock(key, TTL).run(fn, timeout ? { timeout, retryDelay: 10 } : undefined);
        return ran;
      },
    },
    {
      name: "keel-lock, polling (store without acquireOrWait)",
      client: keelPollClient,
      contentionOnly: true,
      settings: "the same redisLockStore with only its five LockStore methods: keel-lock polls acquire every retryDelay (default 50 ms)",
      async run(key, fn, timeout) {
        setLockStore(keelPollStore);
        const [ran] = await lock(key, TTL).run(fn, timeout ? { timeout } : undefined);
        return ran;
      },
    },
    {
      name: "@sesamecare-oss/redlock",
      client: sesameClient,
      settings: "redlock.using([key], 30000, fn) — defaults (retryDelay 200, retryJitter 200, retryCount 10; contention: retryCount = timeout/200)",
      async run(key, fn, timeout) {
        try {
          if (timeout) await redlock.using([key], TTL, { retryCount: Math.ceil(timeout / 200) }, fn);
          else await redlock.using([key], TTL, fn);
          return true;
        } catch (e) {
          if (e?.name === "ExecutionError") return false;
          throw e;
        }
      },
    },
    {
      name: "redis-semaphore Mutex",
      client: semClient,
      settings: "new Mutex(client, key, { lockTimeout: 30000, acquireTimeout }) acquire/try/finally release — defaults (retryInterval 10, refreshInterval 0.8·lockTimeout)",
      async run(key, fn, timeout) {
        const m = new RedisSemaphoreMutex(semClient, key, { lockTimeout: TTL, ...(timeout ? { acquireTimeout: timeout } : {}) });
        try {
          await m.acquire();
        } catch (e) {
          if (/timeout|attempts/i.test(String(e?.message))) return false;
          throw e;
        }
        try {
          await fn();
        } finally {
          await m.release();
        }
        return true;
      },
    },
    {
      name: "redlock-universal",
      client: uniClient,
      settings: "createLock({ adapter: IoredisAdapter, key, ttl: 30000 }).using(fn) — defaults (retryDelay 100, retryAttempts 3; contention: retryAttempts = timeout/100)",
      async run(key, fn, timeout) {
        const l = createUniversalLock({ adapter: uniAdapter, key, ttl: TTL, ...(timeout ? { retryAttempts: Math.ceil(timeout / 100) } : {}) });
        try {
          await l.using(fn);
          return true;
        } catch (e) {
          if (e?.name === "LockAcquisitionError" || /acquire/i.test(String(e?.message))) return false;
          throw e;
        }
      },
    },
  ];
  return {
    contenders,
    // keel-lock's store closes its pub/sub connection (the duplicate() it opened for waiting).
    async close() {
      await keelStore.close().catch(() => {});
      clients.forEach((c) => c.disconnect());
    },
  };
}

// (2) Redis, uncontended: run() ops/s, p50/p99, round trips per run().
async function redisUncontended(server, admin, contenders) {
  const fn = async () => 1;
  const configs = [
    { concurrency: 1, ops: scale(1_500) },
    { concurrency: 16, ops: scale(4_000) },
  ];
  const ROUNDS = QUICK ? 2 : 5;
  const out = [];
  for (const cfg of configs) {
    const body = async (c) => {
      c.install?.();
      const run = c.runInstalled ?? c.run;
      const before = await commandStats(admin);
      const req0 = c.client.requests;
      const lat = [];
      const perCaller = Math.ceil(cfg.ops / cfg.concurrency);
      const t0 = performance.now();
      await Promise.all(
        Array.from({ length: cfg.concurrency }, async (_, w) => {
          const key = `bench:uc:${w}`;
          for (let i = 0; i < perCaller; i++) {
            const s = performance.now();
            if (!(await run(key, fn))) throw new Error(`${c.name}: uncontended run() refused`);
            lat.push(performance.now() - s);
          }
        }),
      );
      const ms = performance.now() - t0;
      const runs = perCaller * cfg.concurrency;
      const cmds = statsDelta(before, await commandStats(admin));
      return { opsPerSec: (runs * 1000) / ms, lat, runs, requests: c.client.requests - req0, cmds };
    };
    log(`(2) redis uncontended, concurrency ${cfg.concurrency}: warm-up + ${ROUNDS} rounds × ${cfg.ops} runs`);
    for (const c of contenders) await body({ ...c, run: c.run }).catch((e) => log(c.name, "warm-up failed:", e.message));
    const per = await interleave(contenders, ROUNDS, body);
    out.push({
      concurrency: cfg.concurrency,
      runsPerRound: cfg.ops,
      rounds: ROUNDS,
      rows: contenders.map((c) => {
        const recs = per[c.name];
        const all = summarize(recs.flatMap((r) => r.lat));
        const runs = recs.reduce((s, r) => s + r.runs, 0);
        const byCommand = {};
        for (const r of recs) for (const [k, v] of Object.entries(r.cmds.byCommand)) byCommand[k] = (byCommand[k] ?? 0) + v;
        return {
          impl: c.name,
          settings: c.settings,
          opsPerSec: round(median(recs.map((r) => r.opsPerSec)), 0),
          p50ms: round(all.p50, 3),
          p99ms: round(all.p99, 3),
          keelOverThis: round(pairedRatio(per, contenders[0].name, c.name, "opsPerSec"), 3),
          roundTripsPerRun: round(recs.reduce((s, r) => s + r.requests, 0) / runs, 2),
          redisCommandsPerRun: round(recs.reduce((s, r) => s + r.cmds.total, 0) / runs, 2),
          commandsPerRun: Object.fromEntries(Object.entries(byCommand).map(([k, v]) => [k, round(v / runs, 2)])),
          roundsOpsPerSec: recs.map((r) => round(r.opsPerSec, 0)),
        };
      }),
    });
  }
  results.sections.redis = { server: `redis-server ${server.version}, 127.0.0.1, --save '' --appendonly no`, client: "ioredis 5.11.1, one connection per library", ttlMs: TTL, configs: out };
}

// (3) Contention and hand-off on Redis: WAITERS waiters on one key started ORDER_GAP_MS apart,
// CS_MS critical section. Requests are counted on each library's connection (keel-lock's pub/sub
// connection, a duplicate() opened once per store, carries SUBSCRIBE and the pushed messages and
// is not counted); Redis commands from INFO commandstats (PUBLISH and the scripts' inner
// commands included).
async function redisContention(admin, contenders) {
  const ROUNDS = QUICK ? 1 : 3;
  const body = async (c) => {
    const before = await commandStats(admin);
    const req0 = c.client.requests;
    const r = await staggered((fn, timeout) => c.run("bench:contended", fn, timeout), {
      waiters: WAITERS,
      gapMs: ORDER_GAP_MS,
      timeout: WAIT_TIMEOUT,
      criticalSection: csSleep,
    });
    const cmds = statsDelta(before, await commandStats(admin));
    return { ...r, ...orderStats(r.spans), acquired: r.spans.length, requests: c.client.requests - req0, cmds: cmds.total, byCommand: cmds.byCommand };
  };
  log("(3) redis contention: warm-up (one round each; opens keel-lock's pub/sub connection)");
  for (const c of contenders) await body(c);
  log(`(3) redis contention: ${ROUNDS} rounds × ${WAITERS} waiters ${ORDER_GAP_MS} ms apart, ${CS_MS} ms critical section`);
  const per = await interleave(contenders, ROUNDS, body);
  results.sections.contention = {
    waiters: WAITERS,
    gapMs: ORDER_GAP_MS,
    criticalSectionMs: CS_MS,
    timeoutMs: WAIT_TIMEOUT,
    rounds: ROUNDS,
    coldWait: await coldWaitCost(contenders[0]),
    handOff: "gap from one holder's fn end to the next holder's fn start (includes the release request)",
    rows: contenders.map((c) => {
      const recs = per[c.name];
      const acquired = recs.reduce((s, r) => s + r.acquired, 0);
      const byCommand = {};
      for (const r of recs) for (const [k, v] of Object.entries(r.byCommand)) byCommand[k] = (byCommand[k] ?? 0) + v;
      return contentionRow(c.name, recs, {
        settings: c.settings,
        redisCommandsPerAcquisition: round(recs.reduce((s, r) => s + r.cmds, 0) / acquired, 1),
        commandsPerAcquisition: Object.fromEntries(Object.entries(byCommand).map(([k, v]) => [k, round(v / acquired, 2)])),
        keelOverThisDrain: round(pairedRatio(per, contenders[0].name, c.name, "totalMs"), 3),
      });
    }),
  };
}

// What opening the pub/sub connection per burst costs one waited acquisition: a holder releases
// 2 ms after one waiter queued, on a store idle for longer than its idle close (cold: the
// waiter's enqueue opens the connection, and a hand-over published before it is subscribed is
// found by the look made once it is) and on a store kept subscribed by a second waiter on
// another key (warm). Hand-off = release sent → the waiter's fn starts; requests on the store's
// client connection.
async function coldWaitCost(keel) {
  const SAMPLES = QUICK ? 5 : 20;
  const sample = async (warm) => {
    keel.install();
    const keeper = warm ? lock("bench:cold:keeper", TTL) : null;
    let keeping = null;
    if (keeper) {
      await keeper.acquire();
      keeping = lock("bench:cold:keeper", TTL).run(() => {}, { timeout: 60_000 });
      await sleep(20);
    } else {
      await sleep(400); // past the store's idle close (250 ms): the subscriber is closed
    }
    const holder = lock("bench:cold", TTL);
    await holder.acquire();
    let started = 0;
    const waited = lock("bench:cold", TTL).run(() => (started = performance.now()), { timeout: 10_000 });
    await sleep(2);
    const req0 = keel.client.requests;
    const released = performance.now();
    await holder.release();
    await waited;
    const requests = keel.client.requests - req0;
    if (keeper) {
      await keeper.release();
      await keeping;
    }
    return { handOffMs: started - released, requests };
  };
  const out = {};
  for (const warm of [false, true]) {
    await sample(warm);
    const got = [];
    for (let i = 0; i < SAMPLES; i++) got.push(await sample(warm));
    const s = summarize(got.map((g) => g.handOffMs));
    out[warm ? "warm" : "cold"] = { samples: SAMPLES, handOffP50ms: round(s.p50, 3), handOffP99ms: round(s.p99, 3), requestsAfterEnqueue: round(got.reduce((a, g) => a + g.requests, 0) / SAMPLES, 2) };
  }
  return out;
}

// (3c) The same scenario on PostgreSQL (a throwaway cluster started here): keel-lock's
// databaseLockStore over a pg.Pool, waiting in the database (waiters table, the release hands
// over and NOTIFYs, one LISTEN connection per store) vs the same store without its waiting pair
// (keel-lock polls). No peer: none of the Redis peers speaks PostgreSQL. Statements are counted
// on the pool the store queries through (the LISTEN connection, checked out once, is not).
async function pgContention() {
  const server = await startPostgres();
  if (server.unavailable) {
    results.sections.contention.postgres = { measured: false, reason: server.unavailable };
    log("(3c) postgres skipped:", server.unavailable);
    return;
  }
  const pools = [];
  try {
    log(`(3c) postgres ${server.version} on port ${server.port}`);
    const counted = () => {
      const pool = new pg.Pool({ connectionString: server.connectionString, max: 10 });
      pool.on("error", () => {});
      pools.push(pool);
      const db = { statements: 0, query: (...args) => (db.statements++, pool.query(...args)) };
      return { pool, db };
    };
    const waiting = counted();
    const waitingStore = databaseLockStore(waiting.db, { driver: "pg", listen: () => waiting.pool.connect() });
    await waitingStore.createTable();
    const polling = counted();
    const { acquire, release, extend, isLocked, remainingTime } = databaseLockStore(polling.db, { driver: "pg" });
    const pollingStore = { acquire, release, extend, isLocked, remainingTime };
    const contenders = [
      { name: "keel-lock (databaseLockStore, pg)", db: waiting.db, store: waitingStore, settings: "lock(key, 30000).run(fn, { timeout }) — waits in the database (acquireOrWait: waiters table, the release hands over and NOTIFYs); safety-net look every retryDelay (default 50 ms)" },
      { name: "keel-lock, polling (store without acquireOrWait)", db: polling.db, store: pollingStore, settings: "the same store with only its five LockStore methods: keel-lock polls acquire every retryDelay (default 50 ms)" },
    ];
    const ROUNDS = QUICK ? 1 : 3;
    const body = async (c) => {
      const s0 = c.db.statements;
      setLockStore(c.store);
      const r = await staggered((fn, timeout) => lock("bench:contended", TTL).run(fn, { timeout }).then(([ran]) => ran), {
        waiters: WAITERS,
        gapMs: ORDER_GAP_MS,
        timeout: WAIT_TIMEOUT,
        criticalSection: csSleep,
      });
      return { ...r, ...orderStats(r.spans), acquired: r.spans.length, requests: c.db.statements - s0 };
    };
    log("(3c) postgres contention: warm-up");
    for (const c of contenders) await body(c);
    log(`(3c) postgres contention: ${ROUNDS} rounds × ${WAITERS} waiters ${ORDER_GAP_MS} ms apart`);
    const per = await interleave(contenders, ROUNDS, body);
    await waitingStore.close();
    results.sections.contention.postgres = {
      measured: true,
      server: `PostgreSQL ${server.version}, 127.0.0.1, fsync off, synchronous_commit off; pg 8.23.1 Pool (max 10)`,
      rounds: ROUNDS,
      requests: "statements sent through the store's pool (the LISTEN connection not counted)",
      rows: contenders.map((c) => contentionRow(c.name, per[c.name], { settings: c.settings, keelOverThisDrain: round(pairedRatio(per, contenders[0].name, c.name, "totalMs"), 3) })),
    };
  } finally {
    for (const pool of pools) await pool.end().catch(() => {});
    await server.stop();
  }
}

// (3b) The same scenario on the Durable Object store in local workerd (Miniflare): keel-lock's
// DurableObjectLockStore + LockDurableObject (a waiting run() is one acquireOrWait RPC that the
// object answers on hand-over) vs a plain-JS Durable Object lock that polls
// (bench/workers/floor.js). The waiters start ORDER_GAP_MS apart inside one request to the
// Worker; spans are taken there (Date.now(), ms resolution in workerd); RPCs are counted in the
// Worker by wrapping the namespace's stubs (bench/workers/keel.js).
const DO_CONTENDERS = [
  { name: "keel-lock (DurableObjectLockStore)", worker: "keel", settings: "lock(key, 30000).run(fn, { timeout }) — one acquireOrWait RPC per waiter, answered by the object on hand-over; one LockDurableObject per key" },
  { name: "floor: plain-JS Durable Object lock", worker: "floor", settings: "bench/workers/floor.js — one object per key, SQLite row, polling every 50 ms, no alarm" },
];

async function doContention() {
  const ROUNDS = QUICK ? 1 : 3;
  log("(3b) Durable Object contention: bundling the bench Workers from the packed package");
  const tb = performance.now();
  buildWorkers();
  const buildMs = performance.now() - tb;
  const w = await startWorkers(DO_CONTENDERS.map((c) => c.worker));
  try {
    const key = "bench:contended";
    const body = async (c) => {
      const t0 = performance.now();
      const r = await w.call(c.worker, "/contend", { key, waiters: WAITERS, csMs: CS_MS, timeout: WAIT_TIMEOUT, gapMs: ORDER_GAP_MS });
      const wallMs = performance.now() - t0;
      return { totalMs: r.totalMs, wallMs, acquired: r.spans.length, failed: r.failed, ...orderStats(r.spans), requests: r.requests, byMethod: r.byMethod };
    };
    log("(3b) Durable Object contention: warm-up");
    for (const c of DO_CONTENDERS) await body(c);
    log(`(3b) Durable Object contention: ${ROUNDS} rounds × ${WAITERS} waiters ${ORDER_GAP_MS} ms apart, ${CS_MS} ms critical section`);
    const per = await interleave(DO_CONTENDERS, ROUNDS, body);
    results.sections.contention ??= {};
    results.sections.contention.durableObject = {
      measured: true,
      runtime: `local workerd through Miniflare ${MINIFLARE_VERSION} (compatibility date 2026-04-26), Worker bundled by wrangler ${WRANGLER_VERSION} from the packed package`,
      bundleMs: round(buildMs, 0),
      waiters: WAITERS,
      gapMs: ORDER_GAP_MS,
      criticalSectionMs: CS_MS,
      timeoutMs: WAIT_TIMEOUT,
      rounds: ROUNDS,
      requests: "RPCs to the lock's Durable Object stub, counted in the Worker",
      handOff: "gap from one holder's fn end to the next holder's fn start, Date.now() inside workerd (ms resolution; includes the release RPC)",
      rows: DO_CONTENDERS.map((c) => {
        const recs = per[c.name];
        const acquired = recs.reduce((s, r) => s + r.acquired, 0);
        const byMethod = {};
        for (const r of recs) for (const [k, v] of Object.entries(r.byMethod)) byMethod[k] = (byMethod[k] ?? 0) + v;
        return contentionRow(c.name, recs, {
          settings: c.settings,
          requestsPerAcquisitionByMethod: Object.fromEntries(Object.entries(byMethod).map(([k, v]) => [k, round(v / acquired, 2)])),
          requestWallMs: round(median(recs.map((r) => r.wallMs)), 0),
          keelOverThisDrain: round(pairedRatio(per, DO_CONTENDERS[0].name, c.name, "totalMs"), 3),
        });
      }),
    };
  } finally {
    await w.dispose();
  }
}

// ---------------------------------------------------------------------------------------------
// (4) Size and start-up

function sizes() {
  const rows = [];
  const gz = (p) => gzipSync(readFileSync(p), { level: 9 }).length;
  const add = (label, files) => {
    const present = files.filter((f) => existsSync(f));
    if (present.length === 0) return;
    const raw = present.reduce((s, f) => s + statSync(f).size, 0);
    const gzip = present.reduce((s, f) => s + gz(f), 0);
    rows.push({ artefact: label, files: present.map((f) => relative(ROOT, f)), bytes: raw, gzipBytes: gzip });
  };
  const walk = (d) => (existsSync(d) ? readdirSync(d, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? walk(join(d, e.name)) : [join(d, e.name)])) : []);
  for (const build of ["node", "web", "workerd"]) {
    const dir = join(ROOT, "pkg/dist", build);
    add(`${build} .wasm`, [join(dir, "keel_lock_bg.wasm")]);
    const entry = { node: ["pkg/node/index.cjs", "pkg/node/index.mjs"], web: ["pkg/browser/index.js"], workerd: ["pkg/workerd/index.js"] }[build];
    add(`${build} JS glue (wasm-bindgen + snippets + entry)`, [join(dir, "keel_lock.js"), ...walk(join(dir, "snippets")).filter((f) => f.endsWith(".js")), ...entry.map((f) => join(ROOT, f))]);
  }
  results.sections.size = { gzipLevel: 9, rows };
}

function startup() {
  const N = QUICK ? 3 : 10;
  const kinds = ["keel-lock", "floor (plain JS)", "async-mutex"];
  const per = Object.fromEntries(kinds.map((k) => [k, []]));
  log(`(4) start-up: ${N} fresh node processes each`);
  for (let i = 0; i < N; i++) {
    for (const k of kinds) {
      const t0 = performance.now();
      const p = spawnSync(process.execPath, [join(HERE, "startup-child.mjs"), k], { encoding: "utf8" });
      const wall = performance.now() - t0;
      if (p.status !== 0) throw new Error(`startup child ${k} failed: ${p.stderr}`);
      per[k].push({ ...JSON.parse(p.stdout), wallMs: wall });
    }
  }
  results.sections.startup = {
    processes: N,
    measured: "inside a fresh `node` process: dynamic import of the package (instantiates the wasm) and the first lock(key).run(fn) on the memory store; wall = spawn → exit",
    rows: kinds.map((k) => ({
      impl: k,
      importMs: round(median(per[k].map((r) => r.importMs)), 2),
      firstRunMs: round(median(per[k].map((r) => r.firstRunMs)), 2),
      importPlusFirstRunMs: round(median(per[k].map((r) => r.importMs + r.firstRunMs)), 2),
      processWallMs: round(median(per[k].map((r) => r.wallMs)), 1),
    })),
  };
}

// (4b) Start-up in workerd, two ways: through Miniflare (a fresh `new Miniflare` → ready; Node
// sends each request with dispatchFetch), and in workerd itself (`workerd serve` on its own
// config → the socket listens; requests over HTTP) — what a deployed Worker pays, without
// Miniflare's work in Node on the bundle. Either way workerd loads the bundle's modules before it
// is ready (for keel-lock that compiles and instantiates the wasm); then the first request does
// lock(key).run(fn) on the Durable Object store (a new object for a fresh key), then warm
// requests doing the same on fresh keys. Same for the plain-JS Durable Object floor.
const STARTUP_HOSTS = {
  miniflare: {
    start: async (worker) => {
      const w = await startWorkers([worker]);
      return { call: (body) => w.call(worker, "/first", body), dispose: () => w.dispose() };
    },
    readyLabel: "new Miniflare → ready ms",
    title: "Start-up in workerd (Miniflare)",
    note: "Every request is a Node → workerd `dispatchFetch`; a fresh key means a new Durable Object (and its SQLite database), which dominates the warm fresh-key request for both.",
  },
  workerd: {
    start: async (worker) => {
      const w = await startWorkerd(worker);
      return { call: (body) => w.fetch("/first", body), dispose: () => w.dispose() };
    },
    readyLabel: "workerd serve → listening ms",
    title: "Start-up in workerd itself (`workerd serve`, no Miniflare)",
    note: "workerd listens once it has loaded the Worker's modules; requests are plain HTTP from Node. A fresh key means a new Durable Object (and its SQLite database).",
  },
};

async function workerdStartup(host) {
  const N = QUICK ? 2 : 5;
  const WARM = QUICK ? 5 : 20;
  const how = STARTUP_HOSTS[host];
  buildWorkers();
  const per = Object.fromEntries(DO_CONTENDERS.map((c) => [c.name, []]));
  log(`(4b) ${how.title}: ${N} fresh instances each, ${WARM} warm requests after the first`);
  for (let i = 0; i < N; i++) {
    for (let k = 0; k < DO_CONTENDERS.length; k++) {
      const c = DO_CONTENDERS[(i + k) % DO_CONTENDERS.length];
      await settle();
      const t0 = performance.now();
      const w = await how.start(c.worker);
      try {
        const t1 = performance.now();
        await w.call();
        const t2 = performance.now();
        const warm = [];
        for (let j = 0; j < WARM; j++) {
          const s = performance.now();
          await w.call();
          warm.push(performance.now() - s);
        }
        const sameKey = [];
        for (let j = 0; j < WARM; j++) {
          const s = performance.now();
          await w.call({ key: "startup:warm" });
          if (j > 0) sameKey.push(performance.now() - s); // j = 0 creates that key's object
        }
        per[c.name].push({ readyMs: t1 - t0, firstMs: t2 - t1, warmMs: median(warm), warmSameKeyMs: median(sameKey) });
      } finally {
        const t3 = performance.now();
        await w.dispose();
        per[c.name].at(-1) && (per[c.name].at(-1).disposeMs = performance.now() - t3);
      }
    }
  }
  results.sections.startup[host === "miniflare" ? "workerd" : "workerdDirect"] = {
    measured: true,
    host,
    instances: N,
    warmRequests: WARM,
    measuredHow: `Node-side wall times: ${how.readyLabel.replace(/ ms$/, "")} (workerd loads the bundle's modules first; keel-lock's wasm is compiled and instantiated at module load), the first request doing lock(freshKey).run(fn) on the Durable Object store (creates that key's object), median of warm requests doing the same on fresh keys, and median of warm requests on one already-created key (no object creation); medians over instances`,
    rows: DO_CONTENDERS.map((c) => {
      const recs = per[c.name];
      const first = median(recs.map((r) => r.firstMs));
      const warm = median(recs.map((r) => r.warmMs));
      return {
        impl: c.name,
        readyMs: round(median(recs.map((r) => r.readyMs)), 0),
        firstRequestMs: round(first, 1),
        warmRequestMs: round(warm, 2),
        warmSameKeyRequestMs: round(median(recs.map((r) => r.warmSameKeyMs)), 2),
        firstOverWarm: round(first / warm, 1),
        readyPlusFirstMs: round(median(recs.map((r) => r.readyMs + r.firstMs)), 0),
        disposeMs: round(median(recs.map((r) => r.disposeMs)), 0),
        keelOverThisReadyPlusFirst: round(median(per[DO_CONTENDERS[0].name].map((r, i) => (r.readyMs + r.firstMs) / (recs[i].readyMs + recs[i].firstMs))), 3),
      };
    }),
  };
}

// ---------------------------------------------------------------------------------------------
// Report

/** One contention table: requests column `reqLabel` (value `req(row)`), ratio column `ratioLabel`. */
function contentionTable(L, rows, reqLabel, req, ratioLabel) {
  L.push(`| implementation | acquired | timed out | ${reqLabel} | hand-off p50 ms | hand-off p99 ms | time to drain (ms) | overtakes (per round) | ${ratioLabel} |`, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
  for (const r of rows)
    L.push(`| ${r.impl} | ${r.acquired} | ${r.failed} | ${req(r)} | ${r.handOffP50ms} | ${r.handOffP99ms} | ${r.drainMs} | ${r.overtakes} (${r.overtakesPerRound.join(", ")}) | ${r.keelOverThisDrain} |`);
  if (rows.some((r) => r.overlaps > 0)) L.push("", `**Overlapping holders seen**: ${rows.filter((r) => r.overlaps > 0).map((r) => `${r.impl} ${r.overlaps}`).join(", ")}.`);
}

function markdown() {
  const L = [];
  const m = results.meta;
  L.push(`### keel-lock benchmark — ${m.date}`);
  L.push("");
  L.push(`Machine: ${m.cpu} × ${m.cores} cores, ${m.os}, Node ${m.node}; git ${m.commit}${m.dirty ? " (+ uncommitted changes in the tree)" : ""}. Load average at start ${m.loadStart.join(" / ")}, at end ${m.loadEnd?.join(" / ")}. Run took ${m.durationS} s.`);
  L.push(`Ratios are keel-lock ÷ that row, per round in the same run, median over rounds (>1 = keel-lock faster). Reproduce: \`make bench\`.`);
  const s = results.sections;
  if (s.inIsolate) {
    const u = s.inIsolate.uncontended;
    L.push("", `#### 1. In-isolate run(), memory store, uncontended (${u.rounds} interleaved rounds × ${u.opsPerRound} sequential runs)`, "");
    L.push("| implementation | run()/s | p50 µs | p99 µs | keel ÷ this (ops/s) |", "|---|---:|---:|---:|---:|");
    for (const r of u.rows) L.push(`| ${r.impl} | ${r.opsPerSec} | ${r.p50us} | ${r.p99us} | ${r.keelOverThis} |`);
    L.push("", "run()/s and the ratios from an untimed pass of each round; p50/p99 from a second pass that times each run (two clock reads per run, which would pull the ratios towards 1). The same in 2a.");
    const mk = s.inIsolate.manyKeys;
    if (mk) {
      L.push("", `The same over ${mk.keys} keys (run i takes key i mod ${mk.keys}, a new handle each; ${mk.rounds} rounds × ${mk.opsPerRound} runs):`, "");
      L.push("| implementation | run()/s | p50 µs | p99 µs | keel ÷ this (ops/s) |", "|---|---:|---:|---:|---:|");
      for (const r of mk.rows) L.push(`| ${r.impl} | ${r.opsPerSec} | ${r.p50us} | ${r.p99us} | ${r.keelOverThis} |`);
    }
    const c = s.inIsolate.contended;
    L.push("", `#### 1b. In-isolate, contended: ${c.callers} callers × ${c.runsPerCaller} waiting runs on one key, critical section = ${c.criticalSection} (${c.rounds} rounds; the polling floor against keel-lock in ${c.floorRounds ?? c.rounds} rounds of its own)`, "");
    L.push("| implementation | completed run()/s | p50 ms (incl. wait) | p99 ms | keel ÷ this | timed out |", "|---|---:|---:|---:|---:|---:|");
    for (const r of c.rows) L.push(`| ${r.impl} | ${r.opsPerSec} | ${round(r.p50us / 1000, 2)} | ${round(r.p99us / 1000, 2)} | ${r.keelOverThis} | ${r.failed} |`);
    const o = s.inIsolate.ordered;
    if (o) {
      L.push("", `Ordered arrival, in-isolate: ${o.waiters} waiters on one key started ${o.gapMs} ms apart, ${o.criticalSectionMs} ms critical section (sleep), timeout ${o.timeoutMs} ms (${o.rounds} rounds):`, "");
      contentionTable(L, o.rows, "store calls / acquisition", (r) => r.requestsPerAcquisition ?? "— (in-process)", "keel ÷ this (drain time, <1 = keel faster)");
    }
  }
  if (s.asyncStore) {
    const a = s.asyncStore;
    L.push("", `#### 2a. run() over an async JS store, uncontended (${a.rounds} interleaved rounds × ${a.opsPerRound} sequential runs; ${a.store})`, "");
    L.push("| implementation | run()/s | p50 µs | p99 µs | keel time ÷ this time (>1 = keel slower) |", "|---|---:|---:|---:|---:|");
    for (const r of a.rows) L.push(`| ${r.impl} | ${r.opsPerSec} | ${r.p50us} | ${r.p99us} | ${r.keelTimeOverThis} |`);
  }
  if (s.redis) {
    L.push("", `#### 2. Redis run(), uncontended (${s.redis.server}; ${s.redis.client})`, "");
    L.push("| implementation | concurrency | run()/s | p50 ms | p99 ms | keel ÷ this | round trips / run() | Redis commands / run() (incl. inside Lua) |", "|---|---:|---:|---:|---:|---:|---:|---:|");
    for (const cfg of s.redis.configs)
      for (const r of cfg.rows)
        L.push(`| ${r.impl} | ${cfg.concurrency} | ${r.opsPerSec} | ${r.p50ms} | ${r.p99ms} | ${r.keelOverThis} | ${r.roundTripsPerRun} | ${r.redisCommandsPerRun} (${Object.entries(r.commandsPerRun).map(([k, v]) => `${k} ${v}`).join(", ")}) |`);
  }
  if (s.durableObjectUncontended?.measured) L.push(...durableObjectUncontendedMarkdown(s.durableObjectUncontended));
  if (s.contention?.rows) {
    const c = s.contention;
    L.push("", `#### 3. Contention on Redis: ${c.waiters} waiters on one key started ${c.gapMs} ms apart, ${c.criticalSectionMs} ms critical section, timeout ${c.timeoutMs} ms (${c.rounds} rounds)`, "");
    contentionTable(L, c.rows, "requests / acquisition (Redis cmds)", (r) => `${r.requestsPerAcquisition} (${r.redisCommandsPerAcquisition})`, "keel ÷ this (drain time)");
    L.push("", `Hand-off = ${c.handOff}. Overtakes = pairs of waiters that acquired in the opposite order of their arrival (0 = first come, first served), summed over rounds. Requests counted on each library's connection; Redis commands from INFO commandstats, PUBLISH and the scripts' inner commands included.`);
    L.push("", "keel-lock's commands per acquisition: " + c.rows.filter((r) => r.impl.startsWith("keel")).map((r) => `${r.impl}: ${Object.entries(r.commandsPerAcquisition).map(([k, v]) => `${k} ${v}`).join(", ")}`).join("; ") + ".");
    if (c.coldWait) {
      const w = c.coldWait;
      L.push("", `One waited acquisition, the holder releasing 2 ms after the waiter queued (${w.cold.samples} samples each): on a store whose pub/sub connection was closed for being idle, hand-off p50 ${w.cold.handOffP50ms} ms / p99 ${w.cold.handOffP99ms} ms and ${w.cold.requestsAfterEnqueue} requests from the release on; on a store kept subscribed, ${w.warm.handOffP50ms} / ${w.warm.handOffP99ms} ms and ${w.warm.requestsAfterEnqueue}.`);
    }
  }
  if (s.contention?.durableObject?.measured) {
    const d = s.contention.durableObject;
    L.push("", `#### 3b. Contention on the Durable Object store: ${d.waiters} waiters on one key started ${d.gapMs} ms apart, ${d.criticalSectionMs} ms critical section, timeout ${d.timeoutMs} ms (${d.rounds} rounds; ${d.runtime})`, "");
    contentionTable(L, d.rows, "RPCs / acquisition", (r) => `${r.requestsPerAcquisition} (${Object.entries(r.requestsPerAcquisitionByMethod).map(([k, v]) => `${k} ${v}`).join(", ")})`, "keel ÷ this (drain time)");
    L.push("", `RPCs = ${d.requests}. Hand-off = ${d.handOff}. The waiters start inside one request to the Worker.`);
  }
  if (s.contention?.postgres) {
    const p = s.contention.postgres;
    if (!p.measured) L.push("", `#### 3c. Contention on PostgreSQL: not measured (${p.reason})`);
    else {
      L.push("", `#### 3c. Contention on PostgreSQL: the same ${WAITERS} waiters ${ORDER_GAP_MS} ms apart, ${CS_MS} ms critical section (${p.rounds} rounds; ${p.server})`, "");
      contentionTable(L, p.rows, "statements / acquisition", (r) => r.requestsPerAcquisition, "keel ÷ this (drain time)");
      L.push("", `Statements = ${p.requests}.`);
    }
  }
  if (s.size) {
    L.push("", "#### 4. Size (gzip -9) and start-up", "");
    L.push("| artefact | bytes | gzip bytes |", "|---|---:|---:|");
    for (const r of s.size.rows) L.push(`| ${r.artefact} | ${r.bytes} | ${r.gzipBytes} |`);
  }
  if (s.startup) {
    L.push("", `Start-up in Node, median of ${s.startup.processes} fresh processes each:`, "");
    L.push("| implementation | import ms | first run() ms | import + first run() ms | process wall ms |", "|---|---:|---:|---:|---:|");
    for (const r of s.startup.rows) L.push(`| ${r.impl} | ${r.importMs} | ${r.firstRunMs} | ${r.importPlusFirstRunMs} | ${r.processWallMs} |`);
  }
  for (const [field, host] of [["workerd", "miniflare"], ["workerdDirect", "workerd"]]) {
    const w = s.startup?.[field];
    if (!w?.measured) continue;
    const how = STARTUP_HOSTS[host];
    L.push("", `${how.title}, median of ${w.instances} fresh instances each; first vs warm request (median of ${w.warmRequests}), each doing lock(freshKey).run(fn) on the Durable Object store:`, "");
    L.push(`| implementation | ${how.readyLabel} | first request ms | warm request ms (fresh key) | first ÷ warm | warm request ms (existing key's object) | ready + first request ms | keel ÷ this (ready + first) |`, "|---|---:|---:|---:|---:|---:|---:|---:|");
    for (const r of w.rows) L.push(`| ${r.impl} | ${r.readyMs} | ${r.firstRequestMs} | ${r.warmRequestMs} | ${r.firstOverWarm} | ${r.warmSameKeyRequestMs} | ${r.readyPlusFirstMs} | ${r.keelOverThisReadyPlusFirst} |`);
    L.push("", how.note);
  }
  if (s.semaphoreInIsolate || s.semaphoreRedis || s.semaphoreDurableObject) L.push(...semaphoreMarkdown(s.semaphoreInIsolate, s.semaphoreRedis, s.semaphoreDurableObject));
  if (s.multiKeyRedis) L.push(...multiKeyMarkdown(s.multiKeyRedis));
  if (s.replicasRedis) L.push(...replicasMarkdown(s.replicasRedis));
  if (s.cliStartup) L.push(...cliStartupMarkdown(s.cliStartup));
  if (s.etcd) L.push(...etcdMarkdown(s.etcd));
  return L.join("\n") + "\n";
}

// ---------------------------------------------------------------------------------------------

const git = (...a) => spawnSync("git", a, { cwd: ROOT, encoding: "utf8" }).stdout.trim();
results.meta = {
  date: new Date().toISOString(),
  node: process.versions.node,
  cpu: os.cpus()[0]?.model ?? "?",
  cores: os.cpus().length,
  os: `${os.type()} ${os.release()}`,
  commit: git("rev-parse", "--short", "HEAD"),
  dirty: git("status", "--porcelain", "--untracked-files=no").length > 0,
  loadStart: os.loadavg().map((x) => round(x, 2)),
  quick: QUICK,
  versions: Object.fromEntries(
    ["async-mutex", "@sesamecare-oss/redlock", "redis-semaphore", "redlock-universal", "ioredis"].map((p) => [p, JSON.parse(readFileSync(join(HERE, "node_modules", p, "package.json"), "utf8")).version]),
  ),
};

let server;
let conns;
let admin;
try {
  if (ONLY.includes(1)) await inIsolate();
  if (ONLY.includes(2)) await asyncStoreRuns();
  if (ONLY.includes(5)) results.sections.semaphoreInIsolate = await semaphoreInIsolate({ quick: QUICK, log, interleave, pairedRatio, memoryStore: DEFAULT_STORE });
  if (ONLY.includes(2) || ONLY.includes(3) || ONLY.includes(6) || ONLY.includes(8)) {
    server = await startRedis();
    log(`redis-server ${server.version} on port ${server.port} (pid ${server.pid})`);
    admin = new Redis({ port: server.port, host: "127.0.0.1" });
    if (ONLY.includes(2) || ONLY.includes(3)) conns = await redisContenders(server.port);
    if (ONLY.includes(2)) await redisUncontended(server, admin, conns.contenders.filter((c) => !c.contentionOnly));
    if (ONLY.includes(3)) await redisContention(admin, conns.contenders);
    if (ONLY.includes(6)) {
      const makeClient = async () => {
        const c = countedClient(server.port);
        await c.connect();
        return c;
      };
      results.sections.semaphoreRedis = {
        server: `redis-server ${server.version}, 127.0.0.1, --save '' --appendonly no`,
        client: "ioredis 5.11.1, one connection per library",
        ...(await semaphoreRedis({ quick: QUICK, log, interleave, pairedRatio, admin, makeClient, settle })),
      };
    }
    if (ONLY.includes(8)) {
      const makeClient = async () => {
        const c = countedClient(server.port);
        await c.connect();
        return c;
      };
      results.sections.multiKeyRedis = await multiKeyRedis({ quick: QUICK, log, interleave, pairedRatio, makeClient, settle });
    }
  }
  if (ONLY.includes(9)) {
    results.sections.replicasRedis = await replicasRedis({
      quick: QUICK,
      log,
      interleave,
      pairedRatio,
      makeClient: async (port) => {
        const c = countedClient(port);
        await c.connect();
        return c;
      },
    });
  }
  if (ONLY.includes(7)) results.sections.semaphoreDurableObject = await semaphoreDurableObject({ quick: QUICK, log, interleave, pairedRatio });
  if (DO_UNCONTENDED) results.sections.durableObjectUncontended = await durableObjectUncontended({ quick: QUICK, log, interleave, pairedRatio });
  if (ONLY.includes(3)) {
    await conns?.close();
    conns = undefined;
    await doContention();
    results.sections.contention ??= {};
    await pgContention();
  }
  if (ONLY.includes(4)) {
    sizes();
    startup();
    await workerdStartup("miniflare");
    await workerdStartup("workerd");
  }
  if (ONLY.includes(10)) results.sections.cliStartup = cliStartup({ quick: QUICK, log });
  if (ONLY.includes(11)) {
    results.sections.etcd = await etcdSection({ quick: QUICK, log, interleave, pairedRatio, waiters: WAITERS, gapMs: ORDER_GAP_MS, criticalSectionMs: CS_MS, timeoutMs: WAIT_TIMEOUT });
  }
} finally {
  await conns?.close();
  admin?.disconnect();
  await server?.stop();
}
results.meta.loadEnd = os.loadavg().map((x) => round(x, 2));
results.meta.durationS = round((performance.now() - started) / 1000, 1);

const md = markdown();
mkdirSync(join(HERE, "results"), { recursive: true });
if (FULL) {
  const json = JSON.stringify(results, null, 2) + "\n";
  writeFileSync(join(HERE, "results/latest.json"), json);
  writeFileSync(join(HERE, "results/results.md"), md);
  // The README's summary of the latest full run, rendered from what latest.json now holds (read
  // back from its text, so `node bench/summary.mjs --check` sees the same object).
  try {
    log(writeSummary(join(HERE, "README.md"), JSON.parse(json)) ? "bench/README.md: summary rewritten from results/latest.json" : "bench/README.md: summary unchanged");
  } catch (e) {
    log("bench/README.md: the summary could not be rewritten:", e.message);
    process.exitCode = 1;
  }
} else {
  writeFileSync(join(HERE, "results/partial.json"), JSON.stringify(results, null, 2) + "\n");
}
process.stdout.write(md);
