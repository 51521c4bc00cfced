// observe() over a store that pushes its holder changes (watch), from the packed tarball: every
// change is seen as it happens — a leader too brief for any poll included — in order, and the
// holder's expiry (which no store reports) is looked for when its time runs out. The store is
// the kit's Map store with watch (lib/js-stores.js); the stores that push for real (Redis,
// PostgreSQL, the Durable Object) run the same through their own tests and the kit.
import assert from "node:assert/strict";
import { afterEach, test } from "node:test";
import { lock, MemoryLockStore, observe, setLockStore } from "keel-lock";
import { brokenStore } from "./lib/js-stores.js";

afterEach(() => setLockStore(new MemoryLockStore()));

/** Collects what `observe(key)` yields into `seen` until the returned `stop()`. */
function watching(key, options = {}) {
  const seen = [];
  const controller = new AbortController();
  const done = (async () => {
    for await (const leader of observe(key, { intervalMs: 60_000, ...options, signal: controller.signal })) seen.push(leader);
  })();
  return {
    seen,
    async until(n, ms = 20_000) {
      const end = Date.now() + ms;
      while (seen.length < n && Date.now() < end) await new Promise((resolve) => setTimeout(resolve, 5));
      return seen;
    },
    async stop() {
      controller.abort();
      await done;
    },
  };
}

test("a pushing store: every change is seen in order, a leader gone before any poll included", async () => {
  const store = brokenStore(["watch"]);
  setLockStore(store);
  const watch = watching("leader");
  await watch.until(1);
  const a = lock("leader", 30_000);
  assert.equal(await a.acquire({ metadata: "a" }), true);
  const first = a.fence;
  await a.release(); // far inside the 60 s poll interval
  const b = lock("leader", 30_000);
  assert.equal(await b.acquire({ metadata: "b" }), true);
  const seen = await watch.until(4);
  await watch.stop();
  assert.deepEqual(seen, [null, { metadata: "a", fence: first }, null, { metadata: "b", fence: b.fence }]);
  assert.ok(seen[3].fence > seen[1].fence);
  await b.release();
});

test("a pushing store: the holder's expiry, which no store reports, is seen when its time runs out", async () => {
  setLockStore(brokenStore(["watch"]));
  const watch = watching("expiring");
  await watch.until(1);
  const started = Date.now();
  const a = lock("expiring", 150);
  assert.equal(await a.acquire({ metadata: "short" }), true);
  const seen = await watch.until(3);
  const took = Date.now() - started;
  await watch.stop();
  assert.deepEqual(seen, [null, { metadata: "short", fence: a.fence }, null]);
  // Not before the TTL; and at it, not at the next poll a minute away.
  assert.ok(took >= 140 && took < 20_000, `expiry seen after ${took} ms`);
});

test("a pushing store that says it may have missed reports (null) is looked at again", async () => {
  const store = brokenStore(["watch"]);
  const tells = [];
  const watch = store.watch;
  store.watch = (key, onChange) => {
    tells.push(onChange);
    return watch(key, onChange);
  };
  setLockStore(store);
  const seen = watching("missed");
  await seen.until(1);
  // A grant the store failed to report: only the "look again" brings it.
  store.rows.set("missed", { owner: "someone", expiresAt: Date.now() + 30_000, metadata: "unreported", fence: 41 });
  await new Promise((resolve) => setTimeout(resolve, 50));
  assert.deepEqual(seen.seen, [null]);
  tells[0](null);
  assert.deepEqual(await seen.until(2), [null, { metadata: "unreported", fence: 41 }]);
  // A report older than what was seen is not news.
  tells[0]({ fence: 40, held: true, metadata: "older", remainingMs: 1000 });
  tells[0]({ fence: 39, held: false });
  await new Promise((resolve) => setTimeout(resolve, 50));
  assert.deepEqual(seen.seen, [null, { metadata: "unreported", fence: 41 }]);
  await seen.stop();
});

test("a store whose watch reports nonsense fails observe with a TypeError; stopping stops the store's watch", async () => {
  const store = brokenStore(["watch"]);
  let stopped = 0;
  store.watch = async (key, onChange) => {
    setTimeout(() => onChange({ fence: "seven", held: true }), 20);
    return () => stopped++;
  };
  setLockStore(store);
  const iterator = observe("nonsense", { intervalMs: 60_000 });
  assert.deepEqual((await iterator.next()).value, null);
  await assert.rejects(iterator.next(), (e) => e instanceof TypeError && /watch\(\) must report/.test(e.message));
  await new Promise((resolve) => setTimeout(resolve, 10));
  assert.equal(stopped, 1);

  store.watch = async () => "not a function";
  await assert.rejects(observe("nonsense").next(), (e) => e instanceof TypeError && /resolve to a function/.test(e.message));
  await assert.rejects(observe("nonsense", { signal: "stop" }).next(), TypeError);
});
