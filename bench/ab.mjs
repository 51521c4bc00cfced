// Two builds of keel-lock side by side in one Node process: is a change slower in-isolate?
//
//   node bench/ab.mjs <dir A> <dir B> [rounds]
//
// Each dir is a checkout whose pkg/ has been built (scripts/build-pkg.sh). Both packages load
// into this process as separate instances (each build keys its instance by a hash of its own
// .wasm and glue), and the same three workloads run on each in alternating rounds, A first in
// even rounds and B first in odd ones: `lock(key).run(fn)` on one key, the same over 1000 keys
// (a fresh handle per run), and 16 callers × 10 waiting runs on one key with one setImmediate
// as the section; then the same first and last with `semaphore(key, 4)` (32 callers when
// contended, as bench section 5). Printed: the median over rounds of B's time ÷ A's time in the same round
// (< 1: B is faster). The build loaded second tends to read a few per cent slower, so run it
// both ways round and read the two together. Nothing here asserts on the numbers.
import { pathToFileURL } from "node:url";
import { join, resolve } from "node:path";

const [dirA, dirB, roundsArg] = process.argv.slice(2);
if (!dirA || !dirB) {
  console.error("usage: node bench/ab.mjs <dir A> <dir B> [rounds]");
  process.exit(2);
}
const ROUNDS = Number(roundsArg ?? 30);
const load = (dir) => import(pathToFileURL(join(resolve(dir), "pkg", "node", "index.mjs")).href);
const A = await load(dirA);
const B = await load(dirB);

const N = 20_000;
const KEYS = Array.from({ length: 1000 }, (_, i) => `ab:entity:${i}`);
const fn = () => 1;
const tick = () => new Promise((r) => setImmediate(r));

const workloads = {
  "one key": async (m) => {
    const t0 = performance.now();
    for (let i = 0; i < N; i++) await m.lock("ab:one").run(fn);
    return performance.now() - t0;
  },
  "1000 keys": async (m) => {
    const t0 = performance.now();
    for (let i = 0; i < N; i++) await m.lock(KEYS[i % KEYS.length]).run(fn);
    return performance.now() - t0;
  },
  "contended, 16 callers": async (m) => {
    const t0 = performance.now();
    for (let r = 0; r < 5; r++) {
      await Promise.all(
        Array.from({ length: 16 }, async () => {
          for (let i = 0; i < 10; i++) await m.lock("ab:contended").run(tick, { timeout: 10_000 });
        }),
      );
    }
    return performance.now() - t0;
  },
  "semaphore, one key": async (m) => {
    const t0 = performance.now();
    for (let i = 0; i < N; i++) await m.semaphore("ab:sem", 4).run(fn);
    return performance.now() - t0;
  },
  "semaphore contended, 32 callers": async (m) => {
    const t0 = performance.now();
    for (let r = 0; r < 5; r++) {
      await Promise.all(
        Array.from({ length: 32 }, async () => {
          for (let i = 0; i < 10; i++) await m.semaphore("ab:sem:contended", 4).run(tick, { timeout: 10_000 });
        }),
      );
    }
    return performance.now() - t0;
  },
};

const median = (a) => a.slice().sort((x, y) => x - y)[a.length >> 1];
for (const [name, run] of Object.entries(workloads)) {
  for (let i = 0; i < 3; i++) for (const m of [A, B]) await run(m); // warm-up
  const ratios = [];
  for (let round = 0; round < ROUNDS; round++) {
    if (round % 2 === 0) {
      const a = await run(A);
      ratios.push((await run(B)) / a);
    } else {
      const b = await run(B);
      ratios.push(b / (await run(A)));
    }
  }
  console.log(`${name}: time(B) / time(A) = ${median(ratios).toFixed(3)} (median of ${ROUNDS} rounds)`);
}
