// One fresh process of the start-up measurement: import the implementation (for keel-lock this
// loads and instantiates the wasm), then time the first lock(key).run(fn). Prints JSON.
import { performance } from "node:perf_hooks";

const kind = process.argv[2];
const t0 = performance.now();
let runOnce;
if (kind === "keel-lock") {
  const keel = await import("../pkg/node/index.mjs");
  runOnce = () => keel.lock("startup", 30_000).run(() => 1);
} else if (kind === "floor (plain JS)") {
  const { FloorLock, FloorStore } = await import("./lib/floor.mjs");
  const store = new FloorStore();
  runOnce = () => new FloorLock(store, "startup", 30_000).run(() => 1);
} else if (kind === "async-mutex") {
  const { Mutex } = await import("async-mutex");
  runOnce = () => new Mutex().runExclusive(() => 1);
} else {
  throw new Error(`unknown kind ${kind}`);
}
const t1 = performance.now();
await runOnce();
const t2 = performance.now();
process.stdout.write(JSON.stringify({ importMs: t1 - t0, firstRunMs: t2 - t1, sinceProcessStartMs: t2 }));
