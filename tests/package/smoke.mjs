// The API's essentials, run in each runtime the package supports (Deno, Bun, a Vite bundle in
// Chromium), and the conformance kit (`testing`, keel-lock/testing) against a store made by
// `keel`. Throws on the first thing that is wrong; answers a summary otherwise.
export async function smoke(keel, testing) {
  const { lock, restoreLock, setLockStore, getLockStore, MemoryLockStore, LockNotHeldError } = keel;
  const check = (ok, what) => {
    if (!ok) throw new Error(`smoke check failed: ${what}`);
  };
  check(!("checkLockStore" in keel), "keel-lock does not export checkLockStore");
  const properties = await testing.checkLockStore(new MemoryLockStore(), { shortTtlMs: 50, settleMs: 50, contenders: 10 });
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

  const tokens = new Set();
  setLockStore({
    acquire: (k, owner) => { tokens.add(owner); return true; },
    release: () => true, extend: () => true, isLocked: () => false, remainingTime: () => null,
  });
  for (let i = 0; i < 50; i++) await lock(`t${i}`).run(() => {});
  check(tokens.size === 50 && [...tokens].every((t) => /^[0-9a-f]{32}$/.test(t)), "fresh 128-bit tokens");
  return { ok: true, winners, maxInside, done, conformance: true };
}
