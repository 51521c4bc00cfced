// Lock events (`onLockEvent`): what each run, acquire, release and extend came to — a grant and
// how it came, a refusal, a timeout, an abort, a loss, a store's error — told once, in order, on
// the memory store and on stores written in JS (one that polls, one with its own queue); none
// while nobody listens; a throwing listener changes nothing.
import { describe, it, beforeEach, afterEach } from "node:test";
import assert from "node:assert/strict";
import { lock, semaphore, readLock, onLockEvent, setLockStore, MemoryLockStore, LockNotHeldError } from "keel-lock";
import { mapLockStore } from "./stores.mjs";

/** A Map store that keeps its own FIFO queue: `acquireOrWait` resolves at the hand-over. */
function queueingStore() {
  const inner = mapLockStore();
  const queues = new Map();
  let fence = 0;
  const grant = async (key, owner, ttlMs) => ((await inner.acquire(key, owner, ttlMs)) ? { fence: ++fence } : false);
  const handOver = async (key) => {
    const queue = queues.get(key);
    const next = queue?.shift();
    if (next === undefined) return;
    const granted = await grant(key, next.owner, next.ttlMs);
    next.resolve({ fence: granted.fence, waitedMs: Math.max(1, Math.round(performance.now() - next.since)) });
  };
  return {
    ...inner,
    acquire: grant,
    async acquireOrWait(key, owner, ttlMs, waitMs) {
      const granted = await grant(key, owner, ttlMs);
      if (granted || waitMs === 0) return granted;
      return new Promise((resolve) => {
        const entry = { owner, ttlMs, resolve, since: performance.now() };
        if (!queues.has(key)) queues.set(key, []);
        queues.get(key).push(entry);
        setTimeout(() => {
          const queue = queues.get(key);
          const at = queue.indexOf(entry);
          if (at >= 0) {
            queue.splice(at, 1);
            resolve(false);
          }
        }, waitMs);
      });
    },
    async withdraw(key, owner) {
      const queue = queues.get(key) ?? [];
      const at = queue.findIndex((entry) => entry.owner === owner);
      if (at >= 0) queue.splice(at, 1)[0].resolve(false);
      return inner.release(key, owner);
    },
    async release(key, owner) {
      const freed = await inner.release(key, owner);
      if (freed) await handOver(key);
      return freed;
    },
  };
}

const STORES = {
  memory: { make: () => new MemoryLockStore(), name: "MemoryLockStore", waitVia: "hand-over" },
  "js, polled": { make: () => mapLockStore(), name: "LockStore", waitVia: "poll" },
  "js, own queue": { make: queueingStore, name: "LockStore", waitVia: "hand-over" },
};

/** Records every lock event until `stop()`. */
function record() {
  const events = [];
  const stop = onLockEvent((event) => events.push(event));
  return { events, stop, types: () => events.map((e) => e.type) };
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

for (const [name, { make, name: storeName, waitVia }] of Object.entries(STORES)) {
  describe(`lock events on the ${name} store`, () => {
    let recording;
    beforeEach(() => {
      setLockStore(make());
      recording = record();
    });
    afterEach(() => recording.stop());

    it("an uncontended run: run, granted at once with its fence, released with its hold time", async () => {
      const [ran, value] = await lock("k").run(async ({ fence }) => fence ?? "none");
      assert.equal(ran, true);
      assert.deepEqual(recording.types(), ["run", "granted", "released"]);
      const [run, granted, released] = recording.events;
      assert.equal(run.key, "k");
      assert.equal(run.store, storeName);
      assert.equal(run.kind, "lock");
      assert.equal(granted.via, "immediate");
      assert.equal(granted.fence, value === "none" ? null : value);
      assert.ok(granted.waitedMs >= 0);
      assert.ok(released.heldMs >= 0);
      assert.equal(released.error, undefined);
      assert.equal(new Set(recording.events.map((e) => e.attempt)).size, 1);
    });

    it("a contended run waits, then is granted the way its store hands keys over", async () => {
      const holder = lock("k", 5_000);
      assert.equal(await holder.acquire(), true);
      const waiting = lock("k", 5_000).run(() => "mine", { timeout: 5_000, retryDelay: 20 });
      await sleep(80);
      await holder.release();
      assert.deepEqual(await waiting, [true, "mine"]);
      const granted = recording.events.filter((e) => e.type === "granted");
      assert.equal(granted.length, 2);
      assert.equal(granted[0].via, "immediate");
      assert.equal(granted[1].via, waitVia);
      assert.ok(granted[1].waitedMs >= 50, `waited ${granted[1].waitedMs} ms`);
      // The holder's release and the waiter's grant settle in the same turn, in either order.
      assert.deepEqual(recording.types().slice(0, 3), ["acquire", "granted", "run"]);
      assert.deepEqual(recording.types().slice(3).sort(), ["granted", "released", "released"]);
      assert.equal(recording.types().at(-1), "released");
      const released = recording.events.filter((e) => e.type === "released");
      assert.equal(released[0].fence, granted[0].fence);
      assert.equal(released[1].fence, granted[1].fence);
    });

    it("a refusal, and a wait that times out, each say so", async () => {
      const holder = lock("k", 5_000);
      await holder.acquire();
      assert.deepEqual(await lock("k").runImmediately(() => 1), [false, undefined]);
      assert.deepEqual(await lock("k").run(() => 1, { timeout: 60, retryDelay: 10 }), [false, undefined]);
      assert.equal(await lock("k").acquire({ timeout: 30, retryDelay: 10 }), false);
      await holder.release();
      const ends = recording.events.filter((e) => e.type !== "granted" && e.type !== "acquire" && e.type !== "run");
      assert.deepEqual(ends.map((e) => e.type), ["refused", "timed-out", "timed-out", "released"]);
      assert.ok(ends[1].waitedMs >= 50);
    });

    it("an aborted wait is told as aborted, with no grant", async () => {
      const holder = lock("k", 5_000);
      await holder.acquire();
      const controller = new AbortController();
      const waiting = lock("k").run(() => 1, { timeout: 5_000, retryDelay: 10, signal: controller.signal });
      setTimeout(() => controller.abort(new Error("shutting down")), 30);
      await assert.rejects(waiting, /shutting down/);
      await holder.release();
      const aborted = recording.events.filter((e) => e.type === "aborted");
      assert.equal(aborted.length, 1);
      assert.equal(aborted[0].error.message, "shutting down");
      assert.equal(recording.events.filter((e) => e.type === "granted").length, 1); // the holder's
    });

    it("fn's error: released with the error; the run rejects with it", async () => {
      await assert.rejects(lock("k").run(() => Promise.reject(new Error("task failed"))), /task failed/);
      assert.deepEqual(recording.types(), ["run", "granted", "released"]);
      assert.equal(recording.events[2].error.message, "task failed");
    });

    it("release and extend are told; a lost hold's extend is told as lost", async () => {
      const l = lock("k", 60_000);
      await l.acquire();
      await l.extend(80); // a hold of 80 ms from here on
      await sleep(150);
      await assert.rejects(l.extend(), LockNotHeldError);
      assert.equal(await l.release(), false);
      const steps = recording.events.slice(2);
      assert.deepEqual(steps.map((e) => e.type), ["extended", "lost", "release-refused"]);
      assert.equal(steps[1].operation, "extend");
      assert.ok(steps[1].reason instanceof LockNotHeldError);
      for (const e of steps) assert.ok(e.durationMs >= 0);
    });

    it("a run whose hold is lost while fn runs is told lost, with the reason, then released", async () => {
      const l = lock("k", 80);
      const [ran] = await l.run(async ({ signal }) => {
        await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
      });
      assert.equal(ran, true);
      const types = recording.types();
      assert.deepEqual(types.slice(0, 3), ["run", "granted", "lost"]);
      assert.ok(recording.events[2].reason instanceof LockNotHeldError);
    });
  });
}

describe("lock events, whatever the store", () => {
  beforeEach(() => setLockStore(new MemoryLockStore()));

  it("nothing is told while nobody listens, and nothing after the listener is removed", async () => {
    const seen = [];
    await lock("k").run(() => 1);
    const stop = onLockEvent((e) => seen.push(e.type));
    await lock("k").run(() => 1);
    stop();
    await lock("k").run(() => 1);
    await lock("k").acquire().then(() => lock("k").release());
    assert.deepEqual(seen, ["run", "granted", "released"]);
  });

  it("a store's error is told as error, and the run rejects with it", async () => {
    const broken = mapLockStore();
    broken.acquire = async () => {
      throw new Error("connection refused");
    };
    setLockStore(broken);
    const { events, stop } = record();
    try {
      await assert.rejects(lock("k").run(() => 1), /connection refused/);
    } finally {
      stop();
    }
    assert.deepEqual(events.map((e) => e.type), ["run", "error"]);
    assert.equal(events[1].error.message, "connection refused");
  });

  it("a throwing listener is reported on the console and changes nothing; the others still hear", async () => {
    const heard = [];
    const logged = [];
    const error = console.error;
    console.error = (...args) => logged.push(args);
    const stopBad = onLockEvent(() => {
      throw new Error("listener bug");
    });
    const stopGood = onLockEvent((e) => heard.push(e.type));
    try {
      assert.deepEqual(await lock("k").run(() => 7), [true, 7]);
    } finally {
      stopBad();
      stopGood();
      console.error = error;
    }
    assert.deepEqual(heard, ["run", "granted", "released"]);
    assert.equal(logged.length, 3);
    assert.equal(logged[0][1].message, "listener bug");
  });

  it("onLockEvent takes only a function", () => {
    assert.throws(() => onLockEvent("log"), TypeError);
    assert.throws(() => onLockEvent(), TypeError);
  });

  it("a semaphore, a read lock and a set of keys are told as one call each, with their kind and keys", async () => {
    const { events, stop } = record();
    try {
      await semaphore("pool", 2).run(() => 1);
      await readLock("doc").run(() => 1);
      await lock(["b", "a"]).run(() => 1);
    } finally {
      stop();
    }
    assert.deepEqual(events.map((e) => e.type), ["run", "granted", "released", "run", "granted", "released", "run", "granted", "released"]);
    assert.equal(events[0].kind, "semaphore");
    assert.equal(events[3].kind, "read");
    assert.deepEqual(events[6].key, ["a", "b"]);
  });

  it("a lock taken inside fn is told as its own call, nested in the outer one's", async () => {
    const { events, stop } = record();
    try {
      await lock("outer").run(() => lock("inner").run(() => 1));
    } finally {
      stop();
    }
    assert.deepEqual(
      events.map((e) => `${e.type} ${e.key}`),
      ["run outer", "granted outer", "run inner", "granted inner", "released inner", "released outer"],
    );
  });

  it("a listener's runInside is wrapped around fn (how a tracer makes its span current)", async () => {
    const order = [];
    const stop = onLockEvent((e) => {
      if (e.type === "run") {
        e.runInside = (call) => {
          order.push("enter");
          const out = call();
          order.push("leave");
          return out;
        };
      }
    });
    try {
      await lock("k").run(() => order.push("fn"));
    } finally {
      stop();
    }
    assert.deepEqual(order, ["enter", "fn", "leave"]);
  });
});
