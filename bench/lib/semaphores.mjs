// Sections 5, 6 and 7: semaphores. keel-lock's `semaphore(key, limit, ttlMs).run(fn, { timeout })`
// side by side with async-mutex's `Semaphore` in one isolate (5) and with redis-semaphore's
// `Semaphore` on Redis (6), in the same interleaved rounds and per-round ratios as the other
// sections (run.mjs passes its `interleave` and `pairedRatio`); and on the Durable Object store
// in local workerd (7), its RPCs counted as section 3b counts the lock's.
//
// Hand-off with a limit: N holders at once, so one holder's end is not followed by "the next"
// start. With every caller asking for one permit, the k-th fn start in time order (k ≥ limit)
// runs on the permit freed by the (k − limit)-th fn end in time order: hand-off k = start_k −
// end_(k−limit). With limit 1 that is section 3's gap. A negative one means more than `limit`
// holders at once (counted as an overlap).
import { performance } from "node:perf_hooks";
import { Semaphore as AsyncSemaphore } from "async-mutex";
import { Semaphore as RedisSemaphore } from "redis-semaphore";
import { lock, semaphore, setLockStore } from "../../pkg/node/index.mjs";
import { redisLockStore } from "../../pkg/stores/redis.js";
import { median, summarize, round } from "./stats.mjs";
import { statsDelta } from "./redis-server.mjs";
import { buildWorkers, startWorkers, COMPAT_DATE } from "./workerd.mjs";

const TTL = 30_000;
const WAIT_TIMEOUT = 10_000;

/**
 * INFO commandstats as { calls: { cmd: n }, usec }: calls per command, and the server's µs in
 * scripts (EVALSHA/EVAL, their inner commands included; every contender here is scripts only).
 */
async function serverStats(admin) {
  const text = await admin.info("commandstats");
  const calls = {};
  let usec = 0;
  for (const m of text.matchAll(/^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/gm)) {
    calls[m[1]] = Number(m[2]);
    if (m[1].startsWith("eval")) usec += Number(m[3]);
  }
  return { calls, usec };
}

/** Hand-off gaps, overlaps (more than `limit` holders at once) and overtakes of `spans` ({ i, start, end }). */
export function permitStats(spans, limit) {
  const starts = spans.map((s) => s.start).sort((a, b) => a - b);
  const ends = spans.map((s) => s.end).sort((a, b) => a - b);
  const gaps = [];
  let overlaps = 0;
  for (let k = limit; k < starts.length; k++) {
    const g = starts[k] - ends[k - limit];
    if (g < 0) overlaps++;
    gaps.push(g);
  }
  const byStart = [...spans].sort((a, b) => a.start - b.start);
  let overtakes = 0;
  for (let a = 0; a < byStart.length; a++) for (let b = a + 1; b < byStart.length; b++) if (byStart[a].i > byStart[b].i) overtakes++;
  return { gaps, overlaps, overtakes };
}

// ---------------------------------------------------------------------------------------------
// (5) In-isolate: semaphore run() on the memory store vs async-mutex's Semaphore.runExclusive.

export async function semaphoreInIsolate({ quick, log, interleave, pairedRatio, memoryStore }) {
  setLockStore(memoryStore);
  const LIMIT = 4;
  const sems = new Map();
  const semFor = (key) => {
    let s = sems.get(key);
    if (s === undefined) sems.set(key, (s = new AsyncSemaphore(LIMIT)));
    return s;
  };
  const fn = () => 1;
  const reused = semaphore("sem:iso:uc", LIMIT, TTL);
  const KEEL = "keel-lock semaphore";
  const contenders = [
    { name: KEEL, run: (key, f, o) => semaphore(key, LIMIT, TTL).run(f, o) },
    { name: "async-mutex Semaphore", run: (key, f) => semFor(key).runExclusive(f) },
    { name: "keel-lock semaphore, reused handle", run: (_key, f, o) => reused.run(f, o), uncontendedOnly: true },
    { name: "keel-lock lock() (exclusive, for reference)", run: (key, f, o) => lock(key, TTL).run(f, o), uncontendedOnly: true },
  ];

  // Uncontended: one caller, sequential run()s on one key, as section 1: an untimed pass for the
  // throughput (the ratios), then a timed pass for the percentiles.
  const OPS = quick ? 4_000 : 20_000;
  const ROUNDS = quick ? 3 : 9;
  const uncontended = async (c) => {
    const t0 = performance.now();
    for (let i = 0; i < OPS; i++) {
      const r = await c.run("sem:iso:uc", fn);
      if (Array.isArray(r) && r[0] !== true) throw new Error(`${c.name}: uncontended run() did not run`);
    }
    const ms = performance.now() - t0;
    const lat = new Float64Array(OPS);
    for (let i = 0; i < OPS; i++) {
      const s = performance.now();
      await c.run("sem:iso:uc", fn);
      lat[i] = performance.now() - s;
    }
    return { opsPerSec: (OPS * 1000) / ms, lat };
  };
  log("(5) in-isolate semaphore uncontended: warm-up");
  for (const c of contenders) await uncontended(c);
  log(`(5) in-isolate semaphore uncontended: ${ROUNDS} rounds × ${OPS} ops, limit ${LIMIT}`);
  const uc = await interleave(contenders, ROUNDS, uncontended);

  // Contended: N callers on one key of limit LIMIT, each doing K waiting runs whose section spans
  // one macrotask (setImmediate); the most holders seen at once is kept as a check.
  const N = 32;
  const K = quick ? 2 : 10;
  const C_ROUNDS = quick ? 3 : 31;
  let holding = 0;
  let mostHolding = 0;
  const csFn = () => {
    if (++holding > mostHolding) mostHolding = holding;
    return new Promise((r) =>
      setImmediate(() => {
        holding--;
        r(1);
      }),
    );
  };
  const contended = async (c) => {
    const lat = [];
    let failed = 0;
    mostHolding = 0;
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: N }, async () => {
        for (let i = 0; i < K; i++) {
          const s = performance.now();
          const r = await c.run("sem:iso:contended", csFn, { timeout: WAIT_TIMEOUT });
          if (Array.isArray(r) && r[0] === false) failed++;
          else lat.push(performance.now() - s);
        }
      }),
    );
    const ms = performance.now() - t0;
    return { opsPerSec: (lat.length * 1000) / ms, lat, failed, mostHolding };
  };
  const cContenders = contenders.filter((c) => !c.uncontendedOnly);
  log("(5) in-isolate semaphore contended: warm-up");
  for (const c of cContenders) await contended(c);
  log(`(5) in-isolate semaphore contended: ${C_ROUNDS} rounds × ${N} callers × ${K} runs, limit ${LIMIT}`);
  const ct = await interleave(cContenders, C_ROUNDS, contended);

  const table = (perImpl, list) =>
    list.map((c) => {
      const recs = perImpl[c.name];
      const all = summarize(recs.flatMap((r) => Array.from(r.lat)));
      return {
        impl: c.name,
        opsPerSec: round(median(recs.map((r) => r.opsPerSec)), 0),
        p50us: round(all.p50 * 1000, 1),
        p99us: round(all.p99 * 1000, 1),
        keelOverThis: round(pairedRatio(perImpl, KEEL, c.name, "opsPerSec"), 3),
        failed: recs.reduce((s, r) => s + (r.failed ?? 0), 0),
        mostHoldersAtOnce: recs.some((r) => r.mostHolding !== undefined) ? Math.max(...recs.map((r) => r.mostHolding ?? 0)) : undefined,
        roundsOpsPerSec: recs.map((r) => round(r.opsPerSec, 0)),
      };
    });
  return {
    limit: LIMIT,
    store: "the default MemoryLockStore",
    uncontended: { opsPerRound: OPS, rounds: ROUNDS, rows: table(uc, contenders) },
    contended: { callers: N, runsPerCaller: K, rounds: C_ROUNDS, criticalSection: "one setImmediate", timeoutMs: WAIT_TIMEOUT, rows: table(ct, cContenders) },
  };
}

// ---------------------------------------------------------------------------------------------
// (6) Redis: semaphore run() on redisLockStore vs redis-semaphore's Semaphore, each on its own
// counted ioredis connection to the same server (`makeClient`: run.mjs's countedClient,
// connected). Round trips = requests on that connection; keel-lock's pub/sub connection (the
// store's duplicate(), SUBSCRIBE and the pushed messages) is not counted. Redis commands from
// INFO commandstats (PUBLISH and the scripts' inner commands included).

export async function semaphoreRedis({ quick, log, interleave, pairedRatio, admin, makeClient, settle }) {
  const keelClient = await makeClient();
  const keelStore = redisLockStore(keelClient);
  const pollClient = await makeClient();
  const full = redisLockStore(pollClient);
  // The same store without its waiting methods: keel-lock polls acquireShared every retryDelay.
  const pollStore = Object.fromEntries(["acquire", "release", "extend", "isLocked", "remainingTime", "acquireShared"].map((m) => [m, full[m]]));
  const semClient = await makeClient();
  const pingClient = await makeClient();
  const KEEL = "keel-lock semaphore (redisLockStore)";

  const keel = {
    name: KEEL,
    client: keelClient,
    settings: "setLockStore(redisLockStore(client)); semaphore(key, limit, 30000).run(fn, { timeout }) — a fresh handle per run; waits in Redis (acquireSharedOrWait: FIFO queue, the release script hands over and PUBLISHes); defaults otherwise (retryDelay 50)",
    install: () => setLockStore(keelStore),
    async run(key, limit, fn, timeout) {
      const [ran] = await semaphore(key, limit, TTL).run(fn, timeout ? { timeout } : undefined);
      return ran;
    },
  };
  const keelPolling = {
    name: "keel-lock semaphore, polling (store without acquireSharedOrWait)",
    client: pollClient,
    settings: "the same redisLockStore with only acquire, release, extend, isLocked, remainingTime, acquireShared: keel-lock polls acquireShared every retryDelay (default 50 ms)",
    install: () => setLockStore(pollStore),
    run: keel.run,
  };
  const redisSem = {
    name: "redis-semaphore Semaphore",
    client: semClient,
    settings: "new Semaphore(client, key, limit, { lockTimeout: 30000 }) acquire / try fn / finally release — defaults otherwise: retryInterval 10 ms (polls), acquireTimeout 10000 ms, acquireAttemptsLimit ∞, refreshInterval 0.8 · lockTimeout",
    install: () => {},
    async run(key, limit, fn) {
      const s = new RedisSemaphore(semClient, key, limit, { lockTimeout: TTL });
      try {
        await s.acquire();
      } catch (e) {
        if (/timeout/i.test(String(e?.message))) return false;
        throw e;
      }
      try {
        await fn();
      } finally {
        await s.release();
      }
      return true;
    },
  };

  try {
    // One Redis round trip on this connection, for the hand-off target: sequential PINGs.
    const PINGS = quick ? 100 : 500;
    for (let i = 0; i < 50; i++) await pingClient.ping();
    const pings = [];
    for (let i = 0; i < PINGS; i++) {
      const s = performance.now();
      await pingClient.ping();
      pings.push(performance.now() - s);
    }
    const ping = summarize(pings);

    // Uncontended: every caller on one key whose limit equals the number of callers.
    const fn = async () => 1;
    const configs = [
      { callers: 1, limit: 16, ops: quick ? 300 : 1_500 },
      { callers: 16, limit: 16, ops: quick ? 800 : 4_000 },
    ];
    const ROUNDS = quick ? 2 : 5;
    const uContenders = [keel, redisSem];
    const uncontended = [];
    for (const cfg of configs) {
      const body = async (c) => {
        c.install();
        const before = await serverStats(admin);
        const req0 = c.client.requests;
        const lat = [];
        const perCaller = Math.ceil(cfg.ops / cfg.callers);
        const cpu0 = process.cpuUsage();
        const t0 = performance.now();
        await Promise.all(
          Array.from({ length: cfg.callers }, async () => {
            for (let i = 0; i < perCaller; i++) {
              const s = performance.now();
              if (!(await c.run("bench:sem:uc", cfg.limit, fn))) throw new Error(`${c.name}: uncontended semaphore run() refused`);
              lat.push(performance.now() - s);
            }
          }),
        );
        const ms = performance.now() - t0;
        const cpu = process.cpuUsage(cpu0);
        const runs = perCaller * cfg.callers;
        const after = await serverStats(admin);
        const cmds = statsDelta(before.calls, after.calls);
        return {
          opsPerSec: (runs * 1000) / ms,
          lat,
          runs,
          requests: c.client.requests - req0,
          cmds,
          scriptUsPerRun: (after.usec - before.usec) / runs,
          clientCpuUsPerRun: (cpu.user + cpu.system) / runs,
        };
      };
      log(`(6) redis semaphore uncontended, ${cfg.callers} caller(s), limit ${cfg.limit}: warm-up + ${ROUNDS} rounds × ${cfg.ops} runs`);
      for (const c of uContenders) await body(c);
      const per = await interleave(uContenders, ROUNDS, body);
      uncontended.push({
        callers: cfg.callers,
        limit: cfg.limit,
        runsPerRound: cfg.ops,
        rounds: ROUNDS,
        rows: uContenders.map((c) => {
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
            keelOverThis: round(pairedRatio(per, KEEL, c.name, "opsPerSec"), 3),
            roundTripsPerRun: round(recs.reduce((s, r) => s + r.requests, 0) / runs, 2),
            redisCommandsPerRun: round(recs.reduce((s, r) => s + r.cmds.total, 0) / runs, 2),
            scriptUsPerRun: round(median(recs.map((r) => r.scriptUsPerRun)), 1),
            clientCpuUsPerRun: round(median(recs.map((r) => r.clientCpuUsPerRun)), 1),
            commandsPerRun: Object.fromEntries(Object.entries(byCommand).map(([k, v]) => [k, round(v / runs, 2)])),
            roundsOpsPerSec: recs.map((r) => round(r.opsPerSec, 0)),
          };
        }),
      });
    }

    // Contended: WAITERS callers started together (in index order, one tick) on one key of limit
    // LIMIT, each holding a permit for CS_MS (sleep), timeout WAIT_TIMEOUT.
    const LIMIT = 4;
    const WAITERS = 32;
    const CS_MS = 5;
    const C_ROUNDS = quick ? 1 : 5;
    const cContenders = [keel, keelPolling, redisSem];
    const burst = async (c) => {
      c.install();
      const before = (await serverStats(admin)).calls;
      const req0 = c.client.requests;
      const spans = [];
      let failed = 0;
      const t0 = performance.now();
      await Promise.all(
        Array.from({ length: WAITERS }, async (_, i) => {
          let span;
          const ok = await c.run(
            "bench:sem:contended",
            LIMIT,
            async () => {
              span = { i, start: performance.now() };
              await new Promise((r) => setTimeout(r, CS_MS));
              span.end = performance.now();
            },
            WAIT_TIMEOUT,
          );
          if (ok) {
            span.returned = performance.now();
            spans.push(span);
          } else failed++;
        }),
      );
      const totalMs = performance.now() - t0;
      const cmds = statsDelta(before, (await serverStats(admin)).calls);
      const releases = spans.map((sp) => sp.returned - sp.end);
      return { totalMs, spans, releases, failed, acquired: spans.length, ...permitStats(spans, LIMIT), requests: c.client.requests - req0, cmds: cmds.total, byCommand: cmds.byCommand };
    };
    log("(6) redis semaphore contention: warm-up");
    for (const c of cContenders) {
      await settle();
      await burst(c);
    }
    log(`(6) redis semaphore contention: ${C_ROUNDS} rounds × ${WAITERS} waiters at once, limit ${LIMIT}, ${CS_MS} ms hold`);
    const per = await interleave(cContenders, C_ROUNDS, burst);
    const contended = {
      limit: LIMIT,
      waiters: WAITERS,
      criticalSectionMs: CS_MS,
      timeoutMs: WAIT_TIMEOUT,
      rounds: C_ROUNDS,
      release: "fn end → that caller's run() (or acquire/release) resolved: the release request and the library's work around it",
      handOff: "the k-th fn start (k ≥ limit, in time order) minus the (k − limit)-th fn end: from the end of the holder whose permit it runs on (its release request included) to this holder's fn start",
      rows: cContenders.map((c) => {
        const recs = per[c.name];
        const acquired = recs.reduce((s, r) => s + r.acquired, 0);
        const gaps = summarize(recs.flatMap((r) => r.gaps));
        const byCommand = {};
        for (const r of recs) for (const [k, v] of Object.entries(r.byCommand)) byCommand[k] = (byCommand[k] ?? 0) + v;
        return {
          impl: c.name,
          settings: c.settings,
          acquired,
          failed: recs.reduce((s, r) => s + r.failed, 0),
          overlaps: recs.reduce((s, r) => s + r.overlaps, 0),
          overtakes: recs.reduce((s, r) => s + r.overtakes, 0),
          overtakesPerRound: recs.map((r) => r.overtakes),
          requestsPerAcquisition: round(recs.reduce((s, r) => s + r.requests, 0) / acquired, 2),
          redisCommandsPerAcquisition: round(recs.reduce((s, r) => s + r.cmds, 0) / acquired, 1),
          commandsPerAcquisition: Object.fromEntries(Object.entries(byCommand).map(([k, v]) => [k, round(v / acquired, 2)])),
          handOffP50ms: round(gaps.p50, 3),
          handOffP99ms: round(gaps.p99, 3),
          handOffSamples: gaps.n,
          releaseP50ms: round(summarize(recs.flatMap((r) => r.releases)).p50, 3),
          drainMs: round(median(recs.map((r) => r.totalMs)), 0),
          roundsDrainMs: recs.map((r) => round(r.totalMs, 0)),
          keelOverThisDrain: round(pairedRatio(per, KEEL, c.name, "totalMs"), 3),
        };
      }),
    };
    return {
      ttlMs: TTL,
      roundTrip: { pings: PINGS, p50ms: round(ping.p50, 3), p99ms: round(ping.p99, 3) },
      uncontended,
      contended,
    };
  } finally {
    await keelStore.close().catch(() => {});
    await full.close?.().catch(() => {});
    for (const c of [keelClient, pollClient, semClient, pingClient]) c.disconnect();
  }
}

// ---------------------------------------------------------------------------------------------
// (7) Durable Object: semaphore run() on DurableObjectLockStore in local workerd (Miniflare), the
// bench's keel Worker (bench/workers/keel.js) with every RPC to a LockDurableObject stub counted
// in the Worker, as section 3b counts the lock's. Uncontended: sequential runs on one key inside
// one request per round (lock() beside it for reference). Contended: WAITERS callers started
// together (in index order, one tick) on one key of limit LIMIT, each holding its permit CS_MS
// (sleep), timeout WAIT_TIMEOUT; spans taken with Date.now() inside workerd (whole ms).

export async function semaphoreDurableObject({ quick, log, interleave, pairedRatio }) {
  const LIMIT = 4;
  const WAITERS = 32;
  const CS_MS = 5;
  const RUNS = quick ? 160 : 800;
  const ROUNDS = quick ? 3 : 9;
  const C_ROUNDS = quick ? 2 : 9;
  const KEEL = "keel-lock semaphore (DurableObjectLockStore)";
  const uContenders = [
    { name: KEEL, path: "/semaphore-uncontended", settings: `semaphore(key, ${LIMIT}, 30000).run(fn) — a fresh handle per run` },
    { name: "keel-lock lock() (exclusive, for reference)", path: "/uncontended", settings: "lock(key, 30000).run(fn) — a fresh handle per run" },
  ];
  log("(7) Durable Object semaphore: bundling the bench Worker from the packed package");
  buildWorkers();
  const w = await startWorkers(["keel"]);
  try {
    const uncontendedBody = async (c) => {
      const r = await w.call("keel", c.path, { key: `bench:sem:do:uc:${c.path}`, runs: RUNS, limit: LIMIT });
      return { runs: r.runs, requests: r.requests, byMethod: r.byMethod, usPerRun: (r.totalMs * 1000) / r.runs, rpcUsPerRun: (r.awaitingMs * 1000) / r.runs };
    };
    log("(7) Durable Object semaphore uncontended: warm-up");
    for (const c of uContenders) await uncontendedBody(c);
    log(`(7) Durable Object semaphore uncontended: ${ROUNDS} rounds × ${RUNS} sequential runs, limit ${LIMIT}`);
    const uc = await interleave(uContenders, ROUNDS, uncontendedBody);

    const cContenders = [{ name: KEEL, settings: `semaphore(key, ${LIMIT}, 30000).run(fn, { timeout: ${WAIT_TIMEOUT} }) — one acquireSharedOrWait RPC per waiter, answered by the object on hand-over` }];
    const burst = async () => {
      const t0 = performance.now();
      const r = await w.call("keel", "/semaphore-contend", { key: "bench:sem:do:contended", limit: LIMIT, waiters: WAITERS, csMs: CS_MS, timeout: WAIT_TIMEOUT, gapMs: 0 });
      const wallMs = performance.now() - t0;
      return { totalMs: r.totalMs, wallMs, acquired: r.spans.length, failed: r.failed, ...permitStats(r.spans, LIMIT), requests: r.requests, byMethod: r.byMethod };
    };
    log("(7) Durable Object semaphore contention: warm-up");
    await burst();
    log(`(7) Durable Object semaphore contention: ${C_ROUNDS} rounds × ${WAITERS} waiters at once, limit ${LIMIT}, ${CS_MS} ms hold`);
    const ct = await interleave(cContenders, C_ROUNDS, burst);

    const perRun = (recs, field) => {
      const runs = recs.reduce((s, r) => s + r.runs, 0);
      const byMethod = {};
      for (const r of recs) for (const [k, v] of Object.entries(r.byMethod)) byMethod[k] = (byMethod[k] ?? 0) + v;
      return { total: round(recs.reduce((s, r) => s + r[field], 0) / runs, 2), byMethod: Object.fromEntries(Object.entries(byMethod).map(([k, v]) => [k, round(v / runs, 2)])) };
    };
    return {
      measured: true,
      runtime: `local workerd through Miniflare (compatibility date ${COMPAT_DATE}), the bench Worker bundled by wrangler from the packed package`,
      limit: LIMIT,
      uncontended: {
        runsPerRound: RUNS,
        rounds: ROUNDS,
        rows: uContenders.map((c) => {
          const recs = uc[c.name];
          const rpcs = perRun(recs, "requests");
          return {
            impl: c.name,
            settings: c.settings,
            rpcsPerRun: rpcs.total,
            rpcsPerRunByMethod: rpcs.byMethod,
            usPerRun: round(median(recs.map((r) => r.usPerRun)), 1),
            rpcUsPerRun: round(median(recs.map((r) => r.rpcUsPerRun)), 1),
            keelTimeOverThis: round(pairedRatio(uc, KEEL, c.name, "usPerRun"), 3),
            roundsUsPerRun: recs.map((r) => round(r.usPerRun, 1)),
          };
        }),
      },
      contended: {
        waiters: WAITERS,
        criticalSectionMs: CS_MS,
        timeoutMs: WAIT_TIMEOUT,
        rounds: C_ROUNDS,
        requests: "RPCs to the lock's Durable Object stub, counted in the Worker",
        handOff: "the k-th fn start (k ≥ limit, in time order) minus the (k − limit)-th fn end, Date.now() inside workerd (ms resolution; includes the release RPC)",
        rows: cContenders.map((c) => {
          const recs = ct[c.name];
          const acquired = recs.reduce((s, r) => s + r.acquired, 0);
          const gaps = summarize(recs.flatMap((r) => r.gaps));
          const byMethod = {};
          for (const r of recs) for (const [k, v] of Object.entries(r.byMethod)) byMethod[k] = (byMethod[k] ?? 0) + v;
          return {
            impl: c.name,
            settings: c.settings,
            acquired,
            failed: recs.reduce((s, r) => s + r.failed, 0),
            overlaps: recs.reduce((s, r) => s + r.overlaps, 0),
            overtakes: recs.reduce((s, r) => s + r.overtakes, 0),
            overtakesPerRound: recs.map((r) => r.overtakes),
            requestsPerAcquisition: round(recs.reduce((s, r) => s + r.requests, 0) / acquired, 2),
            requestsPerAcquisitionByMethod: Object.fromEntries(Object.entries(byMethod).map(([k, v]) => [k, round(v / acquired, 2)])),
            handOffP50ms: round(gaps.p50, 3),
            handOffP99ms: round(gaps.p99, 3),
            handOffSamples: gaps.n,
            drainMs: round(median(recs.map((r) => r.totalMs)), 0),
            roundsDrainMs: recs.map((r) => round(r.totalMs, 0)),
            requestWallMs: round(median(recs.map((r) => r.wallMs)), 0),
          };
        }),
      },
    };
  } finally {
    await w.dispose();
  }
}

// ---------------------------------------------------------------------------------------------

/** The sections' markdown lines. */
export function semaphoreMarkdown(iso, redis, durableObject) {
  const L = [];
  if (iso) {
    const u = iso.uncontended;
    L.push("", `#### 5. In-isolate semaphore run(), ${iso.store}, limit ${iso.limit}, uncontended (${u.rounds} interleaved rounds × ${u.opsPerRound} sequential runs, one caller)`, "");
    L.push("| implementation | run()/s | p50 µs | p99 µs | keel semaphore ÷ this (ops/s) |", "|---|---:|---:|---:|---:|");
    for (const r of u.rows) L.push(`| ${r.impl} | ${r.opsPerSec} | ${r.p50us} | ${r.p99us} | ${r.keelOverThis} |`);
    const c = iso.contended;
    L.push("", `Contended: ${c.callers} callers × ${c.runsPerCaller} waiting runs on one key of limit ${iso.limit}, critical section = ${c.criticalSection} (${c.rounds} rounds after one warm-up round):`, "");
    L.push("| implementation | completed run()/s | p50 ms (incl. wait) | p99 ms | keel semaphore ÷ this | timed out | most holders at once |", "|---|---:|---:|---:|---:|---:|---:|");
    for (const r of c.rows) L.push(`| ${r.impl} | ${r.opsPerSec} | ${round(r.p50us / 1000, 3)} | ${round(r.p99us / 1000, 3)} | ${r.keelOverThis} | ${r.failed} | ${r.mostHoldersAtOnce} |`);
    L.push("", "keel-lock: `semaphore(key, 4, 30000).run(fn)` (a fresh handle per run; `{ timeout: 10000 }` when contended); async-mutex: one `new Semaphore(4)` per key (a `Map`), `runExclusive(fn)`.");
  }
  if (redis) {
    L.push("", `#### 6. Redis semaphore run() (${redis.server ?? "redis-server"}; ${redis.client ?? "ioredis"}; one round trip, PING on its own connection: p50 ${redis.roundTrip.p50ms} ms, p99 ${redis.roundTrip.p99ms} ms)`, "");
    L.push("Uncontended: every caller on one key whose limit is the number of callers or more.", "");
    L.push("| implementation | callers (limit) | run()/s | p50 ms | p99 ms | keel ÷ this | round trips / run() | Redis server µs / run() in scripts | client CPU µs / run() | Redis commands / run() (incl. inside Lua) |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (const cfg of redis.uncontended)
      for (const r of cfg.rows)
        L.push(`| ${r.impl} | ${cfg.callers} (${cfg.limit}) | ${r.opsPerSec} | ${r.p50ms} | ${r.p99ms} | ${r.keelOverThis} | ${r.roundTripsPerRun} | ${r.scriptUsPerRun} | ${r.clientCpuUsPerRun} | ${r.redisCommandsPerRun} (${Object.entries(r.commandsPerRun).map(([k, v]) => `${k} ${v}`).join(", ")}) |`);
    L.push("", "Server µs: INFO commandstats `usec` of the scripts (EVALSHA/EVAL, inner commands included), median over rounds; client CPU: `process.cpuUsage()` of the bench process over the round (ioredis, the library, the loop), median over rounds.");
    const c = redis.contended;
    L.push("", `Contended: ${c.waiters} callers started together on one key of limit ${c.limit}, each holding its permit ${c.criticalSectionMs} ms, timeout ${c.timeoutMs} ms (${c.rounds} rounds after one warm-up round each):`, "");
    L.push("| implementation | acquired | timed out | requests / acquisition (Redis cmds) | hand-off p50 ms | hand-off p99 ms | release p50 ms | time to drain (ms) | overtakes (per round) | keel ÷ this (drain time) |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (const r of c.rows)
      L.push(`| ${r.impl} | ${r.acquired} | ${r.failed} | ${r.requestsPerAcquisition} (${r.redisCommandsPerAcquisition}) | ${r.handOffP50ms} | ${r.handOffP99ms} | ${r.releaseP50ms} | ${r.drainMs} | ${r.overtakes} (${r.overtakesPerRound.join(", ")}) | ${r.keelOverThisDrain} |`);
    if (c.rows.some((r) => r.overlaps > 0)) L.push("", `**More than ${c.limit} holders at once seen**: ${c.rows.filter((r) => r.overlaps > 0).map((r) => `${r.impl} ${r.overlaps}`).join(", ")}.`);
    L.push("", `Hand-off = ${c.handOff}. Release = ${c.release}. Overtakes = pairs of callers whose fn started in the opposite order of their start (callers are started in index order in one tick). Requests counted on each library's connection; keel-lock's pub/sub connection is not counted.`);
    L.push("", "Commands per acquisition: " + c.rows.map((r) => `${r.impl}: ${Object.entries(r.commandsPerAcquisition).map(([k, v]) => `${k} ${v}`).join(", ")}`).join("; ") + ".");
    L.push("", "Settings: " + [...new Map([...redis.uncontended.flatMap((x) => x.rows), ...c.rows].map((r) => [r.impl, r.settings])).entries()].map(([k, v]) => `${k}: ${v}`).join("; ") + ".");
  }
  if (durableObject) {
    const d = durableObject;
    const u = d.uncontended;
    const methods = (m) => Object.entries(m).map(([k, v]) => `${k} ${v}`).join(", ");
    L.push("", `#### 7. Durable Object semaphore run(), limit ${d.limit} (${d.runtime})`, "");
    L.push(`Uncontended: ${u.rounds} interleaved rounds × ${u.runsPerRound} sequential runs on one key, inside one request each.`, "");
    L.push("| implementation | RPCs / run() | µs / run() | RPC µs / run() | keel semaphore time ÷ this |", "|---|---:|---:|---:|---:|");
    for (const r of u.rows) L.push(`| ${r.impl} | ${r.rpcsPerRun} (${methods(r.rpcsPerRunByMethod)}) | ${r.usPerRun} | ${r.rpcUsPerRun} | ${r.keelTimeOverThis} |`);
    const c = d.contended;
    L.push("", `Contended: ${c.waiters} callers started together on one key of limit ${d.limit}, each holding its permit ${c.criticalSectionMs} ms, timeout ${c.timeoutMs} ms (${c.rounds} rounds after one warm-up round):`, "");
    L.push("| implementation | acquired | timed out | RPCs / acquisition | hand-off p50 ms | hand-off p99 ms | time to drain (ms) | overtakes (per round) | more than the limit at once |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (const r of c.rows)
      L.push(`| ${r.impl} | ${r.acquired} | ${r.failed} | ${r.requestsPerAcquisition} (${methods(r.requestsPerAcquisitionByMethod)}) | ${r.handOffP50ms} | ${r.handOffP99ms} | ${r.drainMs} | ${r.overtakes} (${r.overtakesPerRound.join(", ")}) | ${r.overlaps} |`);
    L.push("", `Hand-off = ${c.handOff}. Requests: ${c.requests}. Overtakes = pairs of callers whose fn started in the opposite order of their start.`);
  }
  return L;
}
