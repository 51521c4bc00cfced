// Section 11: etcd. A three-member etcd cluster on loopback ports (started here with the tests'
// starter: temp data dirs, heartbeat 50 ms, election timeout 500 ms), and on it keel-lock's
// etcdLockStore (the v3 JSON gateway over fetch) against the npm `etcd3` client (gRPC): its `Lock`
// (one attempt: a lease and a create-if-absent transaction; a refused attempt is asked again
// after RETRY_MS, as its README leaves to the caller) and its `Election` (etcd's election recipe:
// each candidate's key on its own lease, a watch on the one created before it; campaign, wait,
// resign). Every contender talks to the same endpoint (the first member).
//   uncontended: sequential run()s on one key — run()/s, p50/p99, requests per run();
//   ordered arrival: the waiters of section 3 (32 on one key, 2 ms apart, 5 ms critical section)
//     — requests per acquisition, hand-off p50/p99, drain, overtakes, overlaps.
// Requests: keel-lock's are its fetch calls (a watch is one); etcd3's are the messages its gRPC
// calls send, counted by a client interceptor (a unary call is one; on a stream each message is
// one: a watch's create and cancel, a lease keep-alive).
import { performance } from "node:perf_hooks";
import { createRequire } from "node:module";
import { lock, setLockStore } from "../../pkg/node/index.mjs";
import { etcdLockStore } from "../../pkg/stores/etcd.js";
import { startEtcdCluster } from "../../tests/stores/lib/servers.js";
import { orderStats, staggered } from "./contention.mjs";
import { median, round, summarize } from "./stats.mjs";

const require = createRequire(import.meta.url);
const etcd3Require = createRequire(require.resolve("etcd3"));
const TTL = 30_000;
const RETRY_MS = 10;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** etcd3's client with every message its calls send counted in `meter.requests`. */
function etcd3Client(endpoint) {
  const { Etcd3, EtcdLockFailedError } = require("etcd3");
  // etcd3's own copy of gRPC, the one its calls go through.
  const { InterceptingCall } = etcd3Require("@grpc/grpc-js");
  const meter = { requests: 0 };
  const counting = (options, nextCall) =>
    new InterceptingCall(nextCall(options), {
      sendMessage(message, next) {
        meter.requests += 1;
        next(message);
      },
    });
  const client = new Etcd3({ hosts: endpoint, grpcOptions: { interceptors: [counting] } });
  return { client, meter, EtcdLockFailedError, version: require("etcd3/package.json").version };
}

export async function etcdSection({ quick, log, interleave, pairedRatio, waiters, gapMs, criticalSectionMs, timeoutMs }) {
  let cluster;
  try {
    cluster = await startEtcdCluster();
  } catch (error) {
    return { measured: false, reason: error.message.split("\n")[0] };
  }
  let etcd3;
  try {
    const endpoint = cluster.endpoints[0];
    const version = (await (await fetch(`${endpoint}/version`)).json()).etcdserver;
    const counted = { requests: 0 };
    const store = etcdLockStore({
      endpoints: [endpoint],
      fetch: (url, init) => {
        counted.requests += 1;
        return fetch(url, init);
      },
    });
    etcd3 = etcd3Client(endpoint.replace(/^http:\/\//, ""));
    const { client } = etcd3;
    const KEEL = "keel-lock (etcdLockStore)";
    const contenders = [
      {
        name: KEEL,
        meter: counted,
        settings: "etcdLockStore({ endpoints }); lock(key, 30000).run(fn, { timeout }) — waits in etcd's queue (a key per waiter, a watch on the one before it; hand-over)",
        run: async (key, fn, timeout) => {
          setLockStore(store);
          const [ran] = await lock(key, TTL).run(fn, timeout ? { timeout } : undefined);
          return ran;
        },
      },
      {
        name: "etcd3 Lock",
        meter: etcd3.meter,
        settings: `client.lock(key).ttl(30).do(fn) — one attempt; contention: asked again every ${RETRY_MS} ms until the timeout (etcd3 has no wait of its own)`,
        run: async (key, fn, timeout) => {
          const deadline = performance.now() + (timeout ?? 0);
          for (;;) {
            try {
              await client.lock(key).ttl(TTL / 1000).do(fn);
              return true;
            } catch (error) {
              if (!(error instanceof etcd3.EtcdLockFailedError)) throw error;
              if (!timeout || performance.now() >= deadline) return false;
              await sleep(RETRY_MS);
            }
          }
        },
      },
      {
        name: "etcd3 Election",
        meter: etcd3.meter,
        settings: "client.election(key, 30).campaign(id); await campaign.wait(); fn(); campaign.resign() — waits by watch (etcd's election recipe)",
        run: async (key, fn, timeout) => {
          const campaign = client.election(key, TTL / 1000).campaign(crypto.randomUUID());
          let timer;
          const elected = campaign.wait().then(() => true);
          const won = timeout ? await Promise.race([elected, new Promise((resolve) => (timer = setTimeout(() => resolve(false), timeout)))]) : await elected;
          clearTimeout(timer);
          try {
            if (won) await fn();
          } finally {
            await campaign.resign();
          }
          return won;
        },
      },
    ];

    // Uncontended: OPS sequential run()s on one key per contender and round.
    const OPS = quick ? 40 : 200;
    const ROUNDS = quick ? 2 : 5;
    let keyNo = 0;
    const uncontendedBody = async (c) => {
      const key = `bench-etcd:uc:${keyNo++}`;
      const req0 = c.meter.requests;
      const lat = [];
      const t0 = performance.now();
      for (let i = 0; i < OPS; i++) {
        const s = performance.now();
        if (!(await c.run(key, () => 1))) throw new Error(`${c.name}: an uncontended run() was refused`);
        lat.push(performance.now() - s);
      }
      const ms = performance.now() - t0;
      return { opsPerSec: (OPS * 1000) / ms, lat, runs: OPS, requests: c.meter.requests - req0 };
    };
    log(`(11) etcd ${version}, uncontended: warm-up + ${ROUNDS} rounds × ${OPS} sequential runs`);
    for (const c of contenders) await uncontendedBody(c);
    const perUc = await interleave(contenders, ROUNDS, uncontendedBody);
    const uncontended = contenders.map((c) => {
      const recs = perUc[c.name];
      const all = summarize(recs.flatMap((r) => r.lat));
      const runs = recs.reduce((s, r) => s + r.runs, 0);
      return {
        impl: c.name,
        opsPerSec: round(median(recs.map((r) => r.opsPerSec)), 0),
        p50ms: round(all.p50, 3),
        p99ms: round(all.p99, 3),
        requestsPerRun: round(recs.reduce((s, r) => s + r.requests, 0) / runs, 2),
        keelOverThis: round(pairedRatio(perUc, KEEL, c.name, "opsPerSec"), 3),
      };
    });

    // Ordered arrival, as section 3.
    const CROUNDS = quick ? 1 : 3;
    const contendedBody = async (c) => {
      const key = `bench-etcd:contended:${keyNo++}`;
      const req0 = c.meter.requests;
      const r = await staggered((fn, timeout) => c.run(key, fn, timeout), {
        waiters,
        gapMs,
        timeout: timeoutMs,
        criticalSection: () => sleep(criticalSectionMs),
      });
      return { ...r, ...orderStats(r.spans), acquired: r.spans.length, requests: c.meter.requests - req0 };
    };
    log(`(11) etcd contention: warm-up + ${CROUNDS} rounds × ${waiters} waiters ${gapMs} ms apart, ${criticalSectionMs} ms critical section`);
    for (const c of contenders) await contendedBody(c);
    const perC = await interleave(contenders, CROUNDS, contendedBody);
    const contention = contenders.map((c) => {
      const recs = perC[c.name];
      const acquired = recs.reduce((s, r) => s + r.acquired, 0);
      const gaps = summarize(recs.flatMap((r) => r.gaps));
      const sum = (f) => recs.reduce((s, r) => s + r[f], 0);
      return {
        impl: c.name,
        acquired,
        failed: sum("failed"),
        overlaps: sum("overlaps"),
        overtakes: sum("overtakes"),
        overtakesPerRound: recs.map((r) => r.overtakes),
        requestsPerAcquisition: acquired ? round(sum("requests") / acquired, 2) : null,
        handOffP50ms: round(gaps.p50, 3),
        handOffP99ms: round(gaps.p99, 3),
        drainMs: round(median(recs.map((r) => r.totalMs)), 0),
        keelOverThisDrain: round(pairedRatio(perC, KEEL, c.name, "totalMs"), 3),
      };
    });
    return {
      measured: true,
      server: `etcd ${version}, 3 members on 127.0.0.1 (heartbeat 50 ms, election timeout 500 ms), every client on the first member`,
      clients: `keel-lock's etcdLockStore (fetch, Node ${process.versions.node}); etcd3 ${etcd3.version} (@grpc/grpc-js ${etcd3Require("@grpc/grpc-js/package.json").version}), one client`,
      settings: contenders.map((c) => ({ name: c.name, settings: c.settings })),
      uncontended: { runsPerRound: OPS, rounds: ROUNDS, rows: uncontended },
      contention: { waiters, gapMs, criticalSectionMs, timeoutMs, rounds: CROUNDS, rows: contention },
    };
  } finally {
    etcd3?.client.close();
    await cluster.stop();
  }
}

export function etcdMarkdown(s) {
  if (!s) return [];
  if (!s.measured) return ["", `#### 11. etcd: not measured (${s.reason})`];
  const u = s.uncontended;
  const L = ["", `#### 11. etcd: keel-lock's etcdLockStore against etcd3 (${s.server})`, "", `${s.clients}.`, ""];
  L.push(`Uncontended: ${u.rounds} rounds × ${u.runsPerRound} sequential run()s on one key. keel ÷ this: run()/s, per-round pairs, median over rounds.`, "");
  L.push("| implementation | run()/s | p50 ms | p99 ms | requests / run() | keel ÷ this |", "|---|---:|---:|---:|---:|---:|");
  for (const r of u.rows) L.push(`| ${r.impl} | ${r.opsPerSec} | ${r.p50ms} | ${r.p99ms} | ${r.requestsPerRun} | ${r.keelOverThis} |`);
  const c = s.contention;
  L.push("", `Ordered arrival: ${c.waiters} waiters ${c.gapMs} ms apart, ${c.criticalSectionMs} ms critical section, timeout ${c.timeoutMs} ms (${c.rounds} rounds).`, "");
  L.push("| implementation | acquired | failed | requests / acquisition | hand-off p50 ms | hand-off p99 ms | drain ms | overtakes per round | overlaps | keel ÷ this (drain time) |");
  L.push("|---|---:|---:|---:|---:|---:|---:|---|---:|---:|");
  for (const r of c.rows) {
    L.push(`| ${r.impl} | ${r.acquired} | ${r.failed} | ${r.requestsPerAcquisition} | ${r.handOffP50ms} | ${r.handOffP99ms} | ${r.drainMs} | ${r.overtakesPerRound.join(", ")} | ${r.overlaps} | ${r.keelOverThisDrain} |`);
  }
  L.push("", "Settings: " + s.settings.map((x) => `${x.name}: ${x.settings}`).join("; ") + ".");
  return L;
}
