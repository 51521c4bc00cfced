// What extend(), isLocked(), getRemainingTime(), forceRelease(), serialize() and restoreLock()
// do for their callers, over the installed package: answers, errors (their class, and whether
// they are thrown or a rejected promise), and what a store's answers make of them. Pinned once
// per store in STORES where it applies, and with JS stores whose answers are chosen per test.
// Where the current behaviour looks questionable the test says so ("current behaviour").
import { describe, it, beforeEach } from "node:test";
import assert from "node:assert/strict";
import {
  lock,
  restoreLock,
  setLockStore,
  MemoryLockStore,
  LockNotHeldError,
  LockStoreTimeoutError,
} from "keel-lock";
import { STORES, mapLockStore, recording } from "./stores.mjs";
import { sleep, stopwatch, until } from "./waits.mjs";

let n = 0;
const fresh = (name = "op") => `operations:${name}:${process.pid}:${++n}`;

/** `call()`'s promise; fails if it threw synchronously instead of answering one. */
function promised(call) {
  let answer;
  assert.doesNotThrow(() => {
    answer = call();
  }, "threw synchronously instead of rejecting");
  assert.ok(answer instanceof Promise, "answers a promise");
  return answer;
}

/** `call()`'s synchronous answer; fails if it answered a promise. */
function promisedNot(call) {
  const answer = call();
  assert.ok(!(answer instanceof Promise), "answers synchronously");
  return answer;
}

/** A predicate for assert.rejects/throws: a LockNotHeldError about `key`. */
const notHeld = (key, message = /not held/) => (e) => {
  assert.ok(e instanceof LockNotHeldError, `${e?.name}: ${e?.message}`);
  assert.ok(e instanceof Error);
  assert.equal(e.name, "LockNotHeldError");
  assert.equal(e.key, key);
  assert.match(e.message, message);
  return true;
};

/** A predicate: a LockStoreTimeoutError for `operation` on `key` after `afterMs`. */
const timedOut = (key, operation, afterMs) => (e) => {
  assert.ok(e instanceof LockStoreTimeoutError, `${e?.name}: ${e?.message}`);
  assert.ok(e instanceof Error);
  assert.equal(e.name, "LockStoreTimeoutError");
  assert.equal(e.key, key);
  assert.equal(e.operation, operation);
  assert.equal(e.afterMs, afterMs);
  assert.match(e.message, new RegExp(`${operation}\\(\\)`));
  return true;
};

/** A predicate: a TypeError naming the store method `method()`. */
const brokenStore = (method, what = /boolean/) => (e) => {
  assert.ok(e instanceof TypeError, `${e?.name}: ${e?.message}`);
  assert.match(e.message, new RegExp(`${method}\\(\\)`));
  assert.match(e.message, what);
  return true;
};

/** A JS store over a MemoryLockStore, answering promises, with forceRelease (and fences). */
function asyncMemoryStore() {
  const m = new MemoryLockStore();
  const calls = [];
  const later = (name, f) => async (...args) => {
    calls.push([name, ...args]);
    await null;
    return f(...args);
  };
  return {
    calls,
    acquire: later("acquire", (k, o, t) => m.acquire(k, o, t)),
    release: later("release", (k, o) => m.release(k, o)),
    extend: later("extend", (k, o, t) => m.extend(k, o, t)),
    isLocked: later("isLocked", (k) => m.isLocked(k)),
    remainingTime: later("remainingTime", (k) => m.remainingTime(k)),
    forceRelease: later("forceRelease", (k) => m.forceRelease(k)),
  };
}

/** mapLockStore() with `method` replaced by one answering `answer` (sync: as is; else a promise). */
function answering(method, answer, sync) {
  return { ...mapLockStore(), [method]: sync ? () => answer : async () => answer };
}

const WRONG_BOOLEANS = ["yes", "true", 1, 0, NaN, null, undefined, {}];

for (const [storeName, makeStore] of Object.entries(STORES)) {
  const fenced = storeName === "memory";

  describe(`extend() on the ${storeName} store`, () => {
    beforeEach(() => setLockStore(makeStore()));

    it("extend() on a held lock moves its expiry: it stays held past the original TTL", async () => {
      const key = fresh();
      // Extended halfway through: a stall of up to about half the TTL anywhere is survived.
      const ttl = 2_000;
      const l = lock(key, ttl);
      assert.equal(await l.acquire(), true);
      const granted = performance.now(); // the original TTL ends no later than `ttl` from here
      await sleep(ttl / 2);
      const before = await l.getRemainingTime();
      assert.equal(await promised(() => l.extend()), undefined);
      const after = await l.getRemainingTime();
      assert.ok(after > before, `remaining ${before} -> ${after}`);
      assert.ok(after > ttl / 2 && after <= ttl, `remaining ${after}`);
      await sleep(granted + ttl + 100 - performance.now()); // past the original TTL
      assert.equal(await lock(key).isLocked(), true);
      assert.equal(await lock(key).acquire(), false);
      assert.equal(await l.isExpired(), false);
      assert.ok((await l.getRemainingTime()) > 0);
      assert.equal(await l.release(), true);
      assert.equal(await lock(key).isLocked(), false);
    });

    it("extend(ttlMs) sets the expiry to ttlMs from now, shorter or longer, and leaves the lock's TTL alone", async () => {
      const key = fresh();
      const l = lock(key, 20_000);
      await l.acquire();
      await l.extend(40_000);
      let left = await l.getRemainingTime();
      assert.ok(left > 20_000 && left <= 40_000, `remaining ${left}`);
      assert.equal(l.ttlMs, 20_000);
      assert.equal(restoreLock(l.serialize()).ttlMs, 20_000);
      await l.extend(5_000); // shorter than the lock's TTL
      left = await l.getRemainingTime();
      assert.ok(left > 0 && left <= 5_000, `remaining ${left}`);
      await l.extend(); // the lock's TTL again, not the last explicit one
      left = await l.getRemainingTime();
      assert.ok(left > 15_000 && left <= 20_000, `remaining ${left}`);
      await l.extend(2 ** 31 - 1); // the largest TTL there is
      assert.ok((await l.getRemainingTime()) > 2 ** 31 - 1 - 5_000);
      assert.equal(await l.release(), true);
    });

    it("a fractional ttlMs is taken, rounded up: extend(0.4) leaves at most 1 ms", async () => {
      const l = lock(fresh(), 5_000);
      await l.acquire();
      assert.equal(await promised(() => l.extend(0.4)), undefined);
      const left = await l.getRemainingTime();
      assert.ok(left === null || left <= 1, `remaining ${left}`);
      await l.release();
    });

    it("rejects LockNotHeldError when never acquired, while another handle holds the key, and after release", async () => {
      const key = fresh();
      await assert.rejects(promised(() => lock(key).extend()), notHeld(key));
      const holder = lock(key, 60_000);
      assert.equal(await holder.acquire(), true);
      const other = lock(key, 60_000);
      await assert.rejects(promised(() => other.extend()), notHeld(key));
      await assert.rejects(promised(() => other.extend(120_000)), notHeld(key));
      // The holder's lock is untouched by the refused extends.
      const left = await holder.getRemainingTime();
      assert.ok(left > 30_000 && left <= 60_000, `remaining ${left}`);
      assert.equal(await holder.release(), true);
      await assert.rejects(promised(() => holder.extend()), notHeld(key));
      await assert.rejects(promised(() => holder.extend(1_000)), notHeld(key));
      assert.equal(await holder.isExpired(), false, "released, not lost");
      assert.equal(await lock(key).isLocked(), false);
    });

    it("rejects LockNotHeldError once the hold expired and another handle took the key; the new holder keeps its expiry", async () => {
      const key = fresh();
      const a = lock(key, 40);
      assert.equal(await a.acquire(), true);
      await sleep(90);
      const b = lock(key, 60_000);
      assert.equal(await b.acquire(), true);
      await assert.rejects(promised(() => a.extend()), notHeld(key));
      await assert.rejects(promised(() => a.extend(10_000)), notHeld(key));
      assert.equal(await a.isExpired(), true);
      assert.equal(await a.release(), false);
      assert.equal(a.fence, null, "the store refused the release: the hold is known lost");
      const left = await b.getRemainingTime();
      assert.ok(left > 30_000 && left <= 60_000, `remaining ${left}`);
      if (fenced) assert.ok(b.fence >= 1);
      assert.equal(await b.release(), true);
    });

    it("a bad ttlMs is a rejected promise, never a throw: RangeError out of range, TypeError not a number, before the hold is looked at", async () => {
      const key = fresh();
      const held = lock(key, 60_000);
      await held.acquire();
      const unheld = lock(fresh(), 60_000);
      const ranges = [-1, -0.5, 0, -0, NaN, Infinity, -Infinity, 2 ** 31, 2 ** 31 - 0.5];
      const types = ["5", "", null, {}, [], true, 5n, Symbol("t")];
      for (const l of [held, unheld]) {
        for (const bad of ranges) {
          await assert.rejects(promised(() => l.extend(bad)), (e) => {
            assert.ok(e instanceof RangeError, `${String(bad)}: ${e?.name}`);
            assert.match(e.message, /ttlMs/);
            return true;
          });
        }
        for (const bad of types) {
          await assert.rejects(promised(() => l.extend(bad)), (e) => {
            assert.ok(e instanceof TypeError, `${String(bad)}: ${e?.name}`);
            assert.match(e.message, /ttlMs must be a number/);
            return true;
          });
        }
      }
      // None of them shortened the held lock or cost it its hold.
      const left = await held.getRemainingTime();
      assert.ok(left > 30_000 && left <= 60_000, `remaining ${left}`);
      assert.equal(await held.isExpired(), false);
      assert.equal(await held.release(), true);
    });
  });

  describe(`isLocked() and getRemainingTime() on the ${storeName} store`, () => {
    beforeEach(() => setLockStore(makeStore()));

    it("answer for the key whichever handle asks: true and whole ms counting down while held, false and null once released or expired", async () => {
      const key = fresh();
      const holder = lock(key, 60_000);
      const observer = lock(key);
      assert.equal(await promised(() => observer.isLocked()), false);
      assert.equal(await promised(() => observer.getRemainingTime()), null);
      assert.equal(await holder.acquire(), true);
      for (const l of [holder, observer]) {
        assert.equal(await l.isLocked(), true);
        const left = await l.getRemainingTime();
        assert.ok(Number.isInteger(left) && left > 0 && left <= 60_000, `remaining ${left}`);
      }
      const first = await observer.getRemainingTime();
      await sleep(60);
      const second = await observer.getRemainingTime();
      assert.ok(second < first, `remaining ${first} -> ${second}`);
      assert.equal(await holder.release(), true);
      assert.equal(await observer.isLocked(), false);
      assert.equal(await holder.getRemainingTime(), null);
      // Expiry, with nobody releasing.
      const clock = stopwatch();
      assert.equal(await lock(key, 40).acquire(), true);
      const held = await observer.isLocked();
      assert.ok(held || clock.past(40), "free inside its TTL");
      await sleep(90);
      assert.equal(await observer.isLocked(), false);
      assert.equal(await observer.getRemainingTime(), null);
    });
  });

  describe(`serialize() and restoreLock() on the ${storeName} store`, () => {
    beforeEach(() => setLockStore(makeStore()));

    it("a round trip keeps key, ttlMs and fence, and the restored handle holds: it extends, reports and releases", async () => {
      const key = fresh();
      const a = lock(key, 20_000);
      await a.acquire();
      if (fenced) assert.ok(Number.isInteger(a.fence) && a.fence >= 1, `fence ${a.fence}`);
      else assert.equal(a.fence, null);
      const s = promisedNot(() => a.serialize());
      assert.match(s, /^keel-lock:3:/);
      const b = restoreLock(s);
      assert.equal(b.key, key);
      assert.equal(b.ttlMs, 20_000);
      assert.equal(b.fence, a.fence);
      assert.equal(await b.isExpired(), false);
      assert.equal(await b.isLocked(), true);
      const left = await b.getRemainingTime();
      assert.ok(left > 10_000 && left <= 20_000, `remaining ${left}`);
      await b.extend(60_000);
      assert.ok((await a.getRemainingTime()) > 40_000, "the original sees the restored handle's extend");
      // The restored handle serializes too, into a lock on the same hold.
      const c = restoreLock(b.serialize());
      assert.equal(c.key, key);
      assert.equal(c.fence, a.fence);
      assert.equal(await lock(key).acquire(), false);
      assert.equal(await c.release(), true);
      assert.equal(await lock(key).isLocked(), false);
      assert.equal(await b.release(), false);
      assert.equal(await a.release(), false);
      await assert.rejects(a.extend(), notHeld(key));
    });

    it("serialize() after extend(ttlMs) carries the new expiry but still the lock's TTL", async () => {
      const key = fresh();
      const a = lock(key, 10_000);
      await a.acquire();
      const before = a.serialize();
      await a.extend(60_000);
      const after = a.serialize();
      assert.notEqual(after, before);
      const b = restoreLock(after);
      assert.equal(b.ttlMs, 10_000);
      assert.ok((await b.getRemainingTime()) > 30_000);
      await b.extend(); // the lock's TTL
      assert.ok((await a.getRemainingTime()) <= 10_000);
      assert.equal(await b.release(), true);
    });

    it("serialize() throws LockNotHeldError synchronously: never acquired, after release, after the hold was lost", async () => {
      const key = fresh();
      const released = lock(key, 60_000);
      assert.throws(() => released.serialize(), notHeld(key, /cannot serialize/));
      await released.acquire();
      assert.equal(await released.release(), true);
      assert.throws(() => released.serialize(), notHeld(key, /cannot serialize/));
      const l = lock(key, 40);
      assert.throws(() => l.serialize(), notHeld(key, /cannot serialize/));
      await l.acquire();
      await sleep(90);
      assert.equal(await lock(key).acquire(), true);
      await assert.rejects(l.extend(), LockNotHeldError);
      assert.throws(() => l.serialize(), notHeld(key, /cannot serialize/));
    });

    it("a restored lock whose hold the original released: release() false, extend() rejects LockNotHeldError", async () => {
      const key = fresh();
      const a = lock(key, 5_000);
      await a.acquire();
      const s = a.serialize();
      assert.equal(await a.release(), true);
      const b = restoreLock(s);
      assert.equal(b.key, key);
      assert.equal(await b.isExpired(), false, "it does not know yet");
      assert.equal(await b.release(), false);
      const c = restoreLock(s);
      await assert.rejects(promised(() => c.extend()), notHeld(key));
      assert.equal(await c.isExpired(), true);
      assert.equal(c.fence, null);
      // And the key is free for anyone.
      assert.equal(await lock(key).acquire(), true);
    });

    it("a key that starts with U+FEFF (a byte-order mark) comes back whole from restoreLock, and the restored handle releases that very key", async () => {
      const key = `\uFEFF${fresh("bom")}`;
      const a = lock(key, 5_000);
      await a.acquire();
      const b = restoreLock(a.serialize());
      assert.equal(b.key, key);
      assert.equal(b.key.charCodeAt(0), 0xfeff);
      assert.equal(await lock(key.slice(1)).isLocked(), false, "the key without its mark is another, free key");
      assert.equal(await b.release(), true);
      assert.equal(await lock(key).isLocked(), false);
      assert.equal(await a.release(), false);
    });

    it("a handle whose TTL passed unnoticed does not serialize; one serialized just before its TTL ran out restores as expired", async () => {
      const key = fresh();
      // Serialized right after the acquire, then left to expire: the store frees the key no
      // earlier than the handle's own deadline passes.
      const a = lock(key, 1_000);
      await a.acquire();
      const s = a.serialize();
      await until(async () => !(await lock(key).isLocked()), "the TTL ran out", { everyMs: 20 });
      assert.equal(await a.isExpired(), true);
      assert.throws(() => a.serialize(), notHeld(key, /cannot serialize/));
      const b = restoreLock(s);
      assert.equal(b.key, key);
      assert.equal(await b.isExpired(), true);
      await assert.rejects(b.extend(), notHeld(key));
      assert.equal(await b.release(), false);
    });
  });

  describe(`keys with U+FFFD on the ${storeName} store`, () => {
    beforeEach(() => setLockStore(makeStore()));

    it("a key containing a real U+FFFD works through run, acquire, extend, serialize, restoreLock and release, apart from its neighbours", async () => {
      // A JS store is watched, to see the keys it is asked about; the memory store is left bare.
      const rec = recording(makeStore());
      if (storeName !== "memory") setLockStore(rec.store);
      const key = `${fresh("fffd")}:a\uFFFDb`;
      const neighbours = [key.replace("\uFFFD", ""), key.replace("\uFFFD", "\uFFFD\uFFFD"), key.replace("\uFFFD", "?")];
      const l = lock(key, 20_000);
      assert.equal(l.key, key);
      const [ran, seen] = await l.run(async (ctx) => {
        await l.extend(40_000);
        return { fence: ctx.fence, left: await l.getRemainingTime(), locked: await l.isLocked(), s: l.serialize() };
      });
      assert.equal(ran, true);
      assert.ok(seen.left > 20_000 && seen.left <= 40_000, `remaining ${seen.left}`);
      assert.equal(seen.locked, true);
      assert.equal(restoreLock(seen.s).key, key);
      assert.equal(await lock(key).isLocked(), false, "run() released it");

      assert.equal(await l.acquire(), true);
      for (const other of neighbours) assert.equal(await lock(other).isLocked(), false, JSON.stringify(other));
      assert.deepEqual(await lock(key).run(() => 1), [false, undefined]);
      const r = restoreLock(l.serialize());
      assert.equal(r.key, key);
      assert.equal(r.key.length, key.length);
      assert.equal(r.fence, l.fence);
      await r.extend(60_000);
      assert.ok((await l.getRemainingTime()) > 30_000);
      assert.equal(await r.release(), true);
      assert.equal(await l.release(), false);
      assert.equal(await lock(key).isLocked(), false);
      if (storeName !== "memory") {
        // The store saw the key exactly: never the key's neighbour.
        const keys = new Set(rec.calls.filter((c) => c.name !== "isLocked").map((c) => c.args[0]));
        assert.deepEqual([...keys], [key]);
      }
    });
  });
}

describe("forceRelease() on stores that have it", () => {
  const FORCE_STORES = {
    memory: () => new MemoryLockStore(),
    "js (async, over a MemoryLockStore)": asyncMemoryStore,
  };
  for (const [storeName, makeStore] of Object.entries(FORCE_STORES)) {
    it(`frees a key another handle holds (true), false on a free key; the former holder learns at its extend (${storeName})`, async () => {
      setLockStore(makeStore());
      const key = fresh();
      const holder = lock(key, 5_000);
      assert.equal(await holder.acquire(), true);
      const fence = holder.fence;
      assert.ok(fence >= 1);
      const operator = lock(key);
      assert.equal(await promised(() => operator.forceRelease()), true);
      assert.equal(await operator.isLocked(), false);
      assert.equal(await operator.getRemainingTime(), null);
      assert.equal(await promised(() => operator.forceRelease()), false, "nobody held it any more");
      assert.equal(await promised(() => lock(fresh()).forceRelease()), false, "a key never held");
      // The holder is not told: it finds out at its next extend.
      assert.equal(await holder.isExpired(), false);
      await assert.rejects(holder.extend(), notHeld(key));
      assert.equal(await holder.isExpired(), true);
      assert.equal(holder.fence, null);
      assert.equal(await holder.release(), false);
      // The key is free, and its next hold gets a higher fence.
      const next = lock(key);
      assert.equal(await next.acquire(), true);
      assert.ok(next.fence > fence, `fence ${fence} -> ${next.fence}`);
      assert.equal(await holder.forceRelease(), true, "any handle may force-release");
      assert.equal(await next.release(), false);
    });

    it(`a holder that force-releases its own hold gets true; its release() then answers false (${storeName})`, async () => {
      setLockStore(makeStore());
      const key = fresh();
      const l = lock(key, 5_000);
      await l.acquire();
      assert.equal(await l.forceRelease(), true);
      assert.equal(await lock(key).isLocked(), false);
      assert.equal(await l.release(), false);
      assert.equal(await lock(key).acquire(), true);
    });
  }

  it("a JS store's forceRelease is asked with the key alone, and its boolean passes through", async () => {
    const store = asyncMemoryStore();
    setLockStore(store);
    const key = fresh();
    await lock(key).acquire();
    assert.equal(await lock(key, 1_000).forceRelease(), true);
    assert.deepEqual(store.calls.filter((c) => c[0] === "forceRelease"), [["forceRelease", key]]);
    for (const answer of [true, false]) {
      for (const sync of [true, false]) {
        setLockStore(answering("forceRelease", answer, sync));
        assert.equal(await promised(() => lock(fresh()).forceRelease()), answer);
      }
    }
  });
});

describe("forceRelease() on JS stores that cannot or answer oddly", () => {
  it("a store without forceRelease: a rejected promise with a plain Error saying the store cannot; the holder keeps the key", async () => {
    setLockStore(mapLockStore());
    const key = fresh();
    const holder = lock(key, 5_000);
    await holder.acquire();
    for (const l of [lock(key), holder]) {
      await assert.rejects(promised(() => l.forceRelease()), (e) => {
        assert.equal(Object.getPrototypeOf(e), Error.prototype, `${e?.constructor?.name}`);
        assert.equal(e.name, "Error");
        assert.ok(!(e instanceof TypeError) && !(e instanceof LockNotHeldError));
        assert.match(e.message, /does not support forceRelease\(\)/);
        return true;
      });
    }
    assert.equal(await lock(key).isLocked(), true);
    assert.equal(await holder.isExpired(), false);
    assert.equal(await holder.release(), true);
  });

  it("a store whose forceRelease answers a non-boolean: TypeError naming forceRelease()", async () => {
    for (const answer of WRONG_BOOLEANS) {
      for (const sync of [true, false]) {
        setLockStore(answering("forceRelease", answer, sync));
        await assert.rejects(promised(() => lock(fresh()).forceRelease()), brokenStore("forceRelease"), String(answer));
      }
    }
  });

  it("a store whose forceRelease throws or rejects: the same error; one that never answers: LockStoreTimeoutError after the TTL", async () => {
    const boom = new Error("force failed");
    setLockStore({ ...mapLockStore(), forceRelease() { throw boom; } });
    await assert.rejects(promised(() => lock(fresh()).forceRelease()), (e) => e === boom);
    setLockStore({ ...mapLockStore(), forceRelease: async () => { throw boom; } });
    await assert.rejects(promised(() => lock(fresh()).forceRelease()), (e) => e === boom);
    setLockStore({ ...mapLockStore(), forceRelease: () => new Promise(() => {}) });
    const key = fresh();
    await assert.rejects(promised(() => lock(key, 50).forceRelease()), timedOut(key, "forceRelease", 50));
  });
});

describe("extend() on JS stores chosen per test", () => {
  /** mapLockStore() whose extend answers as `state.extend` says: "ok" (the store's), or a value. */
  function switchable() {
    const inner = mapLockStore();
    const state = { extend: "ok", sync: false, calls: 0 };
    const store = {
      ...inner,
      extend(key, owner, ttlMs) {
        state.calls++;
        if (state.extend === "ok") return inner.extend(key, owner, ttlMs);
        if (state.extend === "never") return new Promise(() => {});
        if (state.extend === "throw") throw state.error;
        if (state.extend === "reject") return Promise.reject(state.error);
        return state.sync ? state.answer : Promise.resolve(state.answer);
      },
    };
    return { store, state };
  }

  it("the store answering false after a good extend: rejects LockNotHeldError, isExpired() true, a second extend rejects too, release() false", async () => {
    for (const sync of [true, false]) {
      const { store, state } = switchable();
      setLockStore(store);
      const key = fresh();
      const l = lock(key, 30_000);
      await l.acquire();
      await l.extend();
      assert.equal(await l.isExpired(), false);
      Object.assign(state, { extend: "answer", answer: false, sync });
      await assert.rejects(promised(() => l.extend()), notHeld(key));
      assert.equal(await l.isExpired(), true);
      assert.equal(l.fence, null);
      state.extend = "ok";
      await assert.rejects(promised(() => l.extend()), notHeld(key));
      await assert.rejects(promised(() => l.extend(5_000)), notHeld(key));
      assert.throws(() => l.serialize(), LockNotHeldError);
      assert.equal(await l.release(), false);
    }
  });

  it("the store's extend throwing or rejecting: the same error object, and the hold is kept", async () => {
    for (const mode of ["throw", "reject"]) {
      const { store, state } = switchable();
      setLockStore(store);
      const l = lock(fresh(), 30_000);
      await l.acquire();
      const boom = new Error(`extend ${mode}`);
      Object.assign(state, { extend: mode, error: boom });
      await assert.rejects(promised(() => l.extend()), (e) => e === boom);
      await assert.rejects(promised(() => l.extend(5_000)), (e) => e === boom);
      assert.equal(await l.isExpired(), false);
      state.extend = "ok";
      await l.extend(60_000);
      assert.ok((await l.getRemainingTime()) > 30_000);
      assert.equal(await l.release(), true);
    }
  });

  it("the store's extend answering a non-boolean: TypeError naming extend(), and the hold is kept", async () => {
    for (const answer of WRONG_BOOLEANS) {
      for (const sync of [true, false]) {
        const { store, state } = switchable();
        setLockStore(store);
        const l = lock(fresh(), 30_000);
        await l.acquire();
        Object.assign(state, { extend: "answer", answer, sync });
        await assert.rejects(promised(() => l.extend()), brokenStore("extend"), `${String(answer)} sync=${sync}`);
        assert.equal(await l.isExpired(), false);
        assert.equal(await l.release(), true);
      }
    }
  });

  it("the store's extend never answering: LockStoreTimeoutError after the lock's TTL (also for extend(ttlMs)); the hold is then presumed lost", async () => {
    const { store, state } = switchable();
    setLockStore(store);
    const key = fresh();
    const l = lock(key, 50);
    await l.acquire();
    state.extend = "never";
    await assert.rejects(promised(() => l.extend()), timedOut(key, "extend", 50));
    assert.equal(await l.isExpired(), true);
    state.extend = "ok";
    await assert.rejects(l.extend(), notHeld(key));
    assert.equal(await l.release(), false);
    // The bound is the lock's TTL, not the TTL asked for.
    const key2 = fresh();
    const m = lock(key2, 50);
    await m.acquire();
    state.extend = "never";
    await assert.rejects(promised(() => m.extend(300)), timedOut(key2, "extend", 50));
  });

  it("a hold past its TTL: extend() rejects LockNotHeldError and serialize() throws without asking the store; release() still asks it", async () => {
    const rec = recording(mapLockStore());
    setLockStore(rec.store);
    const key = fresh();
    const l = lock(key, 30);
    await l.acquire();
    await sleep(60);
    assert.equal(await l.isExpired(), true);
    const asked = rec.calls.length;
    await assert.rejects(l.extend(), notHeld(key));
    await assert.rejects(l.extend(5_000), notHeld(key));
    assert.throws(() => l.serialize(), notHeld(key, /cannot serialize/));
    assert.deepEqual(rec.calls.slice(asked), [], "the store was asked");
    assert.equal(await l.release(), false);
    assert.deepEqual(rec.calls.slice(asked).map((c) => c.name), ["release"]);
  });

  it("the store is asked with the key, the owner token and the TTL: the lock's, or ttlMs rounded up", async () => {
    const rec = recording(mapLockStore());
    setLockStore(rec.store);
    const key = fresh();
    const l = lock(key, 7_000);
    await l.acquire();
    const owner = rec.calls.find((c) => c.name === "acquire").args[1];
    await l.extend();
    await l.extend(undefined);
    await l.extend(15_000);
    await l.extend(2 ** 31 - 1);
    await l.extend(10_000.2);
    await l.extend(-1).catch(() => {}); // refused before the store is asked
    await l.extend("5").catch(() => {});
    await l.extend(0.4); // last: the hold has 1 ms left after it
    const extends_ = rec.calls.filter((c) => c.name === "extend");
    assert.deepEqual(
      extends_.map((c) => c.args),
      [7_000, 7_000, 15_000, 2 ** 31 - 1, 10_001, 1].map((ttl) => [key, owner, ttl]),
    );
  });
});

describe("isLocked() and getRemainingTime() on JS stores chosen per test", () => {
  it("isLocked: a non-boolean answer is a TypeError naming isLocked(); true and false pass through", async () => {
    for (const sync of [true, false]) {
      for (const answer of WRONG_BOOLEANS) {
        setLockStore(answering("isLocked", answer, sync));
        await assert.rejects(promised(() => lock(fresh()).isLocked()), brokenStore("isLocked"), `${String(answer)} sync=${sync}`);
      }
      for (const answer of [true, false]) {
        setLockStore(answering("isLocked", answer, sync));
        assert.equal(await promised(() => lock(fresh()).isLocked()), answer);
      }
    }
  });

  it("remainingTime: anything but null or 0 to 2^31-1 ms is a TypeError naming remainingTime(); fractions round up, -0 is 0", async () => {
    const range = /null or a number of milliseconds from 0 to 2147483647/;
    for (const sync of [true, false]) {
      for (const answer of [-1, -0.5, NaN, Infinity, -Infinity, 2 ** 31, 1e300, "5", "", false, true, undefined, {}, 5n]) {
        setLockStore(answering("remainingTime", answer, sync));
        await assert.rejects(
          promised(() => lock(fresh()).getRemainingTime()),
          brokenStore("remainingTime", range),
          `${String(answer)} sync=${sync}`,
        );
      }
      for (const [answer, expected] of [[null, null], [0, 0], [-0, 0], [1, 1], [1.5, 2], [0.2, 1], [2 ** 31 - 1, 2 ** 31 - 1]]) {
        setLockStore(answering("remainingTime", answer, sync));
        const got = await promised(() => lock(fresh()).getRemainingTime());
        assert.ok(Object.is(got, expected), `${String(answer)} -> ${String(got)}`);
      }
    }
  });

  it("a store that throws or rejects: the same error object", async () => {
    for (const [method, call] of [["isLocked", (l) => l.isLocked()], ["remainingTime", (l) => l.getRemainingTime()]]) {
      const boom = new Error(`${method} failed`);
      setLockStore({ ...mapLockStore(), [method]() { throw boom; } });
      await assert.rejects(promised(() => call(lock(fresh()))), (e) => e === boom, method);
      setLockStore({ ...mapLockStore(), [method]: () => Promise.reject(boom) });
      await assert.rejects(promised(() => call(lock(fresh()))), (e) => e === boom, method);
    }
  });

  it("a store that never answers: LockStoreTimeoutError after the lock's TTL, operation \"isLocked\" / \"remainingTime\"", async () => {
    const never = () => new Promise(() => {});
    setLockStore({ ...mapLockStore(), isLocked: never, remainingTime: never });
    const key = fresh();
    await assert.rejects(promised(() => lock(key, 50).isLocked()), timedOut(key, "isLocked", 50));
    await assert.rejects(promised(() => lock(key, 60).getRemainingTime()), timedOut(key, "remainingTime", 60));
  });
});

describe("restoreLock() of strings serialize() did not write", () => {
  beforeEach(() => setLockStore(new MemoryLockStore()));

  /** A held lock on `key` and its serialized string. */
  async function serialized(key) {
    const l = lock(key, 5_000);
    assert.equal(await l.acquire(), true);
    return l.serialize();
  }

  it("malformed, empty, cut short anywhere, or not a string: a TypeError, thrown synchronously", async () => {
    const key = fresh("restore");
    const s = await serialized(key);
    const bad = ["", "keel-lock:", "keel-lock:3:", "keel-lock:3", "keel", `${s}:`, `${s}0`];
    for (let i = 0; i < s.length; i++) bad.push(s.slice(0, i));
    for (const b of bad) {
      assert.throws(() => restoreLock(b), (e) => {
        assert.ok(e instanceof TypeError, `${JSON.stringify(b)}: ${e?.name}`);
        assert.match(e.message, /restoreLock/);
        return true;
      });
    }
    for (const b of [undefined, null, 42, 0, NaN, true, {}, [], Symbol("s"), () => s]) {
      assert.throws(() => restoreLock(b), (e) => e instanceof TypeError && /serialize\(\)/.test(e.message), String(b));
    }
  });

  it("a key field that is not UTF-8 (a byte 0xFF, or a surrogate encoded as CESU-8) is a TypeError", async () => {
    const s = await serialized(fresh("restore"));
    const base64url = (bytes) =>
      btoa(String.fromCharCode(...bytes)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
    // A version 2 string (no check), so that only the key field is wrong.
    const v2 = s.replace(/^keel-lock:3:/, "keel-lock:2:").replace(/:[0-9a-f]{8}$/, "");
    const withKey = (bytes) => v2.replace(/:[^:]*$/, `:${base64url(bytes)}`);
    for (const bytes of [[0x61, 0xff, 0x62], [0x61, 0xed, 0xa0, 0x80, 0x62], [0xed, 0xbf, 0xbf]]) {
      assert.throws(() => restoreLock(withKey(bytes)), (e) => e instanceof TypeError && /not UTF-8/.test(e.message), String(bytes));
    }
    // A real U+FFFD (EF BF BD) is a key like any other.
    assert.equal(restoreLock(withKey([0x61, 0xef, 0xbf, 0xbd, 0x62])).key, "a\uFFFDb");
  });

  it("a string cut inside its key at a whole base64 group, or with one character changed, is a TypeError (its check does not match)", async () => {
    // "trunc:" is exactly 8 base64 characters: cut there, the key field alone would read as a
    // valid, shorter key.
    const key = `trunc:${process.pid}:${++n}`;
    const s = await serialized(key);
    const keyField = s.split(":").at(-2);
    const keyStart = s.lastIndexOf(keyField);
    assert.throws(() => restoreLock(s.slice(0, keyStart + 8)), (e) => e instanceof TypeError && /version 3 has 8 fields/.test(e.message));
    const altered = `${s.slice(0, keyStart)}${keyField[0] === "A" ? "B" : "A"}${s.slice(keyStart + 1)}`;
    assert.throws(() => restoreLock(altered), (e) => e instanceof TypeError && /cut short or altered/.test(e.message));
  });

  it("a version 2 string (no check) is still read; cut inside its key at a whole base64 group it reads as the shorter key", async () => {
    const key = `trunc:${process.pid}:${++n}`;
    const s = await serialized(key);
    const v2 = s.replace(/^keel-lock:3:/, "keel-lock:2:").replace(/:[0-9a-f]{8}$/, "");
    const whole = restoreLock(v2);
    assert.equal(whole.key, key);
    const keyStart = v2.lastIndexOf(":") + 1;
    const cut = restoreLock(v2.slice(0, keyStart + 8));
    assert.equal(cut.key, "trunc:");
    assert.equal(await cut.release(), false, "it holds nothing on the shorter key");
    assert.equal(await whole.release(), true);
  });
});

describe("keys with lone surrogates", () => {
  it("lock() refuses them with a synchronous RangeError wherever they sit; a surrogate pair is a key like any other", async () => {
    setLockStore(new MemoryLockStore());
    const key = fresh("lone");
    for (const lone of ["a\uD800b", "a\uDC00b", "\uDBFF", "x\uDFFF", "\uDC00\uD800", "\uD800\uD800"]) {
      assert.throws(() => lock(`${key}:${lone}`), (e) => {
        assert.ok(e instanceof RangeError, `${JSON.stringify(lone)}: ${e?.name}`);
        assert.match(e.message, /lone surrogate/);
        return true;
      });
      assert.throws(() => lock(`${key}:${lone}`, 1_000), RangeError);
    }
    const pair = lock(`${key}:a\uD83D\uDE00b`, 60_000);
    assert.equal(await pair.acquire(), true);
    const restored = restoreLock(pair.serialize());
    assert.equal(restored.key, `${key}:a\uD83D\uDE00b`);
    assert.equal(await lock(`${key}:a\uFFFDb`).isLocked(), false);
    assert.equal(await restored.release(), true);
  });
});
