// Compiled with `tsc --strict` against the installed package: the documented snippets must
// type-check as users write them.
import { lock, semaphore, readLock, writeLock, restoreLock, setLockStore, getLockStore, MemoryLockStore, LockNotHeldError, LockUnavailableError, LockStoreTimeoutError, LimitMismatchError } from "keel-lock";
import type { Lock, LockStore, AcquireOptions, MultiKeyLock, LockEvent } from "keel-lock";
import { onLockEvent } from "keel-lock";
import { instrumentKeelLock } from "keel-lock/otel";
// @ts-expect-error checkLockStore lives in keel-lock/testing only
import { checkLockStore } from "keel-lock";
import { checkLockStore as checkStore, type PropertyResult } from "keel-lock/testing";

declare const invoice: { id: number };
declare function charge(i: { id: number }): Promise<{ receipt: string }>;
declare function rebuild(): void;
declare function process(batch: number[]): Promise<void>;
declare const batches: number[][];

interface FakeRedis {
  set(k: string, v: string, px: "PX", ttl: number, nx: "NX"): Promise<"OK" | null>;
  eval(script: string, keys: number, ...args: string[]): Promise<number>;
  exists(k: string): Promise<number>;
  pttl(k: string): Promise<number>;
}

// The documentation's LockStore implementation pattern.
const redisStore = (client: FakeRedis): LockStore => ({
  async acquire(key, owner, ttlMs) {
    return (await client.set(key, owner, "PX", ttlMs, "NX")) === "OK";
  },
  async release(key, owner) {
    return (await client.eval("release", 1, key, owner)) === 1;
  },
  async extend(key, owner, ttlMs) {
    return (await client.eval("extend", 1, key, owner, String(ttlMs))) === 1;
  },
  async isLocked(key) {
    return (await client.exists(key)) === 1;
  },
  async remainingTime(key) {
    const ms = await client.pttl(key);
    return ms < 0 ? null : ms;
  },
});

export async function snippets(client: FakeRedis): Promise<void> {
  const [ran, result] = await lock("invoice:42").run(() => charge(invoice));
  if (!ran) return;
  const receipt: string = result.receipt; // narrowed: result is the resolved value when ran
  void receipt;

  const [ran2, nothing] = await lock("busy").run(() => 1);
  if (!ran2) {
    const u: undefined = nothing;
    void u;
  }

  await lock("report").run(() => rebuild(), { timeout: 5_000, retryDelay: 100 });
  await lock("report").run(() => rebuild(), { ifAvailable: true });
  await lock("report").acquire({ steal: true });
  await lock("report").runImmediately(() => rebuild());
  lock("invoice:42");
  lock("nightly-report", 300_000);
  const l: Lock = lock("import", 60_000);
  await l.run(async () => {
    for (const b of batches) {
      await process(b);
      await l.extend();
    }
  });
  const opts: AcquireOptions = { timeout: 2_000 };
  if (!(await l.acquire(opts))) return;
  try {
    /* … */
  } finally {
    await l.release();
  }
  const s: string = l.serialize();
  const r = restoreLock(s);
  await r.extend(60_000);
  await r.release();
  const locked: boolean = await l.isLocked();
  const expired: boolean = await l.isExpired();
  const left: number | null = await l.getRemainingTime();
  void [locked, expired, left];
  setLockStore(new MemoryLockStore());
  setLockStore(redisStore(client));
  const current: LockStore = getLockStore();
  void current;
  try {
    await l.extend();
  } catch (e) {
    if (e instanceof LockNotHeldError) {
      const key: string = e.key;
      void key;
    }
  }
}

export async function holding(key: string): Promise<void> {
  const [ran, fence] = await lock(key, 10_000).run(
    async ({ fence, signal }) => {
      signal.addEventListener("abort", () => {});
      const lost: boolean = signal.aborted;
      void lost;
      return fence;
    },
    { timeout: 5_000, autoExtend: { every: 1_000, maxHoldMs: 60_000 } },
  );
  if (ran) {
    const f: number | null = fence;
    void f;
  }
  const l = lock(key);
  const controller = new AbortController();
  await l.acquire({ timeout: 100, signal: controller.signal });
  const context = l.autoExtend({ every: 500 });
  const sameFence: number | null = context.fence;
  void sameFence;
  await l.stopAutoExtend();
  const freed: boolean = await l.forceRelease();
  void freed;
  const held = await lock(key).hold({ timeout: 100, autoExtend: true });
  await held[Symbol.asyncDispose]();
  try {
    await lock(key).hold();
  } catch (e) {
    if (e instanceof LockUnavailableError) {
      const k: string = e.key;
      void k;
    }
    if (e instanceof LockStoreTimeoutError) {
      const unanswered: [string, number] = [e.operation, e.afterMs];
      void unanswered;
    }
  }
}

export async function kit(store: LockStore): Promise<PropertyResult[]> {
  void checkLockStore;
  return checkStore(store, { contenders: 10 });
}

// Semaphores and read-write locks.
{
  const api = semaphore("llm-api", 4, 60_000);
  const limit: number = api.limit;
  const [ran, answer] = await api.run(async ({ fence }) => fence ?? limit, { permits: 2, timeout: 1_000 });
  if (ran) answer satisfies number;
  const took: boolean = await api.acquire({ permits: 1 });
  await using held = await semaphore("llm-api", 4).hold({ permits: 2, timeout: 500 });
  held.limit satisfies number;
  const reader: Lock = readLock("doc");
  const writer: Lock = writeLock("doc");
  reader.limit satisfies number | null;
  await writer.run(() => took);
  const error = new LimitMismatchError("doc", 3, 4);
  error.heldLimit satisfies number;
  const store: LockStore = {
    acquire: () => false,
    release: () => true,
    extend: () => true,
    isLocked: () => false,
    remainingTime: () => null,
    acquireShared: (_key, _owner, _ttl, weight, limit) => (weight <= limit ? { fence: 1 } : { heldLimit: limit }),
  };
  setLockStore(store);
}

// Several keys at once.
{
  const both: MultiKeyLock = lock(["account:1", "account:2"], 10_000);
  const keys: readonly string[] = both.keys;
  const [ran, moved] = await both.run(async ({ fence, fences, signal }) => {
    fence satisfies null;
    signal.aborted satisfies boolean;
    return fences === null ? 0 : fences["account:1"] + keys.length;
  }, { timeout: 1_000, autoExtend: true });
  if (ran) moved satisfies number;
  await using held = await lock(["a", "b"]).hold({ timeout: 500 });
  const again = restoreLock<MultiKeyLock>(held.serialize());
  again.fences satisfies Readonly<Record<string, number>> | null;
  // @ts-expect-error a multi-key lock has no single key
  held.key;
}

// Lock events, and OpenTelemetry on top of them.
{
  const stop: () => void = onLockEvent((event: LockEvent) => {
    if (event.type === "granted") {
      event.via satisfies "immediate" | "hand-over" | "poll";
      event.waitedMs satisfies number;
      event.fence satisfies number | null;
    } else if (event.type === "run") {
      const before = event.runInside;
      event.runInside = (call) => (before ? before(call) : call());
    }
  });
  stop();
  const off: () => void = instrumentKeelLock({ key: (key) => key.split(":")[0] });
  off();
  // @ts-expect-error the key option is a boolean or a function
  instrumentKeelLock({ key: "no" });
}
