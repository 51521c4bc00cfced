// A `Lock` is a plain JS object whose hold lives in the wasm while it is in use: these tests use
// one handle in every way the API allows at once — the handle's other methods from inside its own
// run, two runs of one handle in flight, a run whose hold was lost, a queue of waiters — once per
// store (the memory store answers inside the wasm; a JS store's promises are awaited in JS).
import { describe, it, beforeEach } from "node:test";
import { createRequire } from "node:module";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import assert from "node:assert/strict";
import {
  lock,
  restoreLock,
  setLockStore,
  MemoryLockStore,
  Lock,
  LockNotHeldError,
  LockStoreTimeoutError,
} from "keel-lock";
import { STORES } from "./stores.mjs";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let n = 0;
const fresh = () => `handles:${process.pid}:${++n}`;

for (const [storeName, makeStore] of Object.entries(STORES)) {
  describe(`lock handles on the ${storeName} store`, () => {
    beforeEach(() => setLockStore(makeStore()));

    it("lock() and restoreLock() answer Lock objects, which only they make", async () => {
      const l = lock(fresh());
      assert.ok(l instanceof Lock);
      assert.throws(() => new Lock(), TypeError);
      assert.equal(await l.acquire(), true);
      const restored = restoreLock(l.serialize());
      assert.ok(restored instanceof Lock);
      assert.equal(restored.key, l.key);
      assert.equal(await restored.release(), true);
    });

    it("inside its own run, the handle extends, serializes, reports its fence and releases", async () => {
      const key = fresh();
      const l = lock(key, 5_000);
      const [ran, seen] = await l.run(async (ctx) => {
        await l.extend(60_000);
        const remaining = await l.getRemainingTime();
        const serialized = l.serialize();
        const fence = l.fence;
        const expired = await l.isExpired();
        const released = await l.release();
        return { remaining, serialized, fence, ctxFence: ctx.fence, expired, released };
      });
      assert.equal(ran, true);
      assert.ok(seen.remaining > 10_000, `remaining ${seen.remaining}: the extend did not take`);
      assert.equal(typeof seen.serialized, "string");
      assert.equal(seen.fence, seen.ctxFence);
      assert.equal(seen.expired, false);
      assert.equal(seen.released, true);
      // The run's own release then finds nothing to free, and the key is free.
      assert.equal(await lock(key).isLocked(), false);
      assert.equal(await lock(key).acquire(), true);
    });

    it("acquire() and hold() started while the handle runs: the handle holds the key afterwards", async () => {
      const key = fresh();
      const l = lock(key, 10_000);
      const running = l.run(() => sleep(30), { timeout: 30_000 });
      assert.equal(await l.acquire({ timeout: 30_000 }), true);
      assert.deepEqual(await running, [true, undefined]);
      assert.equal(await l.isExpired(), false);
      assert.equal(typeof l.serialize(), "string", "the handle holds: it serializes");
      await l.extend();
      assert.equal(await lock(key).acquire(), false, "nobody else gets in");
      assert.equal(await l.release(), true);
      assert.equal(await lock(key).isLocked(), false, "and it let go when released");
      // The same with hold(), while the run is still inside fn.
      const again = l.run(() => sleep(30), { timeout: 30_000 });
      const held = await l.hold({ timeout: 30_000 });
      assert.equal(held, l);
      await again;
      assert.equal(await l.release(), true);
      assert.equal(await lock(key).isLocked(), false);
    });

    it("two runs of one handle in flight: both run, one after the other", async () => {
      const l = lock(fresh());
      let inside = 0;
      let most = 0;
      const section = async (v) => {
        most = Math.max(most, ++inside);
        await sleep(20);
        inside--;
        return v;
      };
      const out = await Promise.all([
        l.run(() => section("a"), { timeout: 30_000 }),
        l.run(() => section("b"), { timeout: 30_000 }),
        l.run(() => section("c"), { timeout: 30_000 }),
      ]);
      assert.deepEqual(out, [[true, "a"], [true, "b"], [true, "c"]]);
      assert.equal(most, 1);
      assert.equal(await l.isLocked(), false);
    });

    it("a run whose hold expired and was taken: resolves, leaves the new holder alone, and the handle knows", async () => {
      const key = fresh();
      const l = lock(key, 40);
      const other = lock(key, 10_000);
      const [ran] = await l.run(async (ctx) => {
        const signal = ctx.signal;
        await sleep(80);
        assert.equal(await other.acquire(), true);
        assert.equal(signal.aborted, true);
        assert.ok(signal.reason instanceof LockNotHeldError);
      });
      assert.equal(ran, true);
      assert.equal(await l.isExpired(), true);
      assert.equal(await other.isLocked(), true);
      assert.equal(await other.release(), true);
    });

    it("the next handle on a key reuses the last idle slot only when nothing else held on to it", async () => {
      const key = fresh();
      assert.deepEqual(await lock(key).run(() => 1), [true, 1]);
      // This run's context watches its hold (its signal was read) ...
      assert.deepEqual(await lock(key).run((ctx) => (ctx.signal.aborted ? 0 : 2)), [true, 2]);
      for (let i = 0; i < 3; i++) assert.deepEqual(await lock(key).run(() => i), [true, i]);
      // ... and this one's handle went on to the full API while it held the key.
      const l = lock(key);
      assert.deepEqual(await l.run(async () => ((await l.getRemainingTime()) > 0 ? 3 : 0)), [true, 3]);
      for (let i = 0; i < 3; i++) assert.deepEqual(await lock(key).run(() => i), [true, i]);
      assert.deepEqual(await l.run(() => 4), [true, 4]);
      assert.equal(await lock(key).isLocked(), false);
    });

    it("a handle that finished its runs can run again, and a reused handle gets a new fence each time", async () => {
      const l = lock(fresh());
      const fences = [];
      for (let i = 0; i < 5; i++) {
        const [ran, fence] = await l.run((ctx) => ctx.fence);
        assert.equal(ran, true);
        fences.push(fence);
      }
      if (fences[0] !== null) {
        for (let i = 1; i < fences.length; i++) assert.ok(fences[i] > fences[i - 1], String(fences));
      }
      assert.equal(l.fence, null);
      assert.equal(await l.isExpired(), false);
    });

    it("waiters arriving in order run in order; one whose timeout passes leaves with [false, undefined]", async () => {
      const key = fresh();
      const order = [];
      let letGo;
      const holder = lock(key).run(() => new Promise((resolve) => (letGo = resolve)));
      await sleep(5);
      const waiters = [];
      for (let i = 0; i < 6; i++) {
        waiters.push(lock(key).run(() => order.push(i), { timeout: 5_000, retryDelay: 5 }));
        await sleep(2);
      }
      const impatient = lock(key).run(() => order.push("impatient"), { timeout: 10, retryDelay: 5 });
      assert.deepEqual(await impatient, [false, undefined]);
      letGo();
      await holder;
      await Promise.all(waiters);
      if (storeName === "memory") assert.deepEqual(order, [0, 1, 2, 3, 4, 5]);
      else assert.deepEqual([...order].sort(), [0, 1, 2, 3, 4, 5]);
      assert.equal(await lock(key).isLocked(), false);
    });
  });
}

describe("stores the JS layer awaits itself", () => {
  it("answers outside the contract are TypeErrors naming the method, and leave nothing held", async () => {
    const memory = new MemoryLockStore();
    for (const [answer, method] of [
      [{ fence: 1.5 }, "acquire"],
      [{ fence: "1" }, "acquire"],
      ["yes", "acquire"],
      [1, "release"],
    ]) {
      setLockStore({
        acquire: (k, o, t) =>
          Promise.resolve(method === "acquire" ? answer : memory.acquire(k, o, t)),
        release: (k, o) => Promise.resolve(method === "release" ? answer : memory.release(k, o)),
        extend: (k, o, t) => memory.extend(k, o, t),
        isLocked: (k) => memory.isLocked(k),
        remainingTime: (k) => memory.remainingTime(k),
      });
      const key = fresh();
      await assert.rejects(
        lock(key).run(() => 1),
        (e) => e instanceof TypeError && e.message.includes(`${method}()`),
        JSON.stringify(answer),
      );
      // A broken release leaves the grant to expire; a refused grant never took the key.
      if (method === "acquire") assert.equal(memory.isLocked(key), false);
    }
  });

  it("a thenable that calls back more than once is taken at its first answer", async () => {
    const memory = new MemoryLockStore();
    const twice = (first, second) => ({
      then(resolve, reject) {
        first(resolve, reject);
        second(resolve, reject);
      },
    });
    setLockStore({
      acquire: (k, o, t) => {
        const grant = memory.acquire(k, o, t);
        return twice((resolve) => resolve(grant), (resolve) => resolve(false));
      },
      release: (k, o) => {
        const released = memory.release(k, o);
        return twice((resolve) => resolve(released), (_, reject) => reject(new Error("late")));
      },
      extend: (k, o, t) => memory.extend(k, o, t),
      isLocked: (k) => memory.isLocked(k),
      remainingTime: (k) => memory.remainingTime(k),
    });
    const key = fresh();
    assert.deepEqual(await lock(key).run(() => "ran"), [true, "ran"]);
    assert.equal(memory.isLocked(key), false);
  });

  it("a store whose acquire answers synchronously works as well as one answering promises", async () => {
    const memory = new MemoryLockStore();
    setLockStore({
      acquire: (k, o, t) => memory.acquire(k, o, t),
      release: (k, o) => memory.release(k, o),
      extend: (k, o, t) => memory.extend(k, o, t),
      isLocked: (k) => memory.isLocked(k),
      remainingTime: (k) => memory.remainingTime(k),
    });
    const key = fresh();
    const [ran, fence] = await lock(key).run((ctx) => ctx.fence);
    assert.equal(ran, true);
    assert.ok(fence >= 1);
    assert.deepEqual(await lock(key).run(() => 2), [true, 2]);
    assert.equal(memory.isLocked(key), false);
  });
});

describe("what the JS layer keeps between calls into the wasm", () => {
  const require = createRequire(import.meta.url);
  const glue = require("./node_modules/keel-lock/dist/node/keel_lock.js");

  /** A JS store over a MemoryLockStore that records every call it gets. */
  function recordingStore(onAcquire = () => {}) {
    const memory = new MemoryLockStore();
    const calls = [];
    return {
      calls,
      acquire(k, o, t) {
        calls.push(["acquire", k, o, t]);
        onAcquire();
        return Promise.resolve(memory.acquire(k, o, t));
      },
      release(k, o) {
        calls.push(["release", k, o]);
        return Promise.resolve(memory.release(k, o));
      },
      extend: (k, o, t) => memory.extend(k, o, t),
      isLocked: (k) => memory.isLocked(k),
      remainingTime: (k) => memory.remainingTime(k),
    };
  }

  /** A recording store whose acquire first makes the wasm memory grow. */
  function growingStore() {
    const [memory] = glue.__kOut();
    const before = memory.buffer.byteLength;
    const big = new MemoryLockStore();
    let n = 0;
    const store = recordingStore(() => {
      // Rows in another store of the same wasm instance, until its memory has grown.
      for (let i = 0; i < 200_000 && memory.buffer.byteLength === before; i++) {
        big.acquire(`grow:${++n}`, "someone", 60_000);
      }
    });
    store.grew = () => memory.buffer.byteLength > before;
    return store;
  }

  it("a run's owner token and bounds, read from wasm memory, survive that memory growing mid-run", async () => {
    const store = growingStore();
    setLockStore(store);
    const key = fresh();
    assert.deepEqual(await lock(key).run(() => "ran"), [true, "ran"]);
    assert.ok(store.grew(), "the test must make the wasm memory grow");
    const [acquired, released] = store.calls;
    assert.equal(acquired[0], "acquire");
    assert.match(acquired[2], /^[0-9a-f]{32}$/);
    assert.deepEqual(released, ["release", key, acquired[2]]);
    // And the next run, with views of the grown memory, too.
    assert.deepEqual(await lock(key).run(() => 2), [true, 2]);
    assert.notEqual(store.calls[2][2], acquired[2]);
    assert.equal(store.calls[3][2], store.calls[2][2]);
  });

  it("a release's bound, read after the wasm memory grew, still ends a release that never answers", { timeout: 10_000 }, async () => {
    const store = growingStore();
    store.release = () => new Promise(() => {});
    setLockStore(store);
    const l = lock(fresh(), 100);
    assert.equal(await l.acquire(), true);
    assert.ok(store.grew(), "the test must make the wasm memory grow");
    await assert.rejects(
      l.release(),
      (e) => e instanceof LockStoreTimeoutError && e.operation === "release" && e.afterMs === 100,
    );
  });

  it("store calls that never answer end at their own bounds, earliest first; answered calls' bounds never fire", { timeout: 10_000 }, async () => {
    setLockStore({
      acquire: (key) => (key.endsWith(":late") ? new Promise((r) => setTimeout(() => r({ fence: 1 }), 20)) : new Promise(() => {})),
      release: () => new Promise((r) => setTimeout(() => r(true), 1)),
      extend: async () => false,
      isLocked: async () => false,
      remainingTime: async () => null,
    });
    const key = fresh();
    const ended = [];
    const runs = [120, 40, 80, 40].map((ttl, i) =>
      lock(`${key}:${i}`, ttl).run(() => "ran").then(
        (value) => ended.push(["ran", value]),
        (e) => ended.push([e instanceof LockStoreTimeoutError && e.operation === "acquire" ? "bound" : "other", e.afterMs ?? e]),
      ),
    );
    const late = lock(`${key}:late`, 60).run(() => "late");
    await Promise.all(runs);
    assert.deepEqual(ended, [["bound", 40], ["bound", 40], ["bound", 80], ["bound", 120]]);
    assert.deepEqual(await late, [true, "late"]);
  });

  it("bounds of many different lengths, started and cancelled in turn, all end with their calls", async () => {
    // Each TTL is the bound of its store calls, which answer a moment later (after a timer of
    // their own), so every call starts a bound and cancels it.
    setLockStore({
      acquire: () => new Promise((r) => setTimeout(() => r({ fence: 1 }), 0)),
      release: () => new Promise((r) => setTimeout(() => r(true), 0)),
      extend: async () => false,
      isLocked: async () => false,
      remainingTime: async () => null,
    });
    const key = fresh();
    for (let round = 0; round < 3; round++) {
      const runs = Array.from({ length: 40 }, (_, i) => lock(`${key}:${i}`, 1_000 + i).run(() => i));
      assert.deepEqual(await Promise.all(runs), Array.from({ length: 40 }, (_, i) => [true, i]));
    }
  });

  it("lock() remembers the keys the core accepted, never a TTL it refused or a key it did not see", async () => {
    setLockStore(new MemoryLockStore());
    const key = fresh();
    assert.equal(lock(key, 1_000).ttlMs, 1_000);
    assert.throws(() => lock(key, -5), RangeError);
    assert.throws(() => lock(key, 2 ** 31), RangeError);
    assert.equal(lock(key).ttlMs, 30_000);
    assert.equal(lock(key, 1_000.5).ttlMs, 1_001);
    // More keys than are remembered: the earliest is checked again, and still accepted.
    for (let i = 0; i < 5_000; i++) lock(`${key}:${i}`, 1_000);
    assert.deepEqual(await lock(key, 1_000).run(() => 1), [true, 1]);
    for (let i = 0; i < 3; i++) {
      assert.throws(() => lock("", 1_000), RangeError);
      assert.throws(() => lock("x".repeat(100_000), 1_000), RangeError);
    }
  });

  it("lock() refuses keys with a lone surrogate, and keeps a real U+FFFD key apart from them", async () => {
    setLockStore(new MemoryLockStore());
    const key = fresh();
    // On the way into the wasm a lone surrogate becomes U+FFFD: two such keys would be one lock.
    for (const lone of ["\uD800", "\uDBFF", "\uDC00"]) {
      assert.throws(() => lock(`${key}${lone}`), RangeError, JSON.stringify(lone));
    }
    const replacement = lock(`${key}\uFFFD`);
    assert.equal(replacement.key, `${key}\uFFFD`);
    assert.equal(await replacement.acquire(), true);
    assert.equal(await lock(`${key}\uFFFD`).isLocked(), true);
    assert.deepEqual(await lock(`${key}\uFFFD`).run(() => 1), [false, undefined]);
    assert.equal(await replacement.release(), true);
    assert.deepEqual(await lock(`${key}\uFFFD`).run(() => 2), [true, 2]);
  });

  it("a new handle on the same key reuses nothing of a handle bound to another store or TTL", async () => {
    const first = recordingStore();
    setLockStore(first);
    const key = fresh();
    assert.deepEqual(await lock(key, 1_000).run(() => 1), [true, 1]);
    const second = recordingStore();
    setLockStore(second);
    assert.deepEqual(await lock(key, 1_000).run(() => 2), [true, 2]);
    assert.deepEqual(await lock(key, 2_000).run(() => 3), [true, 3]);
    assert.deepEqual(
      first.calls.map((c) => c[0]),
      ["acquire", "release"],
    );
    assert.deepEqual(
      second.calls.filter((c) => c[0] === "acquire").map((c) => [c[1], c[3]]),
      [
        [key, 1_000],
        [key, 2_000],
      ],
    );
  });
});

// The wasm keeps a slot for a handle only while it is in use; a dropped handle whose slot
// outlived its last operation (a hold it knows lost) frees it when collected. Counted through the
// installed package's wasm module (the same instance the entry loaded).
describe("slots: a handle's core lock lives in the wasm only while it is used", () => {
  const require = createRequire(import.meta.url);
  const glue = require("./node_modules/keel-lock/dist/node/keel_lock.js");
  setFlagsFromString("--expose-gc");
  const gc = runInNewContext("gc");
  const collect = async () => {
    for (let i = 0; i < 5; i++) {
      gc();
      await sleep(20);
    }
  };

  for (const [storeName, makeStore] of Object.entries(STORES)) {
    it(`runs that finish — held, refused, thrown, timed out in a queue — leave none open (${storeName})`, async () => {
      setLockStore(makeStore());
      await collect(); // handles earlier tests dropped, their slots with them
      const before = glue.__kSlotsOpen();
      const key = fresh();
      for (let i = 0; i < 500; i++) await lock(key).run(() => i);
      const holder = lock(key);
      await holder.acquire();
      for (let i = 0; i < 50; i++) assert.deepEqual(await lock(key).run(() => 1), [false, undefined]);
      for (let i = 0; i < 5; i++) {
        assert.deepEqual(await lock(key).run(() => 1, { timeout: 5, retryDelay: 1 }), [false, undefined]);
      }
      await holder.release();
      for (let i = 0; i < 50; i++) {
        await assert.rejects(lock(key).run(() => {
          throw new Error("boom");
        }));
      }
      await Promise.all(Array.from({ length: 20 }, () => lock(key).run(() => sleep(1), { timeout: 5_000 })));
      assert.equal(glue.__kSlotsOpen(), before);
    });

    it(`operations started on a busy handle leave no slot behind (${storeName})`, async () => {
      setLockStore(makeStore());
      await collect();
      const before = glue.__kSlotsOpen();
      const key = fresh();
      const l = lock(key);
      await l.run(async () => {
        // Refused (its own handle holds the key), without waiting.
        for (let i = 0; i < 100; i++) assert.deepEqual(await l.runImmediately(() => 1), [false, undefined]);
        // Waiting, then aborted.
        const controller = new AbortController();
        const waiting = l.run(() => 1, { timeout: 5_000, signal: controller.signal });
        await sleep(10);
        controller.abort(new Error("stop"));
        await assert.rejects(waiting, /stop/);
      });
      assert.equal(glue.__kSlotsOpen(), before, "without waiting for the garbage collector");
    });
  }

  it("a dropped handle that knows its hold was lost frees its slot when collected", async () => {
    setLockStore(new MemoryLockStore());
    await collect();
    const before = glue.__kSlotsOpen();
    for (let i = 0; i < 10; i++) {
      const key = fresh();
      // The TTL passes during fn and someone else takes the key: the run's release is refused.
      await lock(key, 5).run(async () => {
        await sleep(15);
        await lock(key).acquire();
      });
    }
    await collect();
    assert.equal(glue.__kSlotsOpen(), before);
  });

  it("a store call that never answers does not keep the bounds of the calls after it", async () => {
    // Every store call below is bounded by the same TTL, so their bounds queue behind the one that
    // never answers; each is cancelled when its call answers and must not stay in memory.
    const rows = new Map();
    const later = (value) => new Promise((resolve) => setImmediate(() => resolve(value)));
    let unstick;
    setLockStore({
      acquire(key, owner) {
        if (key.endsWith(":stuck")) return new Promise((resolve) => (unstick = resolve));
        if (rows.has(key)) return later(false);
        rows.set(key, owner);
        return later({ fence: 1 });
      },
      release(key, owner) {
        const ok = rows.get(key) === owner;
        if (ok) rows.delete(key);
        return later(ok);
      },
      extend: () => later(false),
      isLocked: (key) => later(rows.has(key)),
      remainingTime: () => later(null),
    });
    const key = `slots:${process.pid}:bounds`;
    const ttl = 600_000;
    const stuck = lock(`${key}:stuck`, ttl).run(() => {});
    await collect();
    const before = process.memoryUsage().heapUsed;
    for (let i = 0; i < 60_000; i++) await lock(`${key}:${i % 100}`, ttl).run(() => i);
    await collect();
    const grown = process.memoryUsage().heapUsed - before;
    // Kept, they would be ≈ 170 bytes a run(): ≈ 10 MB here.
    assert.ok(grown < 4e6, `the heap grew by ${(grown / 1e6).toFixed(1)} MB`);
    unstick(false);
    assert.deepEqual(await stuck, [false, undefined]);
  });
});

describe("the spare slot", () => {
  it("a handle started in the turn a JS store's release() was answered never takes a slot the core closed", async () => {
    // A release that spares the releasing handle's slot closes the spare before it; a run on
    // that older spare's key, started right then, must open a slot of its own.
    const rows = new Map();
    setLockStore({
      acquire: (key, owner) => !rows.has(key) && (rows.set(key, owner), true),
      release: (key, owner) => rows.get(key) === owner && rows.delete(key),
      extend: (key, owner) => rows.get(key) === owner,
      isLocked: (key) => rows.has(key),
      remainingTime: (key) => (rows.has(key) ? 30_000 : null),
    });
    assert.deepEqual(await lock("spare:a").run(() => 1), [true, 1]); // its slot is left as the spare
    const b = lock("spare:b");
    assert.equal(await b.acquire(), true);
    const releasing = b.release();
    let started;
    // Queued behind the release's continuation, ahead of anything its promise runs next.
    queueMicrotask(() => (started = lock("spare:a").run(() => "ran")));
    assert.equal(await releasing, true);
    assert.deepEqual(await started, [true, "ran"]);
    assert.equal(rows.size, 0);
  });
});
