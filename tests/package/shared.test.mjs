// Semaphores and read-write locks from the installed package, on the memory store and on a JS
// store with shared holds: the limit under concurrent callers, permits, readers and writers,
// FIFO hand-over, per-permit expiry, limit mismatches and every bad input as a clear error.
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  lock,
  restoreLock,
  semaphore,
  readLock,
  writeLock,
  setLockStore,
  MemoryLockStore,
  LimitMismatchError,
} from "keel-lock";
import { mapLockStore, mapSharedStore } from "./stores.mjs";
import { sleep, stopwatch } from "./waits.mjs";

let n = 0;
const fresh = (name) => `${name}:${process.pid}:${++n}`;

/** Runs `callers` functions at once and tracks the weight inside: answers the peak. */
async function peakInside(callers) {
  let inside = 0;
  let peak = 0;
  await Promise.all(
    callers.map(async ({ handle, weight, options }) => {
      const [ran] = await handle.run(
        async () => {
          inside += weight;
          peak = Math.max(peak, inside);
          await sleep(5);
          inside -= weight;
        },
        { timeout: 5_000, retryDelay: 2, ...options },
      );
      assert.equal(ran, true);
    }),
  );
  return peak;
}

for (const [name, makeStore] of [
  ["memory store", () => new MemoryLockStore()],
  ["JS store", mapSharedStore],
]) {
  describe(`shared holds on the ${name}`, () => {
    it("never lets more than the limit in, and uses all of it", async () => {
      setLockStore(makeStore());
      const key = fresh("sem");
      const callers = Array.from({ length: 12 }, () => ({ handle: semaphore(key, 3), weight: 1 }));
      assert.equal(await peakInside(callers), 3);
    });

    it("counts permits: weighted callers stay within the limit", async () => {
      setLockStore(makeStore());
      const key = fresh("weighted");
      const callers = Array.from({ length: 9 }, (_, i) => {
        const permits = 1 + (i % 3);
        return { handle: semaphore(key, 4), weight: permits, options: { permits } };
      });
      const peak = await peakInside(callers);
      assert.ok(peak <= 4 && peak >= 3, `peak ${peak}`);
    });

    it("readers share; a writer excludes them and is excluded by them", async () => {
      setLockStore(makeStore());
      const key = fresh("doc");
      const [r1, r2, w] = [readLock(key), readLock(key), writeLock(key)];
      assert.equal(await r1.acquire(), true);
      assert.equal(await r2.acquire(), true);
      assert.equal(await w.acquire(), false);
      assert.equal(await lock(key).acquire(), false, "lock() is writeLock()");
      assert.equal(await r1.release(), true);
      assert.equal(await w.acquire(), false, "one reader is still in");
      assert.equal(await r2.release(), true);
      assert.equal(await w.acquire(), true);
      assert.equal(await readLock(key).acquire(), false);
      assert.equal(await w.release(), true);
    });

    it("gives every grant a higher fence, and a handle one hold at a time", async () => {
      setLockStore(makeStore());
      const key = fresh("fences");
      const a = semaphore(key, 2);
      const b = semaphore(key, 2);
      assert.equal(await a.acquire(), true);
      assert.equal(await b.acquire(), true);
      assert.ok(b.fence > a.fence);
      assert.equal(await a.acquire(), false, "a second hold on a handle that holds one");
      await a.extend(5_000);
      assert.equal(await a.release(), true);
      assert.equal(await a.release(), false);
      assert.equal(await b.release(), true);
    });

    it("frees a crashed holder's permit at its TTL and keeps the others", async () => {
      setLockStore(makeStore());
      const key = fresh("ttl");
      const crashed = semaphore(key, 2, 60);
      const alive = semaphore(key, 2, 10_000);
      const clock = stopwatch();
      assert.equal(await crashed.acquire(), true);
      assert.equal(await alive.acquire(), true);
      // Both permits are taken while the crashed one's TTL lasts.
      const third = semaphore(key, 2);
      if (await third.acquire()) {
        assert.ok(clock.past(60), "a third permit of 2 inside the first one's TTL");
        await third.release();
      }
      await sleep(80);
      assert.equal(await crashed.isExpired(), true);
      await assert.rejects(crashed.extend(), { name: "LockNotHeldError" });
      const late = semaphore(key, 2);
      assert.equal(await late.acquire(), true, "the expired permit is free again");
      assert.ok((await alive.getRemainingTime()) > 5_000, "until the last permit expires");
      await late.release();
      await alive.release();
    });

    it("hands a permit to another process with serialize()/restoreLock(), kind and all", async () => {
      setLockStore(makeStore());
      const key = fresh("restore");
      const held = semaphore(key, 3);
      assert.equal(await held.acquire({ permits: 2 }), true);
      const text = held.serialize();
      assert.match(text, /^keel-lock:4:/);
      const restored = restoreLock(text);
      assert.equal(restored.limit, 3);
      assert.equal(restored.fence, held.fence);
      await restored.extend(10_000);
      assert.equal(await semaphore(key, 3).acquire({ permits: 2 }), false, "its two permits stay taken");
      assert.equal(await restored.release(), true);
      assert.equal(await restored.acquire({ permits: 3 }), true, "it acquires again as a semaphore");
      assert.equal(await restored.release(), true);
      assert.match((await lock(fresh("plain")).hold()).serialize(), /^keel-lock:3:/, "a lock's is still version 3");
      const reader = readLock(key);
      await reader.acquire();
      assert.equal(restoreLock(reader.serialize()).limit, 2 ** 32 - 1);
      await reader.release();
    });

    it("refuses two limits on one key with LimitMismatchError", async () => {
      setLockStore(makeStore());
      const key = fresh("mismatch");
      const three = semaphore(key, 3);
      assert.equal(await three.acquire(), true);
      const error = await semaphore(key, 4)
        .acquire({ timeout: 100 })
        .then(() => null, (e) => e);
      assert.ok(error instanceof LimitMismatchError, String(error));
      assert.equal(error.key, key);
      assert.equal(error.heldLimit, 3);
      assert.equal(error.limit, 4);
      await assert.rejects(readLock(key).run(() => {}), LimitMismatchError);
      await three.release();
      assert.equal(await semaphore(key, 4).acquire(), true, "fine once the key is free");
    });
  });
}

describe("shared holds: FIFO hand-over on the memory store", () => {
  it("does not let later readers pass a queued writer; one release lets both readers in", async () => {
    setLockStore(new MemoryLockStore());
    const key = fresh("fifo");
    const order = [];
    const reader = readLock(key);
    assert.equal(await reader.acquire(), true);
    const writer = writeLock(key).run(async () => {
      order.push("writer");
      await sleep(20);
      order.push("writer out");
    }, { timeout: 5_000 });
    await sleep(5);
    const later = [1, 2].map((i) =>
      readLock(key).run(() => order.push(`reader ${i}`), { timeout: 5_000 }),
    );
    await sleep(10);
    assert.deepEqual(order, [], "a reader went in beside the holding reader, past the writer");
    await reader.release();
    await Promise.all([writer, ...later]);
    assert.deepEqual(order, ["writer", "writer out", "reader 1", "reader 2"]);
  });

  it("does not starve a waiter asking for several permits", async () => {
    setLockStore(new MemoryLockStore());
    const key = fresh("heavy");
    const singles = [semaphore(key, 3), semaphore(key, 3)];
    for (const s of singles) assert.equal(await s.acquire(), true);
    const order = [];
    const heavy = semaphore(key, 3).run(() => order.push("heavy"), { permits: 3, timeout: 5_000 });
    await sleep(5);
    const light = semaphore(key, 3).run(() => order.push("light"), { timeout: 5_000 });
    await sleep(10);
    assert.deepEqual(order, [], "the light waiter passed the heavy one");
    for (const s of singles) await s.release();
    await Promise.all([heavy, light]);
    assert.deepEqual(order, ["heavy", "light"]);
  });
});

describe("shared holds: the permits each run asks for", () => {
  // How many of the key's 3 permits one more caller can take now.
  const freePermits = async (key) => {
    for (let n = 3; n >= 1; n--) {
      const s = semaphore(key, 3);
      if (await s.acquire({ permits: n })) {
        await s.release();
        return n;
      }
    }
    return 0;
  };

  it("are taken by a handle on the slot another handle let go of after other permits", async () => {
    setLockStore(new MemoryLockStore());
    const key = fresh("reused");
    assert.deepEqual(await semaphore(key, 3).run(() => 0, { permits: 2 }), [true, 0]);
    assert.deepEqual(await semaphore(key, 3).run(() => freePermits(key)), [true, 2]);
    assert.deepEqual(await semaphore(key, 3).run(() => freePermits(key), { permits: 2 }), [true, 1]);
    assert.deepEqual(await semaphore(key, 3).run(() => freePermits(key), { permits: 2 }), [true, 1]);
    assert.deepEqual(await semaphore(key, 3).run(() => freePermits(key)), [true, 2]);
  });

  it("are taken by a handle whose twin asked for others meanwhile", async () => {
    setLockStore(new MemoryLockStore());
    const key = fresh("twin");
    const h = semaphore(key, 3);
    // A run inside the handle's own run goes to a twin on the same core lock: refused (the
    // handle holds), after telling it two permits.
    const [, inner] = await h.run(() => h.run(() => "twin", { permits: 2 }));
    assert.deepEqual(inner, [false, undefined]);
    assert.deepEqual(await h.run(() => freePermits(key)), [true, 2]);
    assert.deepEqual(await h.run(() => freePermits(key), { permits: 2 }), [true, 1]);
  });
});

describe("shared holds: bad input is a clear error", () => {
  it("checks limits and permits", async () => {
    setLockStore(new MemoryLockStore());
    for (const bad of [0, -1, 1.5, NaN, Infinity, 2 ** 32]) {
      assert.throws(() => semaphore("k", bad), RangeError, String(bad));
    }
    for (const bad of ["2", null, undefined, {}]) {
      assert.throws(() => semaphore("k", bad), TypeError, String(bad));
    }
    assert.throws(() => semaphore("", 2), RangeError);
    assert.throws(() => semaphore("k", 2, 0), RangeError);
    const s = semaphore(fresh("bad"), 3);
    for (const bad of [0, 4, 1.5, -1, NaN]) {
      await assert.rejects(s.run(() => {}, { permits: bad }), RangeError, String(bad));
    }
    await assert.rejects(s.acquire({ permits: "2" }), TypeError);
    await assert.rejects(lock("k").run(() => {}, { permits: 2 }), TypeError);
    assert.equal(await s.acquire({ permits: 3 }), true, "the handle still works");
    assert.equal(s.limit, 3);
    assert.equal(lock("k").limit, null);
    assert.equal(readLock("k").limit, 2 ** 32 - 1);
  });

  it("refuses shared holds on a JS store without acquireShared, at first use", async () => {
    setLockStore(mapLockStore());
    const s = semaphore(fresh("nostore"), 2);
    await assert.rejects(s.acquire(), (e) => e instanceof TypeError && /acquireShared/.test(e.message));
    await assert.rejects(readLock("k").run(() => {}), TypeError);
    assert.equal(await lock(fresh("plain")).acquire(), true, "locks still work on it");
  });

  it("judges a JS store's shared answers", async () => {
    const store = mapSharedStore();
    store.acquireShared = async () => ({ heldLimit: "three" });
    setLockStore(store);
    await assert.rejects(semaphore(fresh("broken"), 2).acquire(), /acquireShared\(\) must answer/);
  });
});
