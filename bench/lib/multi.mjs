// Section 8: several keys at once on Redis. keel-lock's `lock([a, b]).run(fn, { timeout })` (the
// first attempt one script for every key, redisLockStore's acquireMany; refused, the keys taken
// one at a time in one order, waiting in Redis) side by side with
// redlock-universal's `LockManager.usingBatch([a, b], fn)` (one Lua script takes every key;
// retries by polling), in the same interleaved rounds and per-round ratios as the other sections.
//
// Uncontended: one caller, 2-key runs on fresh keys. Contended: callers over a few keys, each run
// on a pair of them in one order or the other, a short hold: completions per second, failures
// (a run that gave up), and whether two holders of one key were ever inside at once.
import { performance } from "node:perf_hooks";
import { IoredisAdapter, LockManager } from "redlock-universal";
import { lock, setLockStore } from "../../pkg/node/index.mjs";
import { redisLockStore } from "../../pkg/stores/redis.js";
import { median, round } from "./stats.mjs";

const TTL = 30_000;
const WAIT_TIMEOUT = 10_000;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function multiKeyRedis({ quick, log, interleave, pairedRatio, makeClient, settle }) {
  const keelClient = await makeClient();
  const keelStore = redisLockStore(keelClient);
  const rluClient = await makeClient();
  const KEEL = "keel-lock lock([a, b]) (redisLockStore)";
  const contenders = [
    {
      name: KEEL,
      client: keelClient,
      settings: "setLockStore(redisLockStore(client)); lock([a, b], 30000).run(fn, { timeout }) — first every key in one script (acquireMany); refused, the keys one at a time in code-point order, each waiting in Redis's FIFO (acquireOrWait); defaults otherwise",
      install: () => setLockStore(keelStore),
      async run(keys, fn, timeout) {
        const [ran] = await lock(keys, TTL).run(fn, timeout ? { timeout } : undefined);
        return ran;
      },
    },
    {
      name: "redlock-universal usingBatch",
      client: rluClient,
      settings: "new LockManager({ nodes: [new IoredisAdapter(client)], defaultTTL: 30000 }).usingBatch(keys, fn, { retryDelay: 10, retryAttempts: timeout / 10 }) — one Lua script takes every key (sorted); polls while any is held",
      manager: new LockManager({ nodes: [new IoredisAdapter(rluClient)], defaultTTL: TTL }),
      install() {},
      async run(keys, fn, timeout) {
        try {
          await this.manager.usingBatch(keys, async () => fn(), timeout ? { retryDelay: 10, retryAttempts: Math.ceil(timeout / 10) } : { retryAttempts: 0 });
          return true;
        } catch {
          return false;
        }
      },
    },
  ];

  // Uncontended: one caller, sequential 2-key runs, each on a fresh pair of keys.
  const OPS = quick ? 300 : 1500;
  const ROUNDS = quick ? 3 : 5;
  let pair = 0;
  log(`(8) redis 2-key uncontended: warm-up + ${ROUNDS} rounds × ${OPS} runs`);
  const uncontended = async (c) => {
    c.install();
    const before = c.client.requests;
    const started = performance.now();
    for (let i = 0; i < OPS; i++) {
      pair++;
      const ran = await c.run([`multi:uc:${pair}:b`, `multi:uc:${pair}:a`], () => 1, 0);
      if (!ran) throw new Error(`${c.name}: an uncontended run was refused`);
    }
    const seconds = (performance.now() - started) / 1000;
    return { rate: OPS / seconds, requestsPerRun: (c.client.requests - before) / OPS };
  };
  for (const c of contenders) await uncontended(c);
  const uc = await interleave(contenders, ROUNDS, uncontended);

  // Contended: callers over four keys, each run on one of the pairs in one order or the other.
  const CALLERS = 16;
  const RUNS = quick ? 5 : 20;
  const C_ROUNDS = quick ? 2 : 5;
  log(`(8) redis 2-key contention: ${C_ROUNDS} rounds × ${CALLERS} callers × ${RUNS} runs over 4 keys, 1 ms hold`);
  let contendedRound = 0;
  const contended = async (c) => {
    c.install();
    contendedRound++;
    const keys = ["w", "x", "y", "z"].map((k) => `multi:c:${contendedRound}:${k}`);
    const pairs = [[0, 1], [1, 0], [1, 2], [2, 1], [2, 3], [3, 0], [0, 2], [3, 1]];
    const inside = new Set();
    let overlaps = 0;
    let failed = 0;
    const before = c.client.requests;
    const started = performance.now();
    await Promise.all(
      Array.from({ length: CALLERS }, async (_, i) => {
        for (let r = 0; r < RUNS; r++) {
          const [x, y] = pairs[(i + r) % pairs.length];
          const mine = [keys[x], keys[y]];
          const ran = await c.run(
            mine,
            async () => {
              for (const k of mine) {
                if (inside.has(k)) overlaps++;
                inside.add(k);
              }
              await sleep(1);
              for (const k of mine) inside.delete(k);
            },
            WAIT_TIMEOUT,
          );
          if (!ran) failed++;
        }
      }),
    );
    const seconds = (performance.now() - started) / 1000;
    const done = CALLERS * RUNS - failed;
    return { rate: done / seconds, failed, overlaps, requestsPerRun: (c.client.requests - before) / Math.max(1, done) };
  };
  for (const c of contenders) await contended(c);
  const ct = await interleave(contenders, C_ROUNDS, contended);

  await keelStore.close?.();
  keelClient.disconnect();
  rluClient.disconnect();

  const summary = (per, name) => ({
    rate: round(median(per[name].map((r) => r.rate)), 0),
    requestsPerRun: round(median(per[name].map((r) => r.requestsPerRun)), 2),
    ratio: round(pairedRatio(per, KEEL, name, "rate"), 3),
  });
  return {
    settings: contenders.map((c) => ({ name: c.name, settings: c.settings })),
    uncontended: Object.fromEntries(contenders.map((c) => [c.name, summary(uc, c.name)])),
    contended: Object.fromEntries(
      contenders.map((c) => [
        c.name,
        {
          ...summary(ct, c.name),
          failed: ct[c.name].reduce((s, r) => s + r.failed, 0),
          overlaps: ct[c.name].reduce((s, r) => s + r.overlaps, 0),
        },
      ]),
    ),
    rounds: { uncontended: `${ROUNDS} × ${OPS}`, contended: `${C_ROUNDS} × ${CALLERS} callers × ${RUNS} runs` },
  };
}

export function multiKeyMarkdown(s) {
  if (!s) return [];
  const L = ["", "#### 8. Several keys at once on Redis: `lock([a, b]).run()` against redlock-universal's `usingBatch`", ""];
  L.push(`Uncontended (${s.rounds.uncontended} runs, one caller, a fresh pair of keys each run) and contended (${s.rounds.contended}, pairs of 4 keys in both orders, 1 ms hold, timeout 10 s). keel ÷ this: completions per second, per-round pairs, median over rounds.`, "");
  L.push("| implementation | uncontended run()/s | requests / run() | keel ÷ this | contended runs/s | requests / run() | gave up | two holders of a key at once | keel ÷ this |");
  L.push("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
  for (const [name, u] of Object.entries(s.uncontended)) {
    const c = s.contended[name];
    L.push(`| ${name} | ${u.rate} | ${u.requestsPerRun} | ${u.ratio} | ${c.rate} | ${c.requestsPerRun} | ${c.failed} | ${c.overlaps} | ${c.ratio} |`);
  }
  L.push("", "Settings: " + s.settings.map((x) => `${x.name}: ${x.settings}`).join("; ") + ".");
  return L;
}
