// A JS store that hands keys over (`acquireOrWait` and `withdraw`, as the Durable Object store
// does): waiting callers queue in the store, which grants a freed key to the oldest of them, and
// the lock waits for that answer instead of polling `acquire`. These tests drive such a store
// through the public API: the order of hand-overs, the arguments the store is given, what its
// answers mean, and a store that does not answer.
import { describe, it, beforeEach } from "node:test";
import assert from "node:assert/strict";
import { MemoryLockStore, lock, setLockStore } from "keel-lock";
import { mapLockStore } from "./stores.mjs";
import { sleep, until } from "./waits.mjs";

let n = 0;
const fresh = () => `handing-over:${process.pid}:${++n}`;

/** A hand-over store: rows and per-key FIFO queues in Maps, every call recorded. */
function queueStore() {
  const rows = new Map();
  const base = mapLockStore(rows);
  const queues = new Map();
  const calls = [];
  let fence = 0;
  let waitsEnded = 0;
  const live = (key) => {
    const row = rows.get(key);
    if (row && row.expiresAt > Date.now()) return row;
    rows.delete(key);
    return undefined;
  };
  const grant = (key, owner, ttlMs) => {
    rows.set(key, { owner, expiresAt: Date.now() + ttlMs });
    return ++fence;
  };
  const handOver = (key) => {
    const queue = queues.get(key) ?? [];
    while (queue.length > 0 && !live(key)) {
      const w = queue.shift();
      clearTimeout(w.timer);
      w.resolve({ fence: grant(key, w.owner, w.ttlMs), waitedMs: Date.now() - w.since });
    }
  };
  const store = {
    async acquire(key, owner, ttlMs) {
      calls.push(["acquire", key, owner, ttlMs]);
      if (live(key)) return false;
      return { fence: grant(key, owner, ttlMs) };
    },
    acquireOrWait(key, owner, ttlMs, waitMs, pollMs) {
      calls.push(["acquireOrWait", key, owner, ttlMs, waitMs, pollMs]);
      if (!live(key) && !(queues.get(key)?.length > 0)) return Promise.resolve({ fence: grant(key, owner, ttlMs), waitedMs: 0 });
      return new Promise((resolve) => {
        const queue = queues.get(key) ?? [];
        queues.set(key, queue);
        const w = { owner, ttlMs, since: Date.now(), resolve };
        w.timer = setTimeout(() => {
          queue.splice(queue.indexOf(w), 1);
          waitsEnded++;
          resolve(false);
        }, waitMs);
        queue.push(w);
      });
    },
    async withdraw(key, owner) {
      calls.push(["withdraw", key, owner]);
    },
    async release(key, owner) {
      calls.push(["release", key, owner]);
      if (live(key)?.owner !== owner) return false;
      rows.delete(key);
      handOver(key);
      return true;
    },
    // Extends and inspections as the Map store over the same rows.
    extend: base.extend,
    isLocked: base.isLocked,
    remainingTime: base.remainingTime,
  };
  return { store, calls, queued: (key) => queues.get(key)?.length ?? 0, waitsEnded: () => waitsEnded };
}

describe("a JS store that hands keys over", () => {
  let s;
  beforeEach(() => {
    s = queueStore();
    setLockStore(s.store);
  });

  it("waiting runs are handed the key in the order they asked, each with its grant's fence", async () => {
    const key = fresh();
    const order = [];
    let release;
    const first = lock(key, 60_000).run(
      (ctx) =>
        new Promise((resolve) => {
          order.push(["first", ctx.fence]);
          release = resolve;
        }),
    );
    await sleep(5);
    const waiting = ["second", "third", "fourth"].map((name) =>
      lock(key, 5_000).run((ctx) => order.push([name, ctx.fence]), { timeout: 30_000, retryDelay: 50 }),
    );
    await until(() => s.queued(key) === 3, "the three wait in the store, not in a retry loop");
    release();
    assert.deepEqual(await first, [true, undefined]);
    const results = await Promise.all(waiting);
    assert.deepEqual(results.map((r) => r[0]), [true, true, true]);
    assert.deepEqual(order.map((o) => o[0]), ["first", "second", "third", "fourth"]);
    const fences = order.map((o) => o[1]);
    assert.ok(fences.every((f, i) => i === 0 || f > fences[i - 1]), `fences increase: ${fences}`);
    // Nobody polled acquire while waiting.
    assert.equal(s.calls.filter((c) => c[0] === "acquire").length, 1);
  });

  it("acquireOrWait gets the key, the owner, the TTL, the timeout and the retry delay", async () => {
    const key = fresh();
    const l = lock(key, 61_234);
    assert.equal(await l.acquire({ timeout: 700, retryDelay: 30 }), true);
    const call = s.calls.find((c) => c[0] === "acquireOrWait");
    assert.deepEqual([call[1], call[3], call[4], call[5]], [key, 61_234, 700, 30]);
    assert.match(call[2], /^[0-9a-f]{32}$/);
    assert.equal(l.fence, 1);
    // The hold is the handle's: release() uses the same owner.
    assert.equal(await l.release(), true);
    assert.deepEqual(s.calls.at(-1), ["release", key, call[2]]);
  });

  it("without a timeout the store is asked once, with acquire", async () => {
    const key = fresh();
    assert.equal(await lock(key).acquire(), true);
    assert.equal(await lock(key).acquire(), false);
    assert.deepEqual(s.calls.map((c) => c[0]), ["acquire", "acquire"]);
  });

  it("a wait the store ends with false is a refusal", async () => {
    const key = fresh();
    assert.equal(await lock(key).acquire(), true);
    assert.deepEqual(await lock(key).run(() => "never", { timeout: 60, retryDelay: 10 }), [false, undefined]);
    assert.equal(s.waitsEnded(), 1, "the store ended the wait, and the lock took its answer");
    assert.equal(s.queued(key), 0);
    assert.equal(await lock(key).acquire({ timeout: 30 }), false);
  });

  it("a wait the store answers false long before its end (its place was lost) queues again for what is left", async () => {
    const key = fresh();
    const holder = lock(key);
    assert.equal(await holder.acquire(), true);
    const queueing = s.store.acquireOrWait;
    const waits = [];
    s.store.acquireOrWait = (...args) => {
      waits.push(args[3]);
      if (waits.length === 1) return sleep(20).then(() => false); // as after a restart without persistence
      return queueing(...args);
    };
    setLockStore(s.store); // the store's methods are read when it is set
    const started = Date.now();
    const waiter = lock(key).run(() => "ran", { timeout: 20_000, retryDelay: 30 });
    await until(() => s.queued(key) === 1, "queued again after the early no");
    assert.equal(await holder.release(), true);
    assert.deepEqual(await waiter, [true, "ran"]);
    assert.equal(waits.length, 2);
    assert.equal(waits[0], 20_000);
    // The second wait is for what was left of the timeout after the first no and a pause.
    assert.ok(waits[1] <= 20_000 - 50 && waits[1] >= 20_000 - (Date.now() - started), `asked for ${waits[1]} ms`);
  });

  it("a handed-over acquire() is released, and the next waiter gets the key", async () => {
    const key = fresh();
    const a = lock(key);
    const b = lock(key);
    assert.equal(await a.acquire(), true);
    const bWaits = b.acquire({ timeout: 30_000 });
    await sleep(10);
    assert.equal(await a.release(), true);
    assert.equal(await bWaits, true);
    assert.equal(b.fence, 2);
    assert.equal(await b.isLocked(), true);
    assert.equal(await b.release(), true);
    assert.equal(await b.isLocked(), false);
  });
});

describe("what a hand-over store answers", () => {
  const store = (acquireOrWait, extra = {}) => {
    const s = queueStore();
    s.store.acquireOrWait = acquireOrWait;
    Object.assign(s.store, extra);
    setLockStore(s.store);
    return s;
  };

  it("{ fence: null, waitedMs } is an unfenced grant; true is one too", async () => {
    store(async () => ({ fence: null, waitedMs: 5 }));
    assert.deepEqual(await lock(fresh()).run((ctx) => ctx.fence, { timeout: 100 }), [true, null]);
    store(async () => true);
    assert.deepEqual(await lock(fresh()).run((ctx) => ctx.fence, { timeout: 100 }), [true, null]);
    store(async () => ({ fence: 7 }));
    assert.deepEqual(await lock(fresh()).run((ctx) => ctx.fence, { timeout: 100 }), [true, 7]);
  });

  for (const [what, answer] of [
    ["a string", "yes"],
    ["a number", 1],
    ["null", null],
    ["a negative waitedMs", { fence: 1, waitedMs: -1 }],
    ["a fraction of a fence", { fence: 1.5, waitedMs: 0 }],
    ["no fence at all", { waitedMs: 3 }],
  ]) {
    it(`${what} is a TypeError naming acquireOrWait()`, async () => {
      store(async () => answer);
      let ran = false;
      await assert.rejects(
        lock(fresh()).run(() => (ran = true), { timeout: 100 }),
        (e) => e instanceof TypeError && e.message.includes("acquireOrWait()"),
      );
      assert.equal(ran, false);
    });
  }

  it("a store that throws: the same error", async () => {
    const boom = new Error("queue is down");
    store(() => {
      throw boom;
    });
    await assert.rejects(lock(fresh()).acquire({ timeout: 100 }), (e) => e === boom);
    store(async () => {
      throw boom;
    });
    await assert.rejects(lock(fresh()).run(() => 1, { timeout: 100 }), (e) => e === boom);
  });

  it("a store that does not answer: refused after the wait and one retry delay; a late grant is released", async () => {
    let grantLate;
    let asked;
    let answered = false;
    const s = store(
      (key, owner) =>
        new Promise((resolve) => {
          asked = owner;
          grantLate = () => {
            answered = true;
            resolve({ fence: 9, waitedMs: 0 });
          };
        }),
    );
    const key = fresh();
    assert.deepEqual(await lock(key).run(() => "never", { timeout: 80, retryDelay: 40 }), [false, undefined]);
    assert.equal(answered, false, "refused while the store's call was still unanswered");
    assert.equal(s.calls.filter((c) => c[0] === "acquire").length, 0, "and without polling acquire instead");
    grantLate();
    await until(() => s.calls.some((c) => c[0] === "release"), "the grant that came too late is given back");
    assert.deepEqual(s.calls.filter((c) => c[0] === "release"), [["release", key, asked]]);
  });
});

// The memory store's own queue: one waiter per key keeps the queue's only timer, for the
// earliest of the holder's expiry and every waiter's deadline. Each test here would hang until
// its own timeout if that timer were lost or set too late.
describe("the memory store's queue and its timer", () => {
  beforeEach(() => setLockStore(new MemoryLockStore()));

  it("a holder that never releases: at each TTL the oldest waiter takes the key, in arrival order", { timeout: 10_000 }, async () => {
    const key = fresh();
    assert.equal(await lock(key, 40).acquire(), true); // never released
    const order = [];
    const waiters = [0, 1, 2].map((i) =>
      lock(key, 40)
        .acquire({ timeout: 60_000 }) // kept until its own TTL passes
        .then((ok) => order.push([i, ok])),
    );
    await Promise.all(waiters);
    assert.deepEqual(order, [[0, true], [1, true], [2, true]]);
    await sleep(60);
    assert.equal(await lock(key).isLocked(), false);
  });

  it("a newcomer whose timeout ends before the timer is due times out on time, and the queue behind it still moves", { timeout: 10_000 }, async () => {
    const key = fresh();
    const holder = lock(key, 60_000);
    assert.equal(await holder.acquire(), true);
    const patient = lock(key).run(() => "patient", { timeout: 60_000 }); // keeps the timer, due in 60 s
    await sleep(5);
    assert.deepEqual(await lock(key).run(() => "hasty", { timeout: 30 }), [false, undefined]);
    assert.equal(await holder.release(), true);
    assert.deepEqual(await patient, [true, "patient"]);
  });

  it("the waiter keeping the timer and the newest one time out together: the one between them keeps the timer and takes the key at the holder's TTL", { timeout: 10_000 }, async () => {
    // The newest waiter, told to take the timer over as the first leaves, has timed out too
    // (both deadlines fall in the same ms, as they do for calls made within one ms). On three
    // keys at once, so a run whose deadlines happen to straddle a ms still checks the rest.
    const one = async () => {
      const key = fresh();
      // Never released; its TTL outlasts the two short waits by far.
      assert.equal(await lock(key, 1_500).acquire(), true);
      const first = lock(key).run(() => "first", { timeout: 50 });
      const middle = lock(key).run(() => "middle", { timeout: 60_000 });
      const last = lock(key).run(() => "last", { timeout: 50 });
      return Promise.all([first, middle, last]);
    };
    for (const ended of await Promise.all([one(), one(), one()])) {
      assert.deepEqual(ended, [[false, undefined], [true, "middle"], [false, undefined]]);
    }
  });

  it("the waiter keeping the timer leaves (aborted): the next one keeps it and takes the key at the holder's TTL", { timeout: 10_000 }, async () => {
    const key = fresh();
    // Never released; its TTL outlasts the abort below by far.
    assert.equal(await lock(key, 1_500).acquire(), true);
    const controller = new AbortController();
    const first = lock(key).run(() => "first", { timeout: 60_000, signal: controller.signal });
    await sleep(5);
    const second = lock(key).run(() => "second", { timeout: 60_000 });
    const third = lock(key).run(() => "third", { timeout: 60_000 });
    await sleep(5);
    controller.abort(new Error("gave up"));
    await assert.rejects(first, /gave up/);
    assert.deepEqual(await Promise.all([second, third]), [[true, "second"], [true, "third"]]);
    assert.equal(await lock(key).isLocked(), false);
  });

  it("the waiter keeping the timer leaves after the holder's TTL passed, before its timer ran: the next one takes the free key at once", { timeout: 10_000 }, async () => {
    const key = fresh();
    // Never released. Its TTL runs out only while the loop below keeps the event loop busy: the
    // waiters queue long before, whatever stalls come first.
    const ttl = 1_000;
    assert.equal(await lock(key, ttl).acquire(), true);
    const granted = performance.now(); // the store ends the hold no later than `ttl` from here
    const controller = new AbortController();
    const first = lock(key).run(() => "first", { timeout: 60_000, signal: controller.signal });
    const second = lock(key).run(() => "second", { timeout: 60_000 });
    await sleep(5);
    // The holder's TTL passes while the event loop is busy, so the first waiter's timer has
    // not run when it leaves.
    while (performance.now() < granted + ttl + 30);
    controller.abort(new Error("gave up"));
    await assert.rejects(first, /gave up/);
    assert.deepEqual(await second, [true, "second"]);
  });
});
