// Node demo: many concurrent "charge invoice 42" requests in one process, on the default
// in-memory store. Exactly one charges; with a timeout, all of them run, one at a time.
//   node examples/node-demo.mjs        (after `make pkg`)
import { lock } from "../pkg/node/index.mjs";

const REQUESTS = 100;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function once() {
  let charges = 0;
  let inside = 0;
  let maxInside = 0;
  const started = performance.now();
  const results = await Promise.all(
    Array.from({ length: REQUESTS }, () =>
      lock("invoice:42").run(async () => {
        maxInside = Math.max(maxInside, ++inside);
        await sleep(20); // the "charge"
        inside--;
        return ++charges;
      }),
    ),
  );
  const ran = results.filter(([r]) => r).length;
  return { ran, refused: REQUESTS - ran, charges, maxInside, ms: performance.now() - started };
}

async function waiting(n) {
  let inside = 0;
  let maxInside = 0;
  let done = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: n }, () =>
      lock("report", 5_000).run(
        async () => {
          maxInside = Math.max(maxInside, ++inside);
          await sleep(5);
          inside--;
          done++;
        },
        { timeout: 10_000, retryDelay: 5 },
      ),
    ),
  );
  return { ran: done, maxInside, ms: performance.now() - started };
}

const a = await once();
const b = await waiting(20);
console.log("keel-lock demo — Node, MemoryLockStore (one process)\n");
console.log("| scenario | requests | ran | told 'held elsewhere' | max inside at once | time |");
console.log("|---|---:|---:|---:|---:|---:|");
console.log(`| charge invoice 42, don't wait | ${REQUESTS} | ${a.ran} | ${a.refused} | ${a.maxInside} | ${a.ms.toFixed(0)} ms |`);
console.log(`| rebuild report, wait ≤10 s | 20 | ${b.ran} | 0 | ${b.maxInside} | ${b.ms.toFixed(0)} ms |`);
if (a.ran !== 1 || a.charges !== 1 || b.ran !== 20 || b.maxInside !== 1) {
  console.error("\nUNEXPECTED: the lock did not hold");
  process.exit(1);
}
console.log("\nexactly one charge; every waiter ran, one at a time.");
