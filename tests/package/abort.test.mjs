// `run()` and `acquire()` with `{ signal }`: an abort ends the wait for the lock — in the memory
// store's queue, in a JS store's retry pause, in a hand-over store's own queue — rejects with the
// signal's reason, and leaves nothing held or queued. Once `fn` runs, the signal no longer matters.
import { describe, it, beforeEach } from "node:test";
import assert from "node:assert/strict";
import { lock, setLockStore } from "keel-lock";
import { STORES, recording } from "./stores.mjs";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let n = 0;
const fresh = () => `abort:${process.pid}:${++n}`;

for (const [storeName, makeStore] of Object.entries(STORES)) {
  describe(`abort signals on the ${storeName} store`, () => {
    beforeEach(() => setLockStore(makeStore()));

    it("an already aborted signal starts nothing and rejects with its reason", async () => {
      const key = fresh();
      const reason = new Error("not any more");
      let ran = false;
      const l = lock(key);
      await assert.rejects(l.run(() => (ran = true), { signal: AbortSignal.abort(reason) }), (e) => e === reason);
      await assert.rejects(l.acquire({ timeout: 100, signal: AbortSignal.abort(reason) }), (e) => e === reason);
      assert.equal(ran, false);
      assert.equal(await l.isLocked(), false, "nothing was taken");
      assert.deepEqual(await l.run(() => "later"), [true, "later"], "the handle still works");
    });

    it("a signal without a reason rejects with an AbortError", async () => {
      const key = fresh();
      assert.equal(await lock(key).acquire(), true);
      const controller = new AbortController();
      Object.defineProperty(controller.signal, "reason", { value: undefined });
      const waiting = lock(key).run(() => 1, { timeout: 5_000, retryDelay: 10, signal: controller.signal });
      await sleep(20);
      controller.abort();
      await assert.rejects(waiting, (e) => e instanceof Error && e.name === "AbortError");
    });

    it("an abort while waiting ends the wait at once and leaves nothing held or queued", async () => {
      const key = fresh();
      const holder = lock(key);
      assert.equal(await holder.acquire(), true);
      const controller = new AbortController();
      let ran = false;
      const waiting = lock(key).run(() => (ran = true), { timeout: 10_000, retryDelay: 20, signal: controller.signal });
      const alsoWaiting = lock(key).acquire({ timeout: 10_000, retryDelay: 20, signal: controller.signal });
      await sleep(30);
      controller.abort(new Error("user left"));
      await assert.rejects(waiting, /user left/);
      await assert.rejects(alsoWaiting, /user left/);
      assert.equal(await holder.isLocked(), true, "the abort, not a grant or the timeout, ended the waits");
      assert.equal(ran, false);
      // The aborted waiters are gone: once the holder releases, the key is free, and the next
      // caller gets it straight away.
      assert.equal(await holder.release(), true);
      assert.equal(await lock(key).isLocked(), false);
      assert.deepEqual(await lock(key).run(() => "next", { timeout: 1_000 }), [true, "next"]);
    });

    it("once fn runs, an abort changes nothing", async () => {
      const key = fresh();
      const controller = new AbortController();
      const result = await lock(key).run(
        async (ctx) => {
          controller.abort(new Error("too late"));
          await sleep(5);
          return ctx.fence === null || ctx.fence >= 1;
        },
        { timeout: 100, signal: controller.signal },
      );
      assert.deepEqual(result, [true, true]);
      assert.equal(await lock(key).isLocked(), false, "the run released as usual");
    });

    it("options are checked in order: a bad timeout, then a signal that is not one", async () => {
      const l = lock(fresh());
      await assert.rejects(l.run(() => 1, { timeout: -1, signal: "nope" }), RangeError);
      await assert.rejects(l.run(() => 1, { signal: "nope" }), (e) => e instanceof TypeError && /signal/.test(e.message));
      await assert.rejects(l.acquire({ signal: { aborted: false } }), TypeError);
      assert.deepEqual(await l.run(() => "ok", { signal: new AbortController().signal }), [true, "ok"]);
    });
  });
}

describe("abort signals on a store that hands keys over", () => {
  /** A store whose acquireOrWait parks every waiter until withdraw, recording calls. */
  function parkingStore() {
    const rows = new Map();
    const parked = new Map();
    const calls = [];
    const store = {
      async acquire(key, owner) {
        calls.push(["acquire", key, owner]);
        if (rows.has(key)) return false;
        rows.set(key, owner);
        return true;
      },
      acquireOrWait(key, owner) {
        calls.push(["acquireOrWait", key, owner]);
        if (!rows.has(key)) {
          rows.set(key, owner);
          return Promise.resolve(true);
        }
        return new Promise((resolve) => parked.set(owner, resolve));
      },
      async withdraw(key, owner) {
        calls.push(["withdraw", key, owner]);
        parked.get(owner)?.(false);
        parked.delete(owner);
      },
      async release(key, owner) {
        calls.push(["release", key, owner]);
        if (rows.get(key) !== owner) return false;
        rows.delete(key);
        return true;
      },
      async extend(key, owner) {
        return rows.get(key) === owner;
      },
      async isLocked(key) {
        return rows.has(key);
      },
      async remainingTime(key) {
        return rows.has(key) ? 1_000 : null;
      },
    };
    return { store, calls, parked };
  }

  it("an abort while parked in the store withdraws from its queue, under the waiter's owner", async () => {
    const s = parkingStore();
    setLockStore(s.store);
    const key = fresh();
    assert.equal(await lock(key).acquire(), true);
    const controller = new AbortController();
    const waiting = lock(key).acquire({ timeout: 10_000, signal: controller.signal });
    await sleep(20);
    assert.equal(s.parked.size, 1);
    controller.abort(new Error("gone"));
    await assert.rejects(waiting, /gone/);
    const asked = s.calls.find((c) => c[0] === "acquireOrWait" && s.calls.indexOf(c) > 0);
    assert.deepEqual(s.calls.at(-1), ["withdraw", key, asked[2]]);
    assert.equal(s.parked.size, 0, "nothing is left in the store's queue");
  });

  it("a store without withdraw is asked to release instead", async () => {
    const s = parkingStore();
    delete s.store.withdraw;
    setLockStore(s.store);
    const key = fresh();
    assert.equal(await lock(key).acquire(), true);
    const controller = new AbortController();
    const waiting = lock(key).run(() => 1, { timeout: 10_000, signal: controller.signal });
    await sleep(20);
    controller.abort(new Error("gone"));
    await assert.rejects(waiting, /gone/);
    const asked = s.calls.filter((c) => c[0] === "acquireOrWait").at(-1);
    assert.deepEqual(s.calls.at(-1), ["release", key, asked[2]]);
  });

  it("a recording store sees no acquire after an abort during the retry pause", async () => {
    const { store, calls } = recording(STORES["js (Map, async)"]());
    setLockStore(store);
    const key = fresh();
    assert.equal(await lock(key).acquire(), true);
    const controller = new AbortController();
    const waiting = lock(key).acquire({ timeout: 10_000, retryDelay: 1_000, signal: controller.signal });
    await sleep(30);
    const before = calls.length;
    controller.abort(new Error("stop"));
    await assert.rejects(waiting, /stop/);
    await sleep(20);
    assert.equal(calls.length, before, "no store call after the abort");
  });
});
