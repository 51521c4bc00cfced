// The hold's watcher, per store: what `autoExtend` (the run option and the method) does to a
// hold, what a run's context signal reports and why, and that no watcher outlives what it
// watches. The loss scenarios of holding.test.mjs (an outage, a force-release, no unhandled
// rejection) are not repeated here.
import { describe, it, beforeEach } from "node:test";
import { createRequire } from "node:module";
import assert from "node:assert/strict";
import { lock, setLockStore, MemoryLockStore, LockNotHeldError } from "keel-lock";
import { STORES, recording, mapLockStore } from "./stores.mjs";
import { stopwatch } from "./waits.mjs";

const require = createRequire(import.meta.url);
const glue = require("./node_modules/keel-lock/dist/node/keel_lock.js");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const aborted = (signal) => new Promise((r) => signal.addEventListener("abort", r, { once: true }));
let n = 0;
const fresh = () => `watching:${process.pid}:${++n}`;
/** Watchers still running, when the build reports them (older builds watch inside the wasm). */
const watchers = () => (typeof glue.__kWatchers === "function" ? glue.__kWatchers() : 0);

for (const [storeName, makeStore] of Object.entries(STORES)) {
  describe(`the hold's watcher on the ${storeName} store`, () => {
    beforeEach(() => setLockStore(makeStore()));

    it("without autoExtend, a context signal read in fn aborts when the TTL passes, saying so", async () => {
      const key = fresh();
      const before = watchers();
      const [ran, reason] = await lock(key, 60).run(async (ctx) => {
        const why = await aborted(ctx.signal).then(() => ctx.signal.reason);
        return why;
      });
      assert.equal(ran, true);
      assert.ok(reason instanceof LockNotHeldError);
      assert.equal(reason.key, key);
      assert.match(reason.message, /was lost: its TTL passed/);
      assert.equal(watchers(), before, "the watcher went with the loss");
    });

    it("a signal never read watches nothing, and one read after fn returned is not aborted", async () => {
      let late;
      const before = watchers();
      assert.deepEqual(await lock(fresh(), 40).run((ctx) => ((late = ctx), 1)), [true, 1]);
      await sleep(80);
      assert.equal(late.signal.aborted, false);
      assert.equal(watchers(), before);
    });

    it("fn releasing its own hold: the signal is not aborted later, with or without autoExtend, and the watcher goes", async () => {
      for (const options of [undefined, { autoExtend: { every: 20 } }]) {
        const before = watchers();
        const l = lock(fresh(), 200);
        const clock = stopwatch();
        const [ran, { signal, released, inTime }] = await l.run(async (ctx) => {
          const signal = ctx.signal;
          const released = await l.release();
          // Released inside the TTL: the hold was still there, so the release took it, and
          // nothing after it is a loss. (A machine stalled past the TTL lost it first.)
          const inTime = clock.within(200);
          await sleep(300); // past the old deadline, and several extend intervals
          return { signal, released, inTime };
        }, options);
        assert.equal(ran, true);
        assert.ok(released || !inTime, `the release inside the TTL was refused (${JSON.stringify(options)})`);
        assert.ok(!signal.aborted || !inTime, `aborted after the release (${JSON.stringify(options)})`);
        assert.equal(watchers(), before, `the watcher went (${JSON.stringify(options)})`);
      }
    });

    it("run({ autoExtend }) holds past the TTL, then the cap ends it with its own reason", async () => {
      const key = fresh();
      // Extended every 20 ms: a stall of over a second between two extends is survived.
      const ttl = 1_500;
      const cap = ttl + 400;
      const clock = stopwatch();
      const [, out] = await lock(key, ttl).run(
        async (ctx) => {
          await sleep(ttl + 100); // past the TTL: only extends keep it
          const heldMidway = await lock(key).isLocked();
          const capped = clock.past(cap); // the cap may have ended the hold by now
          const why = await aborted(ctx.signal).then(() => ctx.signal.reason);
          return { heldMidway, capped, message: why.message };
        },
        { autoExtend: { every: 20, maxHoldMs: cap } },
      );
      assert.ok(out.heldMidway || out.capped, "not held past the TTL, before the cap");
      assert.match(out.message, /was lost: it was held for its maximum hold time/);
      assert.equal(await lock(key).isLocked(), false, "released after the run");
    });

    it("run({ autoExtend }) stops extending when the run ends", async () => {
      const key = fresh();
      const before = watchers();
      assert.deepEqual(await lock(key, 60).run(() => sleep(30).then(() => "done"), { autoExtend: true }), [true, "done"]);
      assert.equal(watchers(), before);
      assert.equal(await lock(key).isLocked(), false);
    });

    it("bad autoExtend values are rejected before anything is taken", async () => {
      const key = fresh();
      await assert.rejects(lock(key).run(() => 1, { autoExtend: "yes" }), TypeError);
      await assert.rejects(lock(key).run(() => 1, { autoExtend: { every: -1 } }), RangeError);
      await assert.rejects(lock(key).run(() => 1, { autoExtend: { maxHoldMs: "5" } }), TypeError);
      assert.equal(await lock(key).isLocked(), false);
      assert.deepEqual(await lock(key).run(() => 2, { autoExtend: false }), [true, 2]);
    });

    it("autoExtend(): checks, keeps the hold alive, answers one context, and stops", async () => {
      const key = fresh();
      // Extended every 20 ms: a stall of over a second between two extends is survived.
      const ttl = 1_500;
      const l = lock(key, ttl);
      assert.throws(() => l.autoExtend({ every: 0 }), RangeError, "options first");
      assert.throws(() => l.autoExtend(), LockNotHeldError, "then the hold");
      assert.equal(l.signal, undefined);
      assert.equal(await l.acquire(), true);
      const context = l.autoExtend({ every: 20 });
      assert.equal(l.autoExtend(), context, "again while it runs: the same context");
      assert.equal(l.signal, context.signal);
      assert.equal(context.fence, l.fence);
      await sleep(ttl + 100);
      assert.equal(await l.isExpired(), false);
      assert.equal(await lock(key).acquire(), false, "still held past its TTL");
      await l.stopAutoExtend();
      assert.equal(l.signal, undefined);
      // A hold of 50 ms from here: an extend every 20 ms, were it still running, would keep it.
      await l.extend(50);
      await sleep(250);
      assert.equal(await l.isExpired(), true, "no extend after stopAutoExtend");
      assert.equal(context.signal.aborted, false, "stopping is not a loss");
    });

    it("release() stops autoExtend first; the key is free afterwards", async () => {
      const key = fresh();
      const before = watchers();
      const l = lock(key, 5_000);
      await l.acquire();
      l.autoExtend({ every: 10 });
      await sleep(35);
      assert.equal(await l.release(), true);
      assert.equal(watchers(), before);
      await sleep(40);
      assert.equal(await lock(key).isLocked(), false, "nothing extended after the release");
    });
  });
}

describe("a force-release", () => {
  it("aborts the kept hold's signal (memory store)", async () => {
    setLockStore(STORES.memory());
    const key = fresh();
    const l = lock(key, 5_000);
    await l.acquire();
    const context = l.autoExtend({ every: 20 });
    assert.equal(await lock(key).forceRelease(), true);
    await aborted(context.signal);
    assert.match(context.signal.reason.message, /was lost: the store no longer records this holder/);
    assert.equal(await l.release(), false);
  });
});

describe("an extend in flight during the watcher's stop", () => {
  it("if that extend is refused, the kept hold's signal still aborts", async () => {
    let refuse = false;
    const inner = STORES["js (Map, async)"]();
    setLockStore({
      ...inner,
      extend: async (...args) => {
        await sleep(40);
        return refuse ? false : inner.extend(...args);
      },
    });
    const l = lock(fresh(), 300);
    await l.acquire();
    const context = l.autoExtend({ every: 10 });
    await sleep(20); // the first extend is in flight
    refuse = true;
    await l.stopAutoExtend();
    assert.equal(context.signal.aborted, true);
    assert.match(context.signal.reason.message, /was lost/);
    assert.equal(await l.release(), false);
  });


  it("a run's release waits for it: the store sees the extend answered before the release", async () => {
    const { store, calls } = recording(STORES["js (Map, async)"]());
    const slowExtend = store.extend;
    store.extend = async (...args) => {
      await sleep(40);
      return slowExtend(...args);
    };
    const answered = [];
    const wrapped = {
      ...store,
      extend: (...args) => store.extend(...args).then((r) => (answered.push("extend"), r)),
      release: (...args) => (answered.push("release"), store.release(...args)),
    };
    setLockStore(wrapped);
    const key = fresh();
    const [ran] = await lock(key, 5_000).run(() => sleep(45), { autoExtend: { every: 30 } });
    assert.equal(ran, true);
    assert.deepEqual(answered, ["extend", "release"]);
    assert.ok(calls.some((c) => c.name === "extend"));
    assert.equal(await lock(key).isLocked(), false);
  });
});

describe("a run's hold that another hold of its handle replaced", () => {
  it("a run's hold force-released and then taken by the same handle's next run is lost: the first run's signal aborts", async () => {
    for (const options of [undefined, { autoExtend: { every: 50 } }]) {
      setLockStore(new MemoryLockStore());
      const key = fresh();
      const l = lock(key, 200);
      const clock = stopwatch();
      const first = l.run(async (ctx) => {
        const signal = ctx.signal;
        await sleep(300); // past the old deadline, and several extend intervals
        return signal;
      }, options);
      await sleep(5);
      // The handle is busy with the first run: this one waits in the store's queue.
      const second = l.run(() => "second", { timeout: 5_000 });
      await sleep(15);
      // The first run's hold is there to force-release unless its TTL ran out meanwhile (then
      // the queue handed the key to the second run at its expiry, as good for what follows).
      const forced = await lock(key).forceRelease();
      assert.ok(forced || clock.past(200), "nothing to force-release inside the first hold's TTL");
      assert.deepEqual(await second, [true, "second"]);
      const [ran, signal] = await first;
      assert.equal(ran, true);
      assert.equal(signal.aborted, true, JSON.stringify(options));
      assert.match(signal.reason.message, /was lost/);
    }
  });

  it("the same, with the signal read only after the newer hold came and went: aborted at once", async () => {
    setLockStore(new MemoryLockStore());
    const key = fresh();
    const l = lock(key, 5_000);
    let second;
    const first = l.run(async (ctx) => {
      await sleep(5);
      second = l.run(() => "second", { timeout: 5_000 }); // waits in the store's queue
      await sleep(15);
      assert.equal(await lock(key).forceRelease(), true);
      assert.deepEqual(await second, [true, "second"]);
      return ctx.signal; // read now, when nothing of the handle holds the key
    });
    const [ran, signal] = await first;
    assert.equal(ran, true);
    assert.equal(signal.aborted, true);
    assert.match(signal.reason.message, /was lost/);
  });

  it("fn releasing the run's hold and taking the key again before reading the signal: not aborted", async () => {
    for (const [storeName, makeStore] of Object.entries(STORES)) {
      setLockStore(makeStore());
      const l = lock(fresh(), 200);
      const clock = stopwatch();
      const [ran, { signal, released, inTime }] = await l.run(async (ctx) => {
        const released = await l.release();
        // Released inside the TTL: the hold was still there, so the release took it, and
        // nothing after it is a loss. (A machine stalled past the TTL lost it first.)
        const inTime = clock.within(200);
        assert.equal(await l.acquire(), true);
        const signal = ctx.signal;
        await sleep(250); // past the released hold's deadline
        return { signal, released, inTime };
      });
      assert.equal(ran, true);
      assert.ok(released || !inTime, `the release inside the TTL was refused (${storeName})`);
      assert.ok(!signal.aborted || !inTime, storeName);
      await l.release(); // the newer hold, expired by now too
    }
  });

  it("fn releasing the run's hold and taking the key again before the store answered the release: not aborted, nothing extended", async () => {
    const store = mapLockStore();
    const { release, extend } = store;
    let extends_ = 0;
    store.release = async (...args) => {
      const released = await release(...args); // the key is free from here
      await sleep(30);
      return released;
    };
    store.extend = (...args) => (extends_++, extend(...args));
    setLockStore(store);
    const l = lock(fresh(), 5_000);
    const [ran, signal] = await l.run(async (ctx) => {
      const signal = ctx.signal;
      const releasing = l.release();
      await sleep(5);
      assert.equal(await l.acquire(), true); // a newer hold, the release still unanswered
      assert.equal(await releasing, true);
      await sleep(60); // several extend intervals
      return signal;
    }, { autoExtend: { every: 20 } });
    assert.equal(ran, true);
    assert.equal(signal.aborted, false);
    assert.equal(extends_, 0);
    assert.equal(await l.release(), true);
  });
});
