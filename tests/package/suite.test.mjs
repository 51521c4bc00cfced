// The lock API's behaviour, over the installed package (`npm install keel-lock-*.tgz`),
// once per store: the built-in MemoryLockStore and a store written in JS.
import { describe, it, beforeEach } from "node:test";
import assert from "node:assert/strict";
import {
  lock,
  restoreLock,
  setLockStore,
  getLockStore,
  MemoryLockStore,
  LockNotHeldError,
  LockStoreTimeoutError,
} from "keel-lock";
import { STORES, recording, mapLockStore } from "./stores.mjs";
import { sleep, stopwatch, until } from "./waits.mjs";

let n = 0;
const fresh = (name = "k") => `${name}:${process.pid}:${++n}`;

for (const [storeName, makeStore] of Object.entries(STORES)) {
  describe(`lock API on the ${storeName} store`, () => {
    beforeEach(() => setLockStore(makeStore()));

    describe("lock(key, ttlMs)", () => {
      it("defaults the TTL to 30 000 ms, and the store is told so", async () => {
        const rec = recording(getLockStore());
        setLockStore(rec.store);
        const l = lock(fresh());
        assert.equal(l.ttlMs, 30_000);
        assert.equal(await l.acquire(), true);
        assert.equal(rec.calls.find((c) => c.name === "acquire").args[2], 30_000);
        const left = await l.getRemainingTime();
        assert.ok(left > 25_000 && left <= 30_000, `remaining ${left}`);
        await l.release();
      });

      it("takes an explicit TTL", async () => {
        const l = lock(fresh(), 300_000);
        assert.equal(l.ttlMs, 300_000);
        await l.acquire();
        assert.ok((await l.getRemainingTime()) > 30_000);
        await l.release();
      });

      it("always expires: a held lock is free after its TTL", async () => {
        const key = fresh();
        const clock = stopwatch();
        assert.equal(await lock(key, 40).acquire(), true);
        const held = await lock(key).isLocked();
        assert.ok(held || clock.past(40), "free inside its TTL");
        await sleep(90);
        assert.equal(await lock(key).isLocked(), false);
        assert.equal(await lock(key).acquire(), true);
      });
    });

    describe("run(fn, options)", () => {
      it("acquires, runs sync and async functions, releases, and resolves [true, result]", async () => {
        const key = fresh();
        assert.deepEqual(await lock(key).run(() => 42), [true, 42]);
        assert.deepEqual(await lock(key).run(async () => { await sleep(1); return "async"; }), [true, "async"]);
        assert.equal(await lock(key).isLocked(), false);
      });

      it("resolves [false, undefined] and never calls fn when the lock is held elsewhere", async () => {
        const key = fresh();
        const holder = lock(key);
        await holder.acquire();
        let called = false;
        assert.deepEqual(await lock(key).run(() => { called = true; }), [false, undefined]);
        assert.equal(called, false);
        assert.equal(await holder.release(), true);
      });

      it("releases when fn throws, and the error propagates as the same object", async () => {
        const key = fresh();
        const boom = new Error("boom");
        await assert.rejects(lock(key).run(() => { throw boom; }), (e) => e === boom);
        assert.equal(await lock(key).isLocked(), false);
        const rejected = { not: "an Error" };
        await assert.rejects(lock(key).run(async () => { await sleep(1); throw rejected; }), (e) => e === rejected);
        assert.equal(await lock(key).isLocked(), false);
      });

      it("waits up to timeout, retrying, when given one", async () => {
        const key = fresh();
        const holder = lock(key);
        await holder.acquire();
        setTimeout(() => holder.release(), 120);
        const [ran, v] = await lock(key).run(() => "waited", { timeout: 30_000, retryDelay: 10 });
        assert.deepEqual([ran, v], [true, "waited"]);
      });

      it("gives up with [false, undefined] when the timeout is spent", async () => {
        const key = fresh();
        await lock(key).acquire();
        let called = false;
        const res = await lock(key).run(() => { called = true; }, { timeout: 120, retryDelay: 20 });
        assert.deepEqual(res, [false, undefined]);
        assert.equal(called, false);
      });

      it("retries every retryDelay (default 50 ms) while waiting", async () => {
        const key = fresh();
        const holder = lock(key);
        await holder.acquire();
        // A store of the five methods only (no queue of its own): the lock polls it.
        const { store } = recording(getLockStore());
        const sentAt = [];
        setLockStore({ ...store, acquire: (...args) => (sentAt.push(performance.now()), store.acquire(...args)) });
        const waiting = lock(key).run(() => "ran", { timeout: 60_000 });
        await until(() => sentAt.length >= 5, "five attempts");
        await holder.release();
        assert.deepEqual(await waiting, [true, "ran"]);
        // Four pauses between the first five attempts: 4 × 50 ms at least, less a little for a
        // timer firing early or a coarse clock (a late timer only widens the gaps). A shorter
        // default (40 ms: 160) falls below.
        const spread = sentAt[4] - sentAt[0];
        assert.ok(spread >= 4 * 45, `5 attempts within ${spread} ms`);
      });

      it("runImmediately() never waits", async () => {
        const key = fresh();
        await lock(key).acquire();
        const rec = recording(getLockStore());
        setLockStore(rec.store);
        assert.deepEqual(await lock(key).runImmediately(() => 1), [false, undefined]);
        assert.equal(rec.calls.filter((c) => c.name === "acquire").length, 1);
        assert.deepEqual(await lock(fresh()).runImmediately(() => 2), [true, 2]);
      });

      it("lets fn extend its own lock (the documented batch pattern)", async () => {
        const ttl = 1_500;
        const l = lock(fresh(), ttl);
        const [ran] = await l.run(async () => {
          // Granted by now: without the extends the key is free within the TTL from here. A batch
          // every 100 ms, each followed by an extend, until an extend is sent past that TTL.
          const granted = performance.now();
          let sent;
          do {
            await sleep(100);
            sent = performance.now();
            await l.extend();
          } while (sent - granted < ttl + 50);
          assert.equal(await l.isExpired(), false);
        });
        assert.equal(ran, true);
        assert.equal(await l.isLocked(), false);
      });

      it("100 concurrent run() calls on one key: exactly one runs", async () => {
        const key = fresh();
        let ran = 0;
        const results = await Promise.all(
          Array.from({ length: 100 }, () => lock(key).run(async () => { ran++; await sleep(20); })),
        );
        assert.equal(results.filter(([r]) => r).length, 1);
        assert.equal(ran, 1);
      });

      it("20 waiters with timeouts: all run, never two at once", async () => {
        const key = fresh();
        let inside = 0;
        let maxInside = 0;
        let done = 0;
        const results = await Promise.all(
          Array.from({ length: 20 }, () =>
            lock(key).run(async () => {
              maxInside = Math.max(maxInside, ++inside);
              await sleep(3);
              inside--;
              done++;
            }, { timeout: 20_000, retryDelay: 2 }),
          ),
        );
        assert.equal(results.every(([r]) => r), true);
        assert.equal(done, 20);
        assert.equal(maxInside, 1);
      });
    });

    describe("ownership", () => {
      it("mints a fresh random 128-bit owner token for every acquisition", async () => {
        const rec = recording(getLockStore());
        setLockStore(rec.store);
        for (let i = 0; i < 200; i++) await lock(fresh()).run(() => {});
        const owners = rec.calls.filter((c) => c.name === "acquire").map((c) => c.args[1]);
        assert.equal(new Set(owners).size, 200);
        for (const o of owners) assert.match(o, /^[0-9a-f]{32}$/);
      });

      it("an expired holder's release() is false and the new holder keeps the lock", async () => {
        const key = fresh();
        const a = lock(key, 40);
        assert.equal(await a.acquire(), true);
        await sleep(90);
        const b = lock(key);
        assert.equal(await b.acquire(), true);
        assert.equal(await a.release(), false);
        assert.equal(await b.isLocked(), true);
        await assert.rejects(a.extend(), LockNotHeldError);
        assert.equal(await b.release(), true);
      });

      it("release() answers false, never throws, when not held", async () => {
        const l = lock(fresh());
        assert.equal(await l.release(), false);
        await l.acquire();
        assert.equal(await l.release(), true);
        assert.equal(await l.release(), false);
      });

      it("is not reentrant: acquiring a key this handle holds answers false and keeps the hold", async () => {
        const l = lock(fresh());
        assert.equal(await l.acquire(), true);
        assert.equal(await l.acquire(), false);
        assert.equal(await l.release(), true);
      });
    });

    describe("extend(ttlMs)", () => {
      it("throws LockNotHeldError, a real Error subclass carrying the key, when never acquired", async () => {
        const key = fresh();
        const err = await lock(key).extend().then(() => null, (e) => e);
        assert.ok(err instanceof LockNotHeldError);
        assert.ok(err instanceof Error);
        assert.equal(err.name, "LockNotHeldError");
        assert.equal(err.key, key);
        assert.match(err.message, /not held/);
        assert.ok(typeof err.stack === "string");
      });

      it("throws LockNotHeldError when the lock was lost to expiry", async () => {
        const l = lock(fresh(), 30);
        await l.acquire();
        await sleep(80);
        await assert.rejects(l.extend(), LockNotHeldError);
        assert.equal(await l.isExpired(), true);
      });

      it("resets expiry to ttlMs from now (default: the lock's TTL)", async () => {
        const l = lock(fresh(), 2_000);
        await l.acquire();
        await l.extend(60_000);
        assert.equal(await l.isLocked(), true);
        const left = await l.getRemainingTime();
        assert.ok(left > 30_000 && left <= 60_000, `remaining ${left}: not past the lock's 2 s TTL`);
        await l.extend();
        assert.ok((await l.getRemainingTime()) <= 2_000);
        await l.release();
      });
    });

    describe("serialize() / restoreLock()", () => {
      it("hands a held lock to another holder that can extend and release it", async () => {
        const key = fresh();
        const a = lock(key, 60_000);
        await a.acquire();
        const s = a.serialize();
        assert.equal(typeof s, "string");
        const b = restoreLock(s);
        assert.equal(b.key, key);
        assert.equal(b.ttlMs, 60_000);
        await b.extend(120_000);
        assert.ok((await b.getRemainingTime()) > 60_000);
        assert.equal(await lock(key).acquire(), false);
        assert.equal(await b.release(), true);
        assert.equal(await a.release(), false, "the original's token was released by the restored lock");
      });

      it("refuses to serialize a lock it does not hold", async () => {
        assert.throws(() => lock(fresh()).serialize(), LockNotHeldError);
      });

      it("rejects malformed, truncated and wrong-version strings with a TypeError", async () => {
        const l = lock(fresh());
        await l.acquire();
        const s = l.serialize();
        const bad = ["", "garbage", "{}", s.slice(0, s.lastIndexOf(":")), s.replace(/^keel-lock:\d+:/, "keel-lock:99:"), s.replace(/:\d+:/, ":-5:"), s + ":extra"];
        for (const b of bad) assert.throws(() => restoreLock(b), TypeError, JSON.stringify(b));
        for (const b of [undefined, null, 42, {}]) assert.throws(() => restoreLock(b), TypeError);
        const wrongVersion = (() => { try { restoreLock(s.replace(/^keel-lock:\d+:/, "keel-lock:99:")); } catch (e) { return e.message; } })();
        assert.match(wrongVersion, /version/);
        await l.release();
      });
    });

    describe("inspection", () => {
      it("isLocked: does anyone hold this key", async () => {
        const key = fresh();
        assert.equal(await lock(key).isLocked(), false);
        const l = lock(key);
        await l.acquire();
        assert.equal(await lock(key).isLocked(), true);
        await l.release();
        assert.equal(await lock(key).isLocked(), false);
      });

      it("getRemainingTime: ms until expiry, or null if unheld", async () => {
        const key = fresh();
        assert.equal(await lock(key).getRemainingTime(), null);
        const l = lock(key, 10_000);
        await l.acquire();
        const left = await lock(key).getRemainingTime();
        assert.ok(left > 0 && left <= 10_000);
        await l.release();
        assert.equal(await l.getRemainingTime(), null);
      });

      it("isExpired: did we hold it and lose it (conservative local deadline)", async () => {
        const l = lock(fresh(), 50);
        assert.equal(await l.isExpired(), false, "never acquired");
        const clock = stopwatch();
        await l.acquire();
        const expired = await l.isExpired();
        assert.ok(!expired || clock.past(50), "expired inside its TTL");
        await sleep(70);
        assert.equal(await l.isExpired(), true, "TTL passed");
        const m = lock(fresh(), 10_000);
        await m.acquire();
        await m.release();
        assert.equal(await m.isExpired(), false, "released, not lost");
      });
    });
  });
}

describe("store registry", () => {
  it("MemoryLockStore is the default, and getLockStore() returns the very object set", async () => {
    const s = mapLockStore();
    setLockStore(s);
    assert.equal(getLockStore(), s);
    const m = new MemoryLockStore();
    setLockStore(m);
    assert.equal(getLockStore(), m);
    assert.ok(getLockStore() instanceof MemoryLockStore);
  });

  it("a lock keeps the store that was current when it was created", async () => {
    const first = new MemoryLockStore();
    setLockStore(first);
    const l = lock(fresh());
    setLockStore(new MemoryLockStore());
    await l.acquire();
    assert.equal(first.isLocked(l.key), true);
    await l.release();
  });

  it("MemoryLockStore's own methods: the LockStore seam answered at once, arguments checked, methods as a class has them", () => {
    const m = new MemoryLockStore();
    const key = fresh("memory-methods");
    const grant = m.acquire(key, "owner-1", 10_000);
    assert.ok(Number.isInteger(grant.fence) && grant.fence >= 1, JSON.stringify(grant));
    assert.equal(m.acquire(key, "owner-2", 10_000), false);
    assert.equal(m.isLocked(key), true);
    const left = m.remainingTime(key);
    assert.ok(left > 0 && left <= 10_000, String(left));
    assert.equal(m.release(key, "owner-2"), false, "a stranger's release");
    assert.equal(m.extend(key, "owner-2", 5), false, "a stranger's extend");
    assert.equal(m.extend(key, "owner-1", 20_000), true);
    assert.ok(m.remainingTime(key) > 10_000);
    assert.equal(m.release(key, "owner-1"), true);
    assert.equal(m.isLocked(key), false);
    assert.equal(m.remainingTime(key), null);
    assert.ok(m.acquire(key, "owner-3", 10_000));
    assert.equal(m.forceRelease(key), true);
    assert.equal(m.forceRelease(key), false);

    const typeError = (f, what) => assert.throws(f, TypeError, what);
    const rangeError = (f, what) => assert.throws(f, RangeError, what);
    rangeError(() => m.acquire("", "o", 100), "empty key");
    typeError(() => m.acquire(1, "o", 100), "key 1");
    typeError(() => m.acquire(key, 1, 100), "owner 1");
    rangeError(() => m.acquire(key, "has space", 100), "owner with a space");
    typeError(() => m.acquire(key, "o"), "no TTL");
    rangeError(() => m.extend(key, "o", 0), "TTL 0");
    typeError(() => m.release(key), "no owner");
    typeError(() => m.isLocked(), "no key");
    typeError(() => m.remainingTime(null), "key null");
    typeError(() => m.forceRelease({}), "key {}");
    // Called on something that is not a MemoryLockStore: an error, never a crash.
    assert.throws(() => MemoryLockStore.prototype.acquire.call({}, key, "o", 100));
    assert.equal(m.isLocked(key), false, "the instance still works");

    const proto = MemoryLockStore.prototype;
    const arity = { acquire: 3, release: 2, extend: 3, isLocked: 1, remainingTime: 1, forceRelease: 1 };
    for (const [name, length] of Object.entries(arity)) {
      const d = Object.getOwnPropertyDescriptor(proto, name);
      assert.equal(typeof d.value, "function", name);
      assert.equal(d.value.name, name);
      assert.equal(d.value.length, length, name);
      assert.equal(d.enumerable, false, name);
    }
  });

  it("MemoryLockStore does not grow without bound as keys expire", async () => {
    const m = new MemoryLockStore();
    setLockStore(m);
    for (let i = 0; i < 300; i++) await lock(`churn:${i}`, 1).acquire();
    await sleep(5);
    for (let i = 0; i < 3_000; i++) {
      await lock(`churn2:${i}`, 1).acquire();
      if (i % 500 === 0) await sleep(3);
    }
    await sleep(5);
    await lock("one-more").acquire();
    assert.ok(m.size < 1_200, `${m.size} rows kept for about 1 live key`);
    const before = m.size;
    const removed = m.purgeExpired();
    assert.equal(m.size, before - removed, "purgeExpired reports what it removed");
    assert.equal(m.size, 1, "only the live key is left");
  });
});

describe("stores that misbehave", () => {
  const ok = () => mapLockStore();

  it("a store that throws: the same error reaches the caller, and fn does not run", async () => {
    const boom = new Error("redis is down");
    setLockStore({ ...ok(), acquire() { throw boom; } });
    let called = false;
    await assert.rejects(lock(fresh()).run(() => { called = true; }), (e) => e === boom);
    assert.equal(called, false);
  });

  it("a store that rejects: the same error reaches the caller", async () => {
    const boom = new TypeError("connection reset");
    const inner = ok();
    setLockStore({ ...inner, acquire: inner.acquire, isLocked: () => Promise.reject(boom) });
    await assert.rejects(lock(fresh()).isLocked(), (e) => e === boom);
    const rel = new Error("release failed");
    setLockStore({ ...inner, release: async () => { throw rel; } });
    await assert.rejects(lock(fresh()).run(() => 1), (e) => e === rel);
  });

  it("when fn and the release both fail, fn's error wins", async () => {
    const fnError = new Error("fn failed");
    setLockStore({ ...ok(), release: async () => { throw new Error("release failed"); } });
    await assert.rejects(lock(fresh()).run(() => { throw fnError; }), (e) => e === fnError);
  });

  it("a store answering the wrong type gets a TypeError naming the method", async () => {
    setLockStore({ ...ok(), acquire: async () => 1 });
    await assert.rejects(lock(fresh()).run(() => 1), (e) => e instanceof TypeError && /acquire\(\)/.test(e.message));
    setLockStore({ ...ok(), isLocked: () => "yes" });
    await assert.rejects(lock(fresh()).isLocked(), (e) => e instanceof TypeError && /isLocked\(\)/.test(e.message));
    setLockStore({ ...ok(), remainingTime: () => -5 });
    await assert.rejects(lock(fresh()).getRemainingTime(), (e) => e instanceof TypeError && /remainingTime\(\)/.test(e.message));
  });

  it("a store that never answers cannot hold a wait past its timeout, nor a call past the TTL", async () => {
    const inner = ok();
    const never = () => new Promise(() => {});
    setLockStore({ ...inner, acquire: never });
    let called = false;
    assert.deepEqual(await lock(fresh()).run(() => { called = true; }, { timeout: 150, retryDelay: 20 }), [false, undefined]);
    assert.equal(await lock(fresh()).acquire({ timeout: 50 }), false);
    assert.equal(called, false);
    // Without a timeout, one attempt, abandoned after the lock's TTL.
    const key = fresh();
    await assert.rejects(lock(key, 200).runImmediately(() => { called = true; }), (e) =>
      e instanceof LockStoreTimeoutError && e.name === "LockStoreTimeoutError" && e.key === key &&
      e.operation === "acquire" && e.afterMs === 200 && e instanceof Error);
    assert.equal(called, false);
    // Release, extend and the queries too.
    setLockStore({ ...inner, release: never, extend: never, isLocked: never, remainingTime: never });
    const clock = stopwatch();
    const l = lock(fresh(), 200);
    assert.equal(await l.acquire(), true);
    // extend() decides at the call whether the hold is still live (else it rejects
    // LockNotHeldError without asking the store): only a call made inside the TTL must wait.
    const extending = l.extend();
    const live = clock.within(200);
    await assert.rejects(extending, (e) =>
      (e instanceof LockStoreTimeoutError && e.operation === "extend") || (!live && e instanceof LockNotHeldError));
    for (const [call, operation] of [[() => l.isLocked(), "isLocked"],
      [() => l.getRemainingTime(), "remainingTime"], [() => l.release(), "release"]]) {
      await assert.rejects(call(), (e) => e instanceof LockStoreTimeoutError && e.operation === operation);
    }
  });

  it("a grant that arrives after the caller gave up is released, not left held", async () => {
    const inner = ok();
    const released = [];
    setLockStore({
      ...inner,
      // The key is taken at once; the answer takes 400 ms.
      async acquire(key, owner, ttlMs) {
        const granted = await inner.acquire(key, owner, ttlMs);
        await sleep(400);
        return granted;
      },
      async release(key, owner) {
        released.push(owner);
        return inner.release(key, owner);
      },
    });
    const key = fresh();
    assert.deepEqual(await lock(key).run(() => 1, { timeout: 100, retryDelay: 10 }), [false, undefined]);
    assert.equal(await inner.isLocked(key), true, "the abandoned attempt took the key");
    // The key is free again once the late grant was given back, long before its 30 s TTL.
    await until(async () => released.length > 0 && !(await inner.isLocked(key)), "the late grant released");
    assert.equal(released.length, 1, "the late grant was released once");
  });

  it("a store missing a method is refused by setLockStore with a TypeError naming it", () => {
    for (const missing of ["acquire", "release", "extend", "isLocked", "remainingTime"]) {
      const s = ok();
      delete s[missing];
      assert.throws(() => setLockStore(s), (e) => e instanceof TypeError && e.message.includes(missing));
    }
    for (const notAStore of [null, undefined, 42, "redis"]) assert.throws(() => setLockStore(notAStore), TypeError);
  });
});

describe("bad input is a clear JS error, never a wasm trap", () => {
  beforeEach(() => setLockStore(new MemoryLockStore()));

  it("keys", () => {
    assert.throws(() => lock(""), RangeError);
    assert.throws(() => lock("x".repeat(513)), RangeError);
    assert.doesNotThrow(() => lock("x".repeat(512)));
    for (const k of [undefined, null, 42, {}, Symbol("k")]) assert.throws(() => lock(k), TypeError);
    // An array is a multi-key lock (multi.test.mjs), whose every key is checked the same way.
    for (const k of [[42], [null], [["a"]]]) assert.throws(() => lock(k), TypeError);
  });

  it("TTLs", () => {
    for (const t of [0, -1, NaN, Infinity, -Infinity, 2 ** 31]) assert.throws(() => lock("k", t), RangeError, String(t));
    for (const t of ["5", null, {}, 5n]) assert.throws(() => lock("k", t), TypeError, String(t));
  });

  it("wait options and callbacks", async () => {
    const l = lock(fresh());
    await assert.rejects(l.run(() => 1, { timeout: -1 }), RangeError);
    await assert.rejects(l.run(() => 1, { timeout: Infinity }), RangeError);
    await assert.rejects(l.run(() => 1, { retryDelay: NaN }), RangeError);
    await assert.rejects(l.run(() => 1, { retryDelay: -5 }), RangeError);
    await assert.rejects(l.run(() => 1, { timeout: "5" }), TypeError);
    await assert.rejects(l.run(() => 1, 5), TypeError);
    await assert.rejects(l.acquire({ timeout: -1 }), RangeError);
    await assert.rejects(l.extend(-1), RangeError);
    for (const notFn of [undefined, null, 42, "fn", {}]) await assert.rejects(l.run(notFn), TypeError);
    // Every option is checked before fn.
    await assert.rejects(l.run(42, { timeout: -1 }), RangeError);
    await assert.rejects(l.run(42, { autoExtend: { every: 0 } }), RangeError);
    // and the instance still works afterwards
    assert.deepEqual(await l.run(() => "still alive"), [true, "still alive"]);
  });
});
