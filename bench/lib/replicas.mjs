// Section 9: what waitForReplicas costs. A primary with one replica of its own (both started
// here, on this machine: the replica's acknowledgement is a loopback round trip away), and on it
// keel-lock's redisLockStore with and without `waitForReplicas: { replicas: 1, timeoutMs: 1000 }`,
// each on its own connection, in the same interleaved rounds and per-round ratios as the other
// sections:
//   uncontended run(), 1 and 16 concurrent callers (own key each): runs/s, p50/p99, requests
//     (round trips) per run on the store's connection;
//   hand-over: 8 callers on one key, each run waiting for it (timeout) and holding it 1 ms, so
//     most grants are handed over — with the option, each costs the confirm script and a WAIT.
import { performance } from "node:perf_hooks";
import Redis from "ioredis";
import { lock, setLockStore } from "../../pkg/node/index.mjs";
import { redisLockStore } from "../../pkg/stores/redis.js";
import { startRedis } from "./redis-server.mjs";
import { median, round, summarize } from "./stats.mjs";

const TTL = 30_000;
const WAIT = { replicas: 1, timeoutMs: 1000 };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function replicasRedis({ quick, log, interleave, pairedRatio, makeClient }) {
  const primary = await startRedis({ args: ["--repl-diskless-sync-delay", "0"] });
  const replica = await startRedis({ args: ["--replicaof", "127.0.0.1", String(primary.port)] });
  const clients = [];
  const stores = [];
  try {
    const admin = new Redis({ port: primary.port, host: "127.0.0.1" });
    clients.push(admin);
    const deadline = Date.now() + 30_000;
    while (!/^slave0:.*state=online/m.test(await admin.info("replication"))) {
      if (Date.now() > deadline) throw new Error("the bench's replica did not come online");
      await sleep(20);
    }
    const PLAIN = "keel-lock (redisLockStore)";
    const WAITING = "keel-lock (redisLockStore, waitForReplicas)";
    const contender = async (name, options, settings) => {
      const client = await makeClient(primary.port);
      clients.push(client);
      const store = redisLockStore(client, options);
      stores.push(store);
      return { name, client, settings, install: () => setLockStore(store) };
    };
    const contenders = [
      await contender(PLAIN, {}, "redisLockStore(client); lock(key, 30000).run(fn, { timeout })"),
      await contender(WAITING, { waitForReplicas: WAIT }, `redisLockStore(client, { waitForReplicas: { replicas: ${WAIT.replicas}, timeoutMs: ${WAIT.timeoutMs} } }): WAIT after every grant (a handed-over one first runs the confirm script)`),
    ];
    const runOnce = async (key, timeout) => {
      const [ran] = await lock(key, TTL).run(() => 1, timeout ? { timeout } : undefined);
      return ran;
    };

    // More rounds than the other sections: the section is short, and its ratios are its point.
    const ROUNDS = quick ? 2 : 9;
    const uncontended = [];
    for (const cfg of [
      { concurrency: 1, ops: quick ? 300 : 1500 },
      { concurrency: 16, ops: quick ? 800 : 4000 },
    ]) {
      const body = async (c) => {
        c.install();
        const req0 = c.client.requests;
        const lat = [];
        const perCaller = Math.ceil(cfg.ops / cfg.concurrency);
        const t0 = performance.now();
        await Promise.all(
          Array.from({ length: cfg.concurrency }, async (_, w) => {
            for (let i = 0; i < perCaller; i++) {
              const s = performance.now();
              if (!(await runOnce(`bench:replicas:uc:${w}`))) throw new Error(`${c.name}: an uncontended run() was refused`);
              lat.push(performance.now() - s);
            }
          }),
        );
        const runs = perCaller * cfg.concurrency;
        return { opsPerSec: (runs * 1000) / (performance.now() - t0), lat, runs, requests: c.client.requests - req0 };
      };
      log(`(9) waitForReplicas, uncontended, concurrency ${cfg.concurrency}: warm-up + ${ROUNDS} rounds × ${cfg.ops} runs`);
      for (const c of contenders) await body(c);
      const per = await interleave(contenders, ROUNDS, body);
      uncontended.push({
        concurrency: cfg.concurrency,
        runsPerRound: cfg.ops,
        rounds: ROUNDS,
        rows: contenders.map((c) => {
          const recs = per[c.name];
          const all = summarize(recs.flatMap((r) => r.lat));
          const runs = recs.reduce((s, r) => s + r.runs, 0);
          return {
            impl: c.name,
            opsPerSec: round(median(recs.map((r) => r.opsPerSec)), 0),
            p50ms: round(all.p50, 3),
            p99ms: round(all.p99, 3),
            thisOverPlain: round(pairedRatio(per, c.name, PLAIN, "opsPerSec"), 3),
            roundTripsPerRun: round(recs.reduce((s, r) => s + r.requests, 0) / runs, 2),
          };
        }),
      });
    }

    // Hand-over: CALLERS callers on one key, RUNS waiting runs each, 1 ms hold.
    const CALLERS = 8;
    const RUNS = quick ? 10 : 40;
    let roundNo = 0;
    const handOver = async (c) => {
      c.install();
      const key = `bench:replicas:ho:${roundNo++}`;
      const req0 = c.client.requests;
      const lat = [];
      const t0 = performance.now();
      await Promise.all(
        Array.from({ length: CALLERS }, async () => {
          for (let i = 0; i < RUNS; i++) {
            const s = performance.now();
            const [ran] = await lock(key, TTL).run(() => sleep(1), { timeout: 10_000 });
            if (!ran) throw new Error(`${c.name}: a waiting run gave up`);
            lat.push(performance.now() - s);
          }
        }),
      );
      const runs = CALLERS * RUNS;
      return { opsPerSec: (runs * 1000) / (performance.now() - t0), lat, runs, requests: c.client.requests - req0 };
    };
    log(`(9) waitForReplicas, hand-over: warm-up + ${ROUNDS} rounds × ${CALLERS} callers × ${RUNS} runs on one key, 1 ms hold`);
    for (const c of contenders) await handOver(c);
    const perHo = await interleave(contenders, ROUNDS, handOver);
    const handOverRows = contenders.map((c) => {
      const recs = perHo[c.name];
      const runs = recs.reduce((s, r) => s + r.runs, 0);
      return {
        impl: c.name,
        runsPerSec: round(median(recs.map((r) => r.opsPerSec)), 0),
        thisOverPlain: round(pairedRatio(perHo, c.name, PLAIN, "opsPerSec"), 3),
        roundTripsPerRun: round(recs.reduce((s, r) => s + r.requests, 0) / runs, 2),
      };
    });
    return {
      servers: `redis-server ${primary.version}, a primary and one replica (--replicaof), 127.0.0.1, no persistence`,
      client: "ioredis, one connection per store",
      settings: contenders.map((c) => ({ name: c.name, settings: c.settings })),
      uncontended,
      handOver: { callers: CALLERS, runsPerCaller: RUNS, rounds: ROUNDS, holdMs: 1, rows: handOverRows },
    };
  } finally {
    for (const store of stores) await store.close?.().catch(() => {});
    for (const client of clients) client.disconnect();
    await replica.stop();
    await primary.stop();
  }
}

export function replicasMarkdown(s) {
  if (!s) return [];
  const L = ["", "#### 9. Redis with `waitForReplicas` against the same store without it", "", `${s.servers}; ${s.client}. this ÷ plain: runs per second, per-round pairs, median over rounds.`, ""];
  L.push("| callers | implementation | run()/s | p50 ms | p99 ms | requests / run() | this ÷ plain |");
  L.push("|---:|---|---:|---:|---:|---:|---:|");
  for (const cfg of s.uncontended) {
    for (const r of cfg.rows) L.push(`| ${cfg.concurrency} | ${r.impl} | ${r.opsPerSec} | ${r.p50ms} | ${r.p99ms} | ${r.roundTripsPerRun} | ${r.thisOverPlain} |`);
  }
  const h = s.handOver;
  L.push("", `Hand-over: ${h.callers} callers × ${h.runsPerCaller} waiting runs on one key, ${h.holdMs} ms hold (${h.rounds} rounds).`, "");
  L.push("| implementation | runs/s | requests / run() | this ÷ plain |", "|---|---:|---:|---:|");
  for (const r of h.rows) L.push(`| ${r.impl} | ${r.runsPerSec} | ${r.roundTripsPerRun} | ${r.thisOverPlain} |`);
  L.push("", "Settings: " + s.settings.map((x) => `${x.name}: ${x.settings}`).join("; ") + ".");
  return L;
}
