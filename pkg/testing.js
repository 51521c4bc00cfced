// keel-lock/testing: the LockStore conformance kit, and a checker of recorded histories under
// load (checkHistory, checkLockStoreUnderLoad; the checker is src/history/). The properties
// themselves live in the Rust core (src/conformance/, one function per property) and run in a
// wasm of their own (dist/testing, built with the `testing` feature), so the builds behind
// `keel-lock` do not carry them. This entry turns their results into something a test runner
// understands — a rejection naming every property the store broke.
//
// `#testing-wasm` (the package.json `imports` map) picks the build for the runtime: Node, browser
// or workerd. That instance is separate from the application's `keel-lock` instance, so it drives
// every store — a `MemoryLockStore` made by `keel-lock` included — through the store's own five
// methods, as it would any store written in JS.
import { checkLockStore as runProperties, checkHistory as runChecker } from "#testing-wasm";

/** Thrown (rejected) by `checkLockStore` when a store breaks one or more properties. */
export class LockStoreConformanceError extends Error {
  constructor(failures, results) {
    const count = `${failures.length} of ${results.length} LockStore ${results.length === 1 ? "property" : "properties"}`;
    const lines = failures.map((f) => `  - ${f.property}: ${String(f.message ?? "failed").replace(/\n/g, "\n    ")}`);
    super(`the store is not a lock: ${count} failed\n${lines.join("\n")}`);
    this.name = "LockStoreConformanceError";
    // Read-only and not enumerable, so that printing the error (a test runner's report,
    // `util.inspect`) shows the message, which already names every failure, rather than ending
    // in a dump of every property's result.
    Object.defineProperties(this, {
      /** The failed properties, `[{ property, ok: false, message }]`. */
      failures: { value: failures },
      /** Every property's outcome, passed ones included. */
      results: { value: results },
    });
  }
}

/**
 * Runs every property against `store` and resolves one `{ property, ok, message }` per
 * property, never rejecting for a failed property (only for unusable arguments).
 */
export async function lockStoreResults(store, options) {
  const results = await runProperties(store, options);
  results.push(await watchReportsEveryChangeInOrder(store, options?.keyPrefix ?? "keel-lock-conformance:"));
  return results;
}

/**
 * Runs every property against `store`. Resolves the per-property results when all pass;
 * rejects with a `LockStoreConformanceError` listing each failed property and its message.
 */
export async function checkLockStore(store, options) {
  const results = await lockStoreResults(store, options);
  const failures = results.filter((r) => !r.ok);
  if (failures.length > 0) throw new LockStoreConformanceError(failures, results);
  return results;
}

/**
 * Checks a recorded history: an array of events `{ client, key, owner, type, op, t0, t1,
 * ttlMs, immediate, fence, accepted, persistent }` (times in ms on a clock every recorder
 * shares; `[t0, t1]` certainly contains the event). Resolves
 * `{ ok, operations, violationCount, violations, lossCount, losses, restarts }`; never rejects for a
 * violation, only for a malformed event (TypeError) or option (RangeError).
 */
export function checkHistory(history, options) {
  return runChecker(history, options);
}

// The one property of the JS seam alone: `watch` reports through a callback, which the core's
// properties (src/conformance/) have no way to receive.
const WATCH = "watch_reports_every_change_in_order";
// How long the reports of the last change may take to arrive.
const WATCH_SETTLE_MS = 2000;

/**
 * On a store with `watch`: one key's holder changes — a grant, a hand-over to a queued waiter
 * (when the store queues), a release, a force-release, a grant, an extend and a release — are
 * reported once each, in that order, with the grants' fences and metadata and no owner token
 * (the end of a hold handed straight to a waiter may go unsaid: the newer grant says it); the
 * extend is not reported, and nothing after `stop()`.
 */
async function watchReportsEveryChangeInOrder(store, keyPrefix) {
  if (typeof store.watch !== "function") {
    return { property: WATCH, ok: true, applicable: false, message: "the store has no watch(): observe polls its inspect" };
  }
  const key = `${keyPrefix}watch:${token()}`;
  const owners = [token(), token(), token()];
  const said = typeof store.inspect === "function";
  const metadata = (i) => (said ? `holder ${i}` : undefined);
  const reports = [];
  const expected = [];
  const grant = (answer, i) => {
    if (answer === false || answer === null || typeof answer !== "object") throw new Error(`holder ${i} was refused a free key`);
    expected.push({ fence: answer.fence, held: true, metadata: said ? `holder ${i}` : null });
    return answer.fence;
  };
  let stop;
  try {
    stop = await store.watch(key, (change) => reports.push(change));
    if (typeof stop !== "function") throw new Error(`watch() resolved ${String(stop)}, not a function that stops it`);
    const ttl = 30_000;
    let fence = grant(await store.acquire(key, owners[0], ttl, metadata(0)), 0);
    if (typeof store.acquireOrWait === "function") {
      const waiting = store.acquireOrWait(key, owners[1], ttl, 10_000, 50, metadata(1));
      await pause(50); // queued behind holder 0
      if (!(await store.release(key, owners[0]))) throw new Error("holder 0's release was refused");
      // Handed straight over: the end may go unsaid, the newer grant says it.
      expected.push({ fence, held: false, mayGoUnsaid: true });
      fence = grant(await waiting, 1);
    } else {
      if (!(await store.release(key, owners[0]))) throw new Error("holder 0's release was refused");
      expected.push({ fence, held: false });
      fence = grant(await store.acquire(key, owners[1], ttl, metadata(1)), 1);
    }
    if (!(await store.forceRelease(key))) throw new Error("the force-release of holder 1 found nothing held");
    expected.push({ fence, held: false });
    fence = grant(await store.acquire(key, owners[2], ttl, metadata(2)), 2);
    if (!(await store.extend(key, owners[2], ttl))) throw new Error("holder 2's extend was refused");
    if (!(await store.release(key, owners[2]))) throw new Error("holder 2's release was refused");
    expected.push({ fence, held: false });
    const until = performance.now() + WATCH_SETTLE_MS;
    while (reports.length < expected.length && performance.now() < until) await pause(10);
    await pause(50); // anything extra shows now
  } catch (error) {
    return { property: WATCH, ok: false, applicable: true, message: String(error?.message ?? error) };
  } finally {
    if (typeof stop === "function") await stop();
  }
  const seen = reports.length;
  // After stop(), a change is not reported.
  if ((await store.acquire(key, owners[0], 1000)) !== false) await store.release(key, owners[0]);
  await pause(50);
  const failed = (message) => ({ property: WATCH, ok: false, applicable: true, message });
  const text = JSON.stringify(reports);
  const leaked = owners.find((owner) => text.includes(owner));
  if (leaked !== undefined) return failed(`a report carries an owner token: ${text}`);
  const got = reports.slice(0, seen).map((r) =>
    r === null || typeof r !== "object" ? r : r.held ? { fence: r.fence, held: true, metadata: r.metadata ?? null } : { fence: r.fence, held: r.held },
  );
  const told = expected.filter((e) => !e.mayGoUnsaid).map(({ mayGoUnsaid, ...e }) => e);
  const all = expected.map(({ mayGoUnsaid, ...e }) => e);
  if (JSON.stringify(got) !== JSON.stringify(all) && JSON.stringify(got) !== JSON.stringify(told)) {
    return failed(`reported ${JSON.stringify(got)}; the changes were ${JSON.stringify(all)}`);
  }
  for (const r of reports.slice(0, seen)) {
    if (r.held && !(r.remainingMs > 0 && r.remainingMs <= 30_000)) return failed(`a grant reported remainingMs ${r.remainingMs} of a 30000 ms hold`);
  }
  if (reports.length > seen) return failed(`reported ${JSON.stringify(reports.slice(seen))} after stop()`);
  return { property: WATCH, ok: true, applicable: true, message: null };
}

/** A random owner token: 32 hex digits. */
function token() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

// mulberry32: a small seeded generator, so a run's choices repeat for a seed (its timing does not).
function generator(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const now = () => performance.timeOrigin + performance.now();
const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function loadOption(options, name, fallback, min, max) {
  const value = options[name] ?? fallback;
  if (typeof value !== "number" || !Number.isFinite(value) || value < min || value > max) {
    throw new RangeError(`checkLockStoreUnderLoad option ${name} must be a number from ${min} to ${max}`);
  }
  return value;
}

/**
 * Runs `clients` concurrent clients for `durationMs` against stores from `makeStore(i)` (one
 * per client; return the same object for an in-process store), on `keys` keys, recording every
 * call as a history, and checks it. Each client loops: an immediate acquire; when granted, enter,
 * write to an in-process fenced resource, sometimes extend, sometimes stay past the TTL or never
 * release, leave, release; now and then a stranger's release or extend. Resolves
 * `{ ok, operations, grants, violationCount, violations, losses, history? }`.
 */
export async function checkLockStoreUnderLoad(makeStore, options = {}) {
  if (typeof makeStore !== "function") throw new TypeError("checkLockStoreUnderLoad: makeStore must be a function");
  if (options === null || typeof options !== "object") throw new TypeError("checkLockStoreUnderLoad options must be an object");
  const clients = Math.floor(loadOption(options, "clients", 8, 1, 1000));
  const keyCount = Math.floor(loadOption(options, "keys", 2, 1, 1000));
  const durationMs = loadOption(options, "durationMs", 3000, 1, 3_600_000);
  const seed = Math.floor(loadOption(options, "seed", 1, 0, 2 ** 32 - 1));
  const ttlMs = Math.ceil(loadOption(options, "ttlMs", 200, 10, 600_000));
  const holdMs = loadOption(options, "holdMs", 8, 0, 600_000);
  const maxOperations = Math.floor(loadOption(options, "maxOperations", 1_000_000, 1, 10_000_000));
  const leaseToleranceMs = loadOption(options, "leaseToleranceMs", 5, 0, 3_600_000);
  const prefix = typeof options.keyPrefix === "string" ? options.keyPrefix : `keel-lock-load:${seed}:${Date.now()}:`;
  const keys = Array.from({ length: keyCount }, (_, k) => `${prefix}${k}`);
  const stores = [];
  for (let i = 0; i < clients; i++) stores.push(await makeStore(i));

  const history = [];
  const record = (event) => history.push(event);
  const resource = new Map(); // key → highest accepted fence: a correct fenced resource
  const deadline = now() + durationMs;
  let operations = 0;
  let grants = 0;
  let labels = 0;

  // One store call, recorded as invoke and ok / fail / info.
  async function call(client, store, op, key, owner, label, ttl, immediate) {
    operations++;
    record({ client, key, owner: label, type: "invoke", op, t0: now(), ttlMs: ttl, immediate });
    let answer;
    try {
      answer = await (op === "acquire" ? store.acquire(key, owner, ttl) : op === "release" ? store.release(key, owner) : store.extend(key, owner, ttl));
    } catch (error) {
      record({ client, key, owner: label, type: "info", op, t0: now(), error: String(error?.message ?? error) });
      return { unknown: true };
    }
    const t0 = now();
    if (answer === false || answer === null || answer === undefined) {
      record({ client, key, owner: label, type: "fail", op, t0 });
      return { granted: false };
    }
    const fence = typeof answer === "object" && Number.isSafeInteger(answer.fence) ? answer.fence : null;
    record({ client, key, owner: label, type: "ok", op, t0, fence });
    return { granted: true, fence };
  }

  async function client(id) {
    const random = generator((seed ^ Math.imul(id + 1, 0x9e3779b1)) >>> 0);
    const store = stores[id];
    while (now() < deadline && operations < maxOperations) {
      const key = keys[Math.floor(random() * keys.length)];
      const roll = random();
      if (roll < 0.05) {
        // A stranger (never acquired this key) tries to release or extend it.
        const op = roll < 0.025 ? "release" : "extend";
        await call(id, store, op, key, token(), `stranger:${id}:${labels++}`, ttlMs, false);
        continue;
      }
      const owner = token();
      const label = `c${id}:${labels++}`;
      const got = await call(id, store, "acquire", key, owner, label, ttlMs, true);
      if (!got.granted) {
        await pause(random() * 2);
        continue;
      }
      grants++;
      record({ client: id, key, owner: label, type: "enter", t0: now() });
      if (got.fence !== null) {
        const t0 = now();
        const accepted = got.fence >= (resource.get(key) ?? 0);
        if (accepted) resource.set(key, got.fence);
        record({ client: id, key, owner: label, type: "write", t0, t1: now(), fence: got.fence, accepted });
      }
      const fate = random();
      await pause(random() * holdMs);
      if (fate < 0.15) await call(id, store, "extend", key, owner, label, ttlMs, false);
      if (fate > 0.97) {
        // Stay past the TTL: the next holder may take over; this one's late release must fail.
        await pause(ttlMs + 10);
      }
      record({ client: id, key, owner: label, type: "exit", t0: now() });
      if (fate > 0.95 && fate <= 0.97) continue; // never release: the lease must expire
      await call(id, store, "release", key, owner, label, 0, false);
    }
  }

  await Promise.all(Array.from({ length: clients }, (_, id) => client(id)));
  const report = await runChecker(history, { leaseToleranceMs, maxReported: options.maxReported ?? 20 });
  const result = { ...report, grants };
  if (options.keepHistory) result.history = history;
  return result;
}
