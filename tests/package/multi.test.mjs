// Several keys at once, `lock([k1, k2, …])`, from the installed package: all or none on the
// memory store and on JS stores (one with `acquireMany`), overlapping sets in opposite orders all finishing, a fence per
// key, losing any key is losing the lock, serialize/restoreLock, and every bad key set as a
// clear error. Needs nothing of Node beyond `process.pid` (the browser page shims it).
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { lock, restoreLock, setLockStore, MemoryLockStore, LockNotHeldError, LockUnavailableError } from "keel-lock";
import { mapLockStore, mapManyStore } from "./stores.mjs";
import { sleep, until } from "./waits.mjs";

let n = 0;
const fresh = (name) => `${name}:${process.pid}:${++n}`;

/** Keys each held by at most one caller at a time, or the test fails. */
function ledger() {
  const inside = new Set();
  return {
    enter(keys) {
      for (const k of keys) {
        assert.ok(!inside.has(k), `two holders of ${k} at once`);
        inside.add(k);
      }
    },
    leave(keys) {
      for (const k of keys) inside.delete(k);
    },
  };
}

// Each store, and how the test frees a key behind its holder's back (an operator, an expiry).
const STORES = [
  ["the memory store", () => new MemoryLockStore(), (store, key) => store.forceRelease(key)],
  ["a JS store that only polls", () => Object.assign(mapLockStore((rows = new Map())), { rows }), (store, key) => store.rows.delete(key)],
  ["a JS store that takes a set in one step (acquireMany)", () => mapManyStore(), (store, key) => store.rows.delete(key)],
];
let rows;

for (const [name, makeStore, drop] of STORES) {
  describe(`lock([...keys]) on ${name}`, () => {
    it("overlapping sets taken in opposite orders all finish, never two holders of a key", async () => {
      setLockStore(makeStore());
      const [a, b, c] = [fresh("a"), fresh("b"), fresh("c")];
      const sets = [[a, b], [b, a], [c, b, a], [a, c], [b, c]];
      const book = ledger();
      const callers = Array.from({ length: 10 }, async (_, i) => {
        const keys = sets[i % sets.length];
        for (let round = 0; round < 4; round++) {
          const [ran] = await lock(keys, 10_000).run(
            async () => {
              book.enter(keys);
              await sleep(1);
              book.leave(keys);
            },
            { timeout: 20_000, retryDelay: 2 },
          );
          assert.equal(ran, true, `${keys} timed out`);
        }
      });
      await Promise.all(callers);
      for (const k of [a, b, c]) assert.equal(await lock(k).isLocked(), false, `${k} left held`);
    });

    it("a refused or timed-out acquisition leaves none of the keys held", async () => {
      setLockStore(makeStore());
      const keys = ["d", "a", "c", "b"].map(fresh);
      const sorted = [...keys].sort();
      const other = lock(sorted[2]);
      assert.equal(await other.acquire(), true);
      const all = lock(keys);
      assert.equal(await all.acquire(), false);
      for (const k of [sorted[0], sorted[1], sorted[3]]) assert.equal(await lock(k).isLocked(), false, `${k} left held`);
      assert.deepEqual(await all.runImmediately(() => "ran"), [false, undefined]);
      assert.deepEqual(await all.run(() => "ran", { timeout: 60, retryDelay: 5 }), [false, undefined]);
      for (const k of [sorted[0], sorted[1], sorted[3]]) assert.equal(await lock(k).isLocked(), false, `${k} left held after a timeout`);
      await assert.rejects(all.hold({ timeout: 20 }), LockUnavailableError);
      assert.equal(await all.isLocked(), true, "one of its keys is held by another");
      await other.release();
      assert.equal(await all.isLocked(), false);
    });

    it("each key keeps its own fence; fn gets them, and no fence for the set", async () => {
      setLockStore(makeStore());
      const [x, y] = [fresh("x"), fresh("y")];
      const before = lock(y);
      await before.acquire();
      const yFence = before.fence;
      await before.release();
      const both = lock([y, x]);
      assert.deepEqual(both.keys, [x, y].sort());
      assert.equal(both.fences, null, "not held: no fences");
      const [ran, seen] = await both.run(({ fence, fences }) => ({ fence, fences }));
      assert.equal(ran, true);
      assert.equal(seen.fence, null);
      if (seen.fences !== null) {
        assert.deepEqual(Object.keys(seen.fences).sort(), [x, y].sort());
        assert.ok(seen.fences[y] > yFence, "y's fence rises over its last holder's");
      } else {
        assert.equal(yFence, null, "fences for some keys but not others");
      }
    });

    it("losing any key is losing the lock: extend rejects and frees the others; the run's signal aborts", async () => {
      const store = makeStore();
      setLockStore(store);
      const [p, q] = [fresh("p"), fresh("q")];
      const both = lock([p, q], 5_000);
      assert.equal(await both.acquire(), true);
      assert.ok(await drop(store, q));
      await assert.rejects(both.extend(), LockNotHeldError);
      assert.equal(await lock(p).isLocked(), false, "p was not freed with the lost q");

      // A key that runs out inside run(): the signal aborts with LockNotHeldError.
      const short = lock([fresh("s1"), fresh("s2")], 80);
      const [ran, reason] = await short.run(async ({ signal }) => {
        await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
        return signal.reason;
      });
      assert.equal(ran, true);
      assert.ok(reason instanceof LockNotHeldError, String(reason));
    });

    it("autoExtend keeps every key past its TTL; release frees them all", async () => {
      setLockStore(makeStore());
      const keys = [fresh("m"), fresh("n")];
      // Extended every 50 ms: a stall of over a second between two extends is survived.
      const ttl = 1_200;
      const [ran] = await lock(keys, ttl).run(
        async ({ signal }) => {
          await sleep(ttl + 100); // granted before fn started: without the extends, free by now
          assert.equal(signal.aborted, false);
          for (const k of keys) assert.equal(await lock(k).isLocked(), true, `${k} ran out`);
        },
        { autoExtend: { every: 50 } },
      );
      assert.equal(ran, true);
      for (const k of keys) assert.equal(await lock(k).isLocked(), false, `${k} not released`);
    });

    it("serialize / restoreLock carry every key; a cut or edited string is refused", async () => {
      setLockStore(makeStore());
      const keys = [fresh("u"), fresh("v"), fresh("w")];
      const held = lock(keys);
      assert.throws(() => held.serialize(), LockNotHeldError);
      assert.equal(await held.acquire(), true);
      const text = held.serialize();
      const back = restoreLock(text);
      assert.deepEqual(back.keys, [...keys].sort());
      assert.deepEqual(back.fences, held.fences);
      assert.equal(await back.release(), true);
      for (const k of keys) assert.equal(await lock(k).isLocked(), false);
      assert.throws(() => restoreLock(text.slice(0, text.lastIndexOf(","))), TypeError);
      assert.throws(() => restoreLock(text.replace(":3:", ":2:")), TypeError);
    });
  });
}

describe("lock([...keys]): bad key sets and options", () => {
  it("an empty array, more than 64 keys, a repeated key or a bad key is a clear error", () => {
    assert.throws(() => lock([]), RangeError);
    assert.throws(() => lock(Array.from({ length: 65 }, (_, i) => `k${i}`)), RangeError);
    assert.ok(lock(Array.from({ length: 64 }, (_, i) => `k${i}`)));
    assert.throws(() => lock(["a", "b", "a"]), { name: "TypeError", message: /"a" is given twice/ });
    assert.throws(() => lock(["a", 3]), TypeError);
    assert.throws(() => lock(["a", ""]), RangeError);
    assert.throws(() => lock(["a", "b"], -1), RangeError);
  });

  it("bad options and a non-function reject before any key is taken", async () => {
    setLockStore(new MemoryLockStore());
    const keys = [fresh("o1"), fresh("o2")];
    const both = lock(keys);
    await assert.rejects(both.run("nope"), TypeError);
    await assert.rejects(both.run(() => 1, { timeout: -5 }), RangeError);
    await assert.rejects(both.acquire({ retryDelay: "x" }), TypeError);
    await assert.rejects(both.run(() => 1, { permits: 2 }), TypeError);
    for (const k of keys) assert.equal(await lock(k).isLocked(), false);
  });

  it("keys are taken in code-point order, as the Rust core sorts them", () => {
    // U+FF21 (a BMP letter) sorts before U+1F600 (an emoji, two UTF-16 units from U+D83D) by code
    // point, though not by UTF-16 unit.
    assert.deepEqual(lock(["\u{1F600}", "\uFF21", "a"]).keys, ["a", "\uFF21", "\u{1F600}"]);
  });

  it("an abort while waiting for a later key frees the keys taken", async () => {
    setLockStore(new MemoryLockStore());
    const [a, b] = [fresh("ab1"), fresh("ab2")];
    const holder = lock(b);
    await holder.acquire();
    const controller = new AbortController();
    const waiting = lock([a, b]).run(() => 1, { timeout: 5_000, signal: controller.signal });
    await sleep(20);
    controller.abort(new Error("stop"));
    await assert.rejects(waiting, /stop/);
    assert.equal(await lock(a).isLocked(), false, "a left held after the abort");
    await holder.release();
  });
});

describe("lock([...keys]) over a store's acquireMany", () => {
  it("an uncontended run or acquire is one acquireMany, each key granted to its own handle with its fence", async () => {
    const store = mapManyStore();
    setLockStore(store);
    const keys = [fresh("m2"), fresh("m1"), fresh("m3")];
    const all = lock(keys);
    const [ran, fences] = await all.run(({ fences }) => fences);
    assert.equal(ran, true);
    assert.deepEqual(store.calls, { acquire: 0, acquireMany: 1, release: 3 });
    assert.deepEqual(Object.keys(fences), [...keys].sort());
    assert.ok(Object.values(fences).every((f) => Number.isInteger(f) && f >= 1));
    for (const k of keys) assert.equal(await lock(k).isLocked(), false, `${k} not released`);

    assert.equal(await all.acquire(), true);
    assert.equal(store.calls.acquireMany, 2);
    // Each key's row is its own handle's: released by its own owner token, one by one.
    const owners = new Set([...store.rows.values()].map((row) => row.owner));
    assert.equal(owners.size, 3);
    assert.equal(await all.release(), true);
    assert.equal(store.rows.size, 0);
  });

  it("refused in one step: none held; with a timeout, the keys are then waited for one by one", async () => {
    const store = mapManyStore();
    setLockStore(store);
    const [a, b] = [fresh("r1"), fresh("r2")];
    const blocker = lock(b);
    assert.equal(await blocker.acquire(), true);
    const both = lock([a, b]);
    assert.deepEqual(await both.runImmediately(() => 1), [false, undefined]);
    assert.equal(store.calls.acquireMany, 1);
    assert.equal(await lock(a).isLocked(), false, "a held after a refused step");
    setTimeout(() => blocker.release(), 40);
    const [ran] = await both.run(() => 1, { timeout: 5_000, retryDelay: 5 });
    assert.equal(ran, true);
    assert.ok(store.calls.acquire >= 2, "the wait takes the keys one by one");
  });

  it("null (not one step for this set) takes the keys one by one from then on", async () => {
    const store = mapManyStore();
    store.acquireMany = async () => {
      store.calls.acquireMany++;
      return null;
    };
    setLockStore(store);
    const both = lock([fresh("n1"), fresh("n2")]);
    assert.deepEqual(await both.run(() => "ran"), [true, "ran"]);
    assert.deepEqual(await both.run(() => "again"), [true, "again"]);
    assert.equal(store.calls.acquireMany, 1, "asked once");
    assert.equal(store.calls.acquire, 4);
  });

  it("an acquireMany that throws or answers nonsense rejects, and leaves nothing held", async () => {
    const store = mapManyStore();
    setLockStore(store);
    const keys = [fresh("e1"), fresh("e2")];
    const real = store.acquireMany;
    store.acquireMany = async () => {
      throw new Error("connection reset");
    };
    await assert.rejects(lock(keys).run(() => 1), /connection reset/);
    store.acquireMany = async (...args) => [(await real(...args))[0]];
    await assert.rejects(lock(keys).acquire(), { name: "TypeError", message: /acquireMany must answer false, null or an array of 2/ });
    // Whatever the nonsense answer granted is given back, long before the keys' 30 s TTL.
    for (const k of keys) await until(async () => !(await lock(k).isLocked()), `${k} left held`, { withinMs: 10_000 });
  });

  it("an answer that lands after the TTL is released, key by key", async () => {
    const store = mapManyStore();
    const real = store.acquireMany;
    store.acquireMany = async (...args) => {
      const granted = await real(...args);
      await sleep(150);
      return granted;
    };
    setLockStore(store);
    const keys = [fresh("l1"), fresh("l2")];
    await assert.rejects(lock(keys, 60).acquire(), { name: "LockStoreTimeoutError" });
    // The grant lands 150 ms after the call and is released: its rows go (the Map store keeps
    // a row, expired or not, until a call about its key).
    await until(() => store.rows.size === 0, "a late grant stayed held", { withinMs: 10_000 });
  });

  it("a store error while the keys are held still releases every key after run", async () => {
    const store = mapManyStore();
    setLockStore(store);
    const keys = [fresh("f1"), fresh("f2")];
    await assert.rejects(
      lock(keys).run(() => {
        throw new Error("task failed");
      }),
      /task failed/,
    );
    assert.equal(store.rows.size, 0);
    const [ran, seen] = await lock(keys, 70).run(async ({ signal }) => {
      await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
      return signal.reason;
    });
    assert.equal(ran, true);
    assert.ok(seen instanceof LockNotHeldError, String(seen));
  });
});
