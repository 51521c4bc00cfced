// The API's essentials, run in each runtime the package supports (Deno, Bun, a Vite bundle in
// Chromium), and the conformance kit (`testing`, keel-lock/testing) against a store made by
// `keel`. Throws on the first thing that is wrong; answers a summary otherwise.

// What smoke() answers when every check holds; its `shared` part is what semaphore(),
// readLock() and writeLock() did on the memory store.
export const SMOKE = {
  ok: true, winners: 1, maxInside: 1, done: 10, conformance: true,
  shared: {
    semaphorePeak: 3,
    weightedPeak: 4,
    readers: true,
    writerWhileRead: false,
    writer: true,
    readerWhileWritten: false,
    mismatch: { name: "LimitMismatchError", key: "mismatch", heldLimit: 3, limit: 4 },
    restored: { limit: 3, fence: true, takenWhileRestored: false, releasedByRestored: true, freeAfter: true },
  },
  multi: { allRan: true, keys: ["acct:1", "acct:2"], fences: true, refusedLeftFree: true, restored: true },
  events: {
    told: ["acquire", "granted", "run", "refused", "released"],
    spans: [["keel-lock.acquire", "acquired"], ["keel-lock.run", "refused"], ["keel-lock.release", "released"]],
  },
};

/**
 * `otel`: `{ instrumentKeelLock, BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor }`,
 * keel-lock/otel and the OpenTelemetry SDK as the runtime loads them.
 */
export async function smoke(keel, testing, otel) {
  const { lock, restoreLock, setLockStore, getLockStore, MemoryLockStore, LockNotHeldError } = keel;
  const { semaphore, readLock, writeLock, LimitMismatchError } = keel;
  const check = (ok, what) => {
    if (!ok) throw new Error(`smoke check failed: ${what}`);
  };
  check(!("checkLockStore" in keel), "keel-lock does not export checkLockStore");
  // A short TTL of a second: the owner's extend reaches it inside that TTL on any machine.
  const properties = await testing.checkLockStore(new MemoryLockStore(), { shortTtlMs: 1_000, settleMs: 50, contenders: 10 });
  check(properties.length >= 5 && properties.every((r) => r.ok), "keel-lock/testing passes keel-lock's MemoryLockStore");
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const store = new MemoryLockStore();
  setLockStore(store);
  check(getLockStore() === store, "getLockStore returns the store set");

  const [ran, result] = await lock("invoice:42").run(async () => "charged");
  check(ran === true && result === "charged", "run resolves [true, result]");

  let winners = 0;
  const results = await Promise.all(
    Array.from({ length: 100 }, () => lock("race").run(async () => { winners++; await sleep(10); })),
  );
  check(results.filter(([r]) => r).length === 1 && winners === 1, "100 concurrent runs: exactly one ran");

  let inside = 0, maxInside = 0, done = 0;
  await Promise.all(
    Array.from({ length: 10 }, () =>
      lock("queue").run(async () => { maxInside = Math.max(maxInside, ++inside); await sleep(2); inside--; done++; },
        { timeout: 10_000, retryDelay: 2 }),
    ),
  );
  check(done === 10 && maxInside === 1, "10 waiters all ran, one at a time");

  const err = await lock("never").extend().then(() => null, (e) => e);
  check(err instanceof LockNotHeldError && err instanceof Error && err.name === "LockNotHeldError" && err.key === "never",
    "extend on an unheld lock rejects with LockNotHeldError");

  const l = lock("handover", 60_000);
  await l.acquire();
  const r = restoreLock(l.serialize());
  await r.extend(90_000);
  check((await r.release()) === true && (await l.release()) === false, "serialize/restore hands the lock over");

  let typeError = null;
  try { lock(""); } catch (e) { typeError = e; }
  check(typeError instanceof RangeError, "empty key is a RangeError");

  const shared = await sharedHolds();
  const multi = await severalKeys();
  const events = await lockEvents();

  const tokens = new Set();
  setLockStore({
    acquire: (k, owner) => { tokens.add(owner); return true; },
    release: () => true, extend: () => true, isLocked: () => false, remainingTime: () => null,
  });
  for (let i = 0; i < 50; i++) await lock(`t${i}`).run(() => {});
  check(tokens.size === 50 && [...tokens].every((t) => /^[0-9a-f]{32}$/.test(t)), "fresh 128-bit tokens");
  return { ok: true, winners, maxInside, done, conformance: true, shared, multi, events };

  // onLockEvent, and keel-lock/otel's spans from the real OpenTelemetry SDK: a hold, a refusal.
  async function lockEvents() {
    const told = [];
    const exporter = new otel.InMemorySpanExporter();
    const tracerProvider = new otel.BasicTracerProvider({ spanProcessors: [new otel.SimpleSpanProcessor(exporter)] });
    const stopTelling = keel.onLockEvent((e) => told.push(e.type));
    const stopTracing = otel.instrumentKeelLock({ tracerProvider });
    const holder = lock("told");
    await holder.acquire();
    await lock("told").runImmediately(() => {});
    await holder.release();
    stopTelling();
    stopTracing();
    await lock("told").run(() => {});
    const spans = exporter.getFinishedSpans().map((span) => [span.name, span.attributes["keel_lock.outcome"]]);
    return { told, spans };
  }

  // Several keys at once on the memory store: opposite orders all run; a refusal holds nothing.
  async function severalKeys() {
    const runs = Array.from({ length: 8 }, (_, i) =>
      lock(i % 2 ? ["acct:1", "acct:2"] : ["acct:2", "acct:1"]).run(() => new Promise((r) => setTimeout(r, 1)), { timeout: 5_000 }),
    );
    const allRan = (await Promise.all(runs)).every(([ran]) => ran);
    const both = lock(["acct:2", "acct:1"]);
    const [, fences] = await both.run(({ fences }) => fences);
    const blocker = lock("acct:2");
    await blocker.acquire();
    const refused = !(await both.acquire());
    const refusedLeftFree = refused && !(await lock("acct:1").isLocked());
    await blocker.release();
    await both.acquire();
    const back = restoreLock(both.serialize());
    const restored = (await back.release()) && !(await lock("acct:1").isLocked()) && !(await lock("acct:2").isLocked());
    return { allRan, keys: both.keys, fences: fences !== null && fences["acct:1"] >= 1 && fences["acct:2"] >= 1, refusedLeftFree, restored };
  }

  // Semaphores and read-write locks on the memory store set above: answers what was seen.
  async function sharedHolds() {
    // Concurrent callers: at most `limit` permits in use at once, and all of them used.
    const peakInside = async (handles, permitsOf) => {
      let weight = 0, peak = 0, ran = 0;
      await Promise.all(handles.map((h, i) => h.run(async () => {
        weight += permitsOf(i); peak = Math.max(peak, weight); await sleep(5); weight -= permitsOf(i); ran++;
      }, { timeout: 10_000, retryDelay: 2, permits: permitsOf(i) })));
      check(ran === handles.length, `every semaphore caller ran (${ran} of ${handles.length})`);
      return peak;
    };
    const semaphorePeak = await peakInside(Array.from({ length: 12 }, () => semaphore("sem", 3)), () => 1);
    const weightedPeak = await peakInside(Array.from({ length: 9 }, () => semaphore("weighted", 4)), (i) => 1 + (i % 3));

    const [r1, r2, w] = [readLock("doc"), readLock("doc"), writeLock("doc")];
    const readers = (await r1.acquire()) && (await r2.acquire());
    const writerWhileRead = await w.acquire();
    await r1.release();
    await r2.release();
    const writer = await w.acquire();
    const readerWhileWritten = await readLock("doc").acquire();
    await w.release();

    const three = semaphore("mismatch", 3);
    await three.acquire();
    const mismatch = await semaphore("mismatch", 4).acquire({ timeout: 100 }).then(() => null, (e) => e);
    check(mismatch instanceof LimitMismatchError && mismatch instanceof Error, `a different limit rejects with LimitMismatchError (${mismatch})`);
    await three.release();

    const held = semaphore("restore", 3, 60_000);
    await held.acquire({ permits: 2 });
    const restored = restoreLock(held.serialize());
    const sameFence = restored.fence === held.fence;
    await restored.extend(90_000);
    const takenWhileRestored = await semaphore("restore", 3).acquire({ permits: 2 });
    const releasedByRestored = await restored.release();
    const freeAfter = await semaphore("restore", 3).acquire({ permits: 3 });

    return {
      semaphorePeak,
      weightedPeak,
      readers,
      writerWhileRead,
      writer,
      readerWhileWritten,
      mismatch: { name: mismatch.name, key: mismatch.key, heldLimit: mismatch.heldLimit, limit: mismatch.limit },
      restored: { limit: restored.limit, fence: sameFence, takenWhileRestored, releasedByRestored, freeAfter },
    };
  }
}
