// The Web Locks API's request options, as keel-lock takes them: `ifAvailable` (take the key
// only if it is free now) and `steal` (free it whoever holds it, then take it), on a lock, a
// set of keys and `hold`, and refused clearly where they make no sense.
import { describe, it, beforeEach } from "node:test";
import assert from "node:assert/strict";
import { lock, readLock, semaphore, setLockStore, LockNotHeldError, LockUnavailableError } from "keel-lock";
import { STORES, mapLockStore } from "./stores.mjs";

/** The Map store plus the forceRelease a store needs for `steal`. */
function forcingMapStore() {
  const rows = new Map();
  const store = mapLockStore(rows);
  store.forceRelease = async (key) => rows.delete(key);
  return store;
}

const stores = { memory: STORES.memory, "js (Map, async, forceRelease)": forcingMapStore };

for (const [name, makeStore] of Object.entries(stores)) {
  describe(`Web Locks options on the ${name} store`, () => {
    beforeEach(() => setLockStore(makeStore()));

    it("ifAvailable: runs on a free key, and gives up at once on a held one", async () => {
      assert.deepEqual(await lock("k").run(() => 1, { ifAvailable: true }), [true, 1]);
      const holder = lock("k");
      assert.equal(await holder.acquire(), true);
      let ran = false;
      const started = performance.now();
      assert.deepEqual(await lock("k").run(() => (ran = true), { ifAvailable: true, retryDelay: 10 }), [false, undefined]);
      // A caller that waited would wait for the holder, who keeps the key for its 30 s TTL.
      assert.ok(performance.now() - started < 15_000, "it waited for the holder");
      assert.equal(ran, false);
      assert.equal(await lock("k").acquire({ ifAvailable: true }), false);
      await assert.rejects(lock("k").hold({ ifAvailable: true }), LockUnavailableError);
      // ifAvailable: false is no request at all: the usual options apply.
      assert.equal(await lock("k").acquire({ ifAvailable: false }), false);
      await holder.release();
      assert.equal(await lock("k").acquire({ ifAvailable: true, timeout: 0 }), true);
    });

    it("steal: takes a held key; the old holder's extend finds it lost, and its release is refused", async () => {
      const victim = lock("s", 30_000);
      assert.equal(await victim.acquire(), true);
      const thief = lock("s", 30_000);
      const [ran, fence] = await thief.run((context) => context.fence, { steal: true });
      assert.equal(ran, true);
      if (fence !== null) assert.ok(fence > 0);
      await assert.rejects(victim.extend(), LockNotHeldError);
      assert.equal(await victim.release(), false);
      assert.equal(await lock("s").isLocked(), false);
    });

    it("steal through acquire and hold, and on a free key", async () => {
      const first = await lock("h").hold({ steal: true });
      assert.equal(await first.isLocked(), true);
      const second = lock("h");
      assert.equal(await second.acquire({ steal: true }), true);
      await assert.rejects(first.extend(), LockNotHeldError);
      await second.release();
    });

    it("steal on a set of keys frees every key, then takes them all", async () => {
      const a = lock("set-a");
      const b = lock("set-b");
      assert.equal(await a.acquire(), true);
      assert.equal(await b.acquire(), true);
      const [ran] = await lock(["set-a", "set-b"]).run(() => undefined, { steal: true });
      assert.equal(ran, true);
      await assert.rejects(a.extend(), LockNotHeldError);
      await assert.rejects(b.extend(), LockNotHeldError);
    });

    it("refused with a TypeError, before anything is taken: bad values and combinations", async () => {
      const l = lock("bad");
      await assert.rejects(l.run(() => 1, { ifAvailable: "yes" }), /options\.ifAvailable must be a boolean/);
      await assert.rejects(l.acquire({ steal: 1 }), (e) => e instanceof TypeError && /options\.steal must be a boolean/.test(e.message));
      await assert.rejects(l.run(() => 1, { ifAvailable: true, steal: true }), (e) => e instanceof TypeError && /cannot be combined/.test(e.message));
      await assert.rejects(l.run(() => 1, { ifAvailable: true, timeout: 100 }), (e) => e instanceof TypeError && /never waits/.test(e.message));
      await assert.rejects(lock(["bad-a", "bad-b"]).run(() => 1, { steal: "please" }), TypeError);
      assert.equal(await l.isLocked(), false);
    });
  });
}

describe("steal is for keys held alone", () => {
  beforeEach(() => setLockStore(STORES.memory()));

  it("a semaphore or a read lock cannot steal (TypeError), and nothing is freed", async () => {
    const permit = semaphore("pool", 2);
    assert.equal(await permit.acquire(), true);
    await assert.rejects(semaphore("pool", 2).run(() => 1, { steal: true }), (e) => e instanceof TypeError && /cannot steal/.test(e.message));
    await assert.rejects(readLock("doc").acquire({ steal: true }), TypeError);
    assert.equal(await lock("pool").isLocked(), true);
    await permit.release();
  });
});
