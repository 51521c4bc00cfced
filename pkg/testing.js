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
  return runProperties(store, options);
}

/**
 * Runs every property against `store`. Resolves the per-property results when all pass;
 * rejects with a `LockStoreConformanceError` listing each failed property and its message.
 */
export async function checkLockStore(store, options) {
  const results = await runProperties(store, options);
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
  const token = () => {
    const bytes = crypto.getRandomValues(new Uint8Array(16));
    return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  };

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
