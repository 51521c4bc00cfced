// Waiting without polling on PostgreSQL: databaseLockStore's acquireOrWait / withdraw / close,
// against the real server postgres.test.js starts. `env()` answers
//   { connectionString, pools: [pg.Pool, …] }  (pools of one database; the tests make their own
//   stores, each with its own LISTEN connection, so "several processes" are several stores).
//
// The checks that a broken store must fail are exported functions (fifoOrder, releaseHandsOver);
// the tests run them against broken variants too: a LIFO queue and a release that does not hand
// over.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { afterEach, describe, test } from "node:test";
import pg from "pg";
import { databaseLockStore } from "../../../pkg/stores/sql.js";
import { fenceLedger, READ_LIMIT } from "./sql-suite.js";
import { sleep } from "./servers.js";

const LONG = 60_000;
const owner = (label = "o") => `${label}-${randomBytes(8).toString("hex")}`;
const uniqueKey = (label) => `keel-test:wait:${label}:${randomBytes(4).toString("hex")}`;

// keel-lock as users get it (the tarball scripts/test.d/40-stores.sh installs); KEEL_LOCK_ENTRY
// points at another entry, e.g. pkg/node/index.mjs of the source tree while iterating.
async function importKeelLock() {
  const keel = await import(process.env.KEEL_LOCK_ENTRY ?? "keel-lock");
  return keel.default?.lock ? keel.default : keel;
}

/** Rows of the waiters table for `key`, oldest first. */
async function waiterRows(pool, key, table = "keel_locks") {
  const { rows } = await pool.query(`SELECT owner, granted_at, fence FROM "${table}_waiters" WHERE key = $1 ORDER BY seq`, [key]);
  return rows;
}

async function lockRow(pool, key, table = "keel_locks") {
  const { rows } = await pool.query(`SELECT owner FROM "${table}" WHERE key = $1 AND expires_at > (extract(epoch FROM clock_timestamp()) * 1000)::bigint`, [key]);
  return rows[0]?.owner ?? null;
}

/** Who holds `key` now: the lock row's owner, or the owners of its live shared holds, sorted. */
async function holders(pool, key, table = "keel_locks") {
  const now = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";
  const { rows } = await pool.query(
    `SELECT owner FROM "${table}" WHERE key = $1 AND owner <> '' AND expires_at > ${now} ` +
      `UNION ALL SELECT owner FROM "${table}_shared" WHERE key = $1 AND expires_at > ${now}`,
    [key],
  );
  return rows.map((r) => r.owner).sort();
}

/** Whether `promise` has settled within `ms` (its answer, or the string "pending"). */
const within = (promise, ms) => Promise.race([promise, sleep(ms).then(() => "pending")]);

/** Resolves once `count` callers are queued for `key` (rows in the waiters table). */
async function queued(pool, key, count, table = "keel_locks") {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const rows = await waiterRows(pool, key, table);
    if (rows.filter((r) => r.granted_at === null).length >= count) return rows;
    assert.ok(Date.now() < deadline, `${count} waiters never queued for ${key} (${rows.length} did)`);
    await sleep(5);
  }
}

/**
 * `stores[0]` holds the key; `waiters` callers queue one after another (each enqueued before the
 * next starts), spread over `stores`; the holder releases. Asserts that they were granted in
 * the order they arrived — nobody overtakes — with strictly increasing fences.
 */
export async function fifoOrder({ stores, pool, table = "keel_locks", waiters = 8 }) {
  const key = uniqueKey("fifo");
  const holder = owner("holder");
  assert.ok(await stores[0].acquire(key, holder, LONG));
  const ledger = fenceLedger();
  const arrived = [];
  const granted = [];
  const done = [];
  for (let i = 0; i < waiters; i++) {
    const me = owner(`w${i}`);
    const store = stores[i % stores.length];
    arrived.push(me);
    done.push(
      store.acquireOrWait(key, me, LONG, 20_000, 60_000).then(async (answer) => {
        assert.ok(answer, `${me} was not granted the key`);
        ledger.take(key, answer, me);
        granted.push(me);
        await sleep(5);
        assert.equal(await store.release(key, me), true, `${me} could not release`);
      }),
    );
    await queued(pool, key, i + 1, table);
  }
  // A newcomer's plain acquire does not overtake the queue.
  assert.equal(await stores[stores.length - 1].acquire(key, owner("newcomer"), LONG), false, "a newcomer overtook the queue");
  assert.equal(await stores[0].release(key, holder), true);
  await Promise.all(done);
  const overtakes = granted.filter((o, i) => o !== arrived[i]).length;
  assert.deepEqual(granted, arrived, `granted out of arrival order (${overtakes} out of place)`);
  assert.deepEqual(await waiterRows(pool, key, table), [], "waiter rows left behind");
  assert.equal(await lockRow(pool, key, table), null);
}

/**
 * A queued waiter whose safety-net poll is a minute away is granted the key when the holder
 * releases: the release itself hands it over (the lock row is the waiter's once it answers),
 * and NOTIFY wakes the waiter (well before its 20 s wait ends).
 */
export async function releaseHandsOver({ stores, pool }) {
  const [a, b] = [stores[0], stores[stores.length - 1]];
  const key = uniqueKey("handover");
  const [holder, waiter] = [owner("holder"), owner("waiter")];
  assert.ok(await a.acquire(key, holder, LONG));
  const waiting = b.acquireOrWait(key, waiter, LONG, 20_000, 60_000);
  await queued(pool, key, 1);
  assert.equal(await a.release(key, holder), true);
  assert.equal(await lockRow(pool, key), waiter, "the release did not hand the key over to the queued waiter");
  const answer = await Promise.race([waiting, sleep(15_000).then(() => "no hand-over within 15 s")]);
  assert.ok(answer && typeof answer === "object", `the release did not hand the key over: ${String(answer)}`);
  assert.ok(Number.isInteger(answer.waitedMs) && answer.waitedMs >= 0, `waitedMs ${answer.waitedMs}`);
  assert.equal(await b.release(key, waiter), true);
}

export function registerPgWaitingTests(env) {
  const made = [];
  // A store with its own LISTEN connection (taken from `pool` on first use), closed at the end.
  const storeOn = (pool, options) => {
    const store = databaseLockStore(pool, options);
    made.push(store);
    return store;
  };

  describe("waiting without polling (pg): acquireOrWait / withdraw", () => {
    // Each store holds one LISTEN connection of its pool: give them back after every test.
    afterEach(async () => {
      for (const store of made.splice(0)) await store.close();
    });

    test("only the Postgres store offers acquireOrWait/withdraw/close; a free key is taken at once", async () => {
      const { pools } = env();
      const store = storeOn(pools[0]);
      for (const m of ["acquireOrWait", "withdraw", "close", "end"]) assert.equal(typeof store[m], "function", m);
      const key = uniqueKey("free");
      const me = owner();
      const answer = await store.acquireOrWait(key, me, LONG, 1_000, 50);
      assert.deepEqual(Object.keys(answer).sort(), ["fence", "waitedMs"]);
      assert.equal(answer.waitedMs, 0);
      assert.equal(store.listening, true, "no LISTEN connection after the first acquireOrWait");
      assert.deepEqual(await waiterRows(pools[0], key), [], "a free key left a waiter row");
      assert.equal(await store.release(key, me), true);
      await assert.rejects(store.acquireOrWait(key, me, LONG, -1, 50), RangeError);
      await assert.rejects(store.acquireOrWait(key, me, LONG, 100, 0), RangeError);
      await assert.rejects(store.acquireOrWait("", me, LONG, 100, 50), TypeError);
    });

    test("FIFO: 12 waiters on 3 stores are granted in arrival order (0 overtakes); a newcomer's acquire waits its turn", { timeout: 60_000 }, async () => {
      const { pools } = env();
      const stores = pools.slice(0, 3).map((p) => storeOn(p));
      await fifoOrder({ stores, pool: pools[0], waiters: 12 });
    });

    test("the FIFO check catches a LIFO queue (a trigger that reverses the order)", { timeout: 60_000 }, async () => {
      const { pools } = env();
      const table = `lifo_${randomBytes(3).toString("hex")}`;
      const stores = pools.slice(0, 2).map((p) => storeOn(p, { table }));
      await stores[0].createTable();
      await pools[0].query(
        `CREATE FUNCTION "${table}_reverse"() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.seq := -NEW.seq; RETURN NEW; END $$`,
      );
      await pools[0].query(`CREATE TRIGGER reverse BEFORE INSERT ON "${table}_waiters" FOR EACH ROW EXECUTE FUNCTION "${table}_reverse"()`);
      try {
        await assert.rejects(
          fifoOrder({ stores, pool: pools[0], table, waiters: 4 }),
          (error) => error instanceof assert.AssertionError && /granted out of arrival order \(\d+ out of place\)/.test(error.message),
        );
      } finally {
        await pools[0].query(`DROP TABLE "${table}", "${table}_waiters"`);
        await pools[0].query(`DROP SEQUENCE "${table}_fence_seq"`);
        await pools[0].query(`DROP FUNCTION "${table}_reverse"()`);
      }
    });

    test("release hands the key to the waiter (no poll needed)", async () => {
      const { pools } = env();
      await releaseHandsOver({ stores: [storeOn(pools[0]), storeOn(pools[1])], pool: pools[0] });
    });

    test("the hand-over check catches a release that only deletes the row", async () => {
      const { pools } = env();
      const real = storeOn(pools[0]);
      const broken = {
        ...real,
        async release(key, o) {
          const { rowCount } = await pools[0].query("DELETE FROM keel_locks WHERE key = $1 AND owner = $2", [key, o]);
          return rowCount === 1;
        },
      };
      await assert.rejects(
        releaseHandsOver({ stores: [broken, storeOn(pools[1])], pool: pools[0] }),
        (error) => error instanceof assert.AssertionError && /did not hand the key over/.test(error.message),
      );
    });

    test("a timeout while queued answers false and leaves no waiter row", async () => {
      const { pools } = env();
      const store = storeOn(pools[0]);
      const key = uniqueKey("timeout");
      const [holder, waiter] = [owner("holder"), owner("waiter")];
      assert.ok(await store.acquire(key, holder, LONG));
      assert.equal(await store.acquireOrWait(key, waiter, LONG, 300, 60_000), false);
      assert.deepEqual(await waiterRows(pools[0], key), []);
      assert.equal(store.waitingCount, 0);
      assert.equal(await lockRow(pools[0], key), holder);
      assert.equal(await store.release(key, holder), true);
      assert.equal(await lockRow(pools[0], key), null, "the key went to a waiter that had left");
    });

    test("withdraw while queued: the pending call answers false at once, the queue is clean, the next waiter is unaffected", async () => {
      const { pools } = env();
      const [a, b] = [storeOn(pools[0]), storeOn(pools[1])];
      const key = uniqueKey("withdraw");
      const [holder, w1, w2] = [owner("holder"), owner("w1"), owner("w2")];
      assert.ok(await a.acquire(key, holder, LONG));
      const first = b.acquireOrWait(key, w1, LONG, 20_000, 60_000);
      await queued(pools[0], key, 1);
      const second = b.acquireOrWait(key, w2, LONG, 20_000, 60_000);
      await queued(pools[0], key, 2);
      await b.withdraw(key, w1);
      // At once: long before the wait's 20 s would end it.
      assert.equal(await within(first, 10_000), false);
      assert.deepEqual((await waiterRows(pools[0], key)).map((r) => r.owner), [w2]);
      assert.equal(await a.release(key, holder), true);
      assert.ok(await second, "the remaining waiter was not granted");
      // Withdraw after the grant releases and hands over: here, to nobody, so the key is free.
      await b.withdraw(key, w2);
      assert.equal(await lockRow(pools[0], key), null);
      assert.deepEqual(await waiterRows(pools[0], key), []);
    });

    test("a holder that crashes (never releases) is succeeded at its expiry, not at the next poll", { timeout: 30_000 }, async () => {
      const { pools } = env();
      const [a, b] = [storeOn(pools[0]), storeOn(pools[1])];
      const key = uniqueKey("crash");
      const [holder, waiter] = [owner("holder"), owner("waiter")];
      const ledger = fenceLedger();
      // The holder's TTL: long enough for the waiter to queue behind it on a loaded machine.
      const ttl = 3_000;
      const sentAt = Date.now();
      ledger.take(key, await a.acquire(key, holder, ttl), "the holder");
      const started = Date.now();
      // The safety-net poll is 60 s away and the wait 20 s: only the expiry hand-over can grant.
      const answer = await b.acquireOrWait(key, waiter, LONG, 20_000, 60_000);
      ledger.take(key, answer, "the waiter, at the holder's expiry");
      assert.ok(Date.now() - started < 20_000, "granted only at the end of the wait");
      // The hold ran at least its TTL from the acquire's sending (one clock, whole ms).
      assert.ok(Date.now() - sentAt >= ttl - 10, `granted ${Date.now() - sentAt} ms after the holder's ${ttl} ms acquire was sent`);
      assert.ok(answer.waitedMs > 0, `waitedMs ${answer.waitedMs}: the waiter did not wait for the holder`);
      assert.equal(await a.release(key, holder), false, "the crashed holder still held the key");
      assert.equal(await b.release(key, waiter), true);
    });

    test("a waiter that is gone once granted holds the key only for its TTL", async () => {
      const { pools } = env();
      const store = storeOn(pools[0]);
      const key = uniqueKey("gone");
      const [holder, ghost, next] = [owner("holder"), owner("ghost"), owner("next")];
      assert.ok(await store.acquire(key, holder, LONG));
      // A waiter whose process died after queueing: its row is there, nobody listens for it.
      await pools[0].query(
        `INSERT INTO keel_locks_waiters (key, owner, ttl_ms, enqueued_at, deadline)
         SELECT $1, $2, 2000, n, n + 60000 FROM (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS n) t`,
        [key, ghost],
      );
      assert.equal(await store.release(key, holder), true);
      assert.equal(await lockRow(pools[0], key), ghost, "the release did not grant the queued waiter");
      assert.equal(await store.acquire(key, next, LONG), false);
      await sleep(2_300); // past its 2 s TTL
      assert.equal(await store.isLocked(key), false, "the gone waiter's grant outlived its TTL");
      assert.ok(await store.acquire(key, next, LONG), "the key was not free after the gone waiter's TTL");
      assert.equal(await store.release(key, next), true);
      assert.deepEqual(await waiterRows(pools[0], key), [], "the gone waiter's row was not cleaned");
    });

    test("a release racing the waiter's timeout: never two holders, never a lost grant (60 rounds, more until both outcomes came)", { timeout: 120_000 }, async () => {
      const { pools } = env();
      const [a, b] = [storeOn(pools[0]), storeOn(pools[1])];
      const outcomes = { granted: 0, timedOut: 0 };
      const raced = () => outcomes.granted > 0 && outcomes.timedOut > 0;
      for (let round = 0; round < 60 || (!raced() && round < 600); round++) {
        const key = uniqueKey(`race${round}`);
        const [holder, waiter] = [owner("holder"), owner("waiter")];
        assert.ok(await a.acquire(key, holder, LONG));
        const wait = 40 + (round % 20);
        const waiting = b.acquireOrWait(key, waiter, LONG, wait, 60_000);
        await sleep(30 + (round % 7) * 5);
        const released = a.release(key, holder);
        const [answer] = await Promise.all([waiting, released]);
        const owners = (await pools[2].query("SELECT owner FROM keel_locks WHERE key = $1", [key])).rows.map((r) => r.owner);
        if (answer) {
          outcomes.granted++;
          assert.deepEqual(owners, [waiter], `round ${round}: granted, but the lock row says ${owners}`);
          assert.equal(await b.release(key, waiter), true, `round ${round}`);
        } else {
          outcomes.timedOut++;
          assert.ok(!owners.includes(waiter), `round ${round}: the waiter timed out but holds the key (a lost grant)`);
          assert.deepEqual(owners, [], `round ${round}: after the release the key is held by ${owners}`);
        }
        assert.deepEqual(await waiterRows(pools[2], key), [], `round ${round}: waiter rows left`);
      }
      // Both outcomes happen (otherwise the rounds did not race).
      assert.ok(raced(), JSON.stringify(outcomes));
    });

    for (const ending of ["the wait's deadline", "a withdraw"]) {
      test(`${ending} while the enqueue is still in flight: the waiter is answered no, and the row the enqueue writes never gets the key`, { timeout: 60_000 }, async () => {
        const { pools } = env();
        const key = uniqueKey("in-flight");
        const [holder, waiter] = [owner("holder"), owner("waiter")];
        // The waiter's store: its first statement naming the waiter (the enqueue) is held back
        // until the test lets it go, so the ending certainly comes while it is in flight.
        let reached;
        const enqueueReached = new Promise((resolve) => (reached = resolve));
        let letGo;
        const enqueueLetGo = new Promise((resolve) => (letGo = resolve));
        let held = false;
        const gated = {
          async query(...args) {
            const values = Array.isArray(args[1]) ? args[1] : args[0]?.values;
            if (!held && values?.includes(waiter)) {
              held = true;
              reached();
              await enqueueLetGo;
            }
            return pools[1].query(...args);
          },
        };
        const a = storeOn(pools[0]);
        const b = storeOn(gated, { driver: "pg", listen: () => pools[1].connect() });
        assert.ok(await a.acquire(key, holder, LONG));
        const waitMs = 50;
        const waiting = b.acquireOrWait(key, waiter, LONG, waitMs, 60_000);
        await enqueueReached;
        if (ending === "a withdraw") {
          await b.withdraw(key, waiter);
        } else {
          // A timer due after the store's deadline timer (set before the enqueue was sent) fires
          // after it: the deadline has passed once this resolves.
          await sleep(waitMs + 10);
        }
        letGo();
        assert.equal(await waiting, false, "the waiter was not answered no");
        assert.equal(await a.release(key, holder), true);
        // The release hands the key to the oldest live waiter row: there must be none.
        assert.equal(await lockRow(pools[2], key), null, "the key went to the waiter that was answered no");
        assert.deepEqual(await waiterRows(pools[2], key), [], "the waiter's row was left in the queue");
      });
    }

    test("lost notifications: with the LISTEN connection's notifications dropped, the safety-net poll still hands over", { timeout: 30_000 }, async () => {
      const { pools } = env();
      const [a, b] = [storeOn(pools[0]), storeOn(pools[1])];
      const key = uniqueKey("lost");
      const [holder, waiter] = [owner("holder"), owner("waiter")];
      assert.ok(await a.acquire(key, holder, LONG));
      let polled = false;
      const waiting = b.acquireOrWait(key, waiter, LONG, 20_000, 300);
      await queued(pools[0], key, 1);
      // Drop every notification the waiter's store would have received (the connection stays up).
      const listenClient = b.listenClient;
      assert.ok(listenClient, "no LISTEN connection");
      let dropped = 0;
      const handlers = listenClient.listeners("notification");
      listenClient.removeAllListeners("notification");
      listenClient.on("notification", () => dropped++);
      waiting.then(() => (polled = true));
      assert.equal(await a.release(key, holder), true);
      const answer = await waiting;
      assert.ok(polled && answer, "the poll did not pick up the grant");
      assert.ok(dropped >= 1, "the grant's notification never came (so nothing was dropped)");
      for (const h of handlers) listenClient.on("notification", h);
      assert.equal(await b.release(key, waiter), true);
    });

    test("lost notifications: the LISTEN connection is killed; the waiter still gets the key, and the store listens again", { timeout: 30_000 }, async () => {
      const { pools } = env();
      // The waiter's store, its statements counted as they are sent and as they are answered
      // (its LISTEN connection, options.listen, apart).
      const statements = { sent: 0, answered: 0 };
      const counted = {
        async query(...args) {
          statements.sent++;
          try {
            return await pools[1].query(...args);
          } finally {
            statements.answered++;
          }
        },
      };
      const [a, b] = [storeOn(pools[0]), storeOn(counted, { driver: "pg", listen: () => pools[1].connect() })];
      const key = uniqueKey("killed");
      const [holder, waiter] = [owner("holder"), owner("waiter")];
      assert.ok(await a.acquire(key, holder, LONG));
      const waiting = b.acquireOrWait(key, waiter, LONG, 20_000, 300);
      await queued(pools[0], key, 1);
      const pid = b.listenClient.processID;
      assert.ok(pid, "no LISTEN backend");
      const sentBefore = statements.sent;
      await pools[0].query("SELECT pg_terminate_backend($1)", [pid]);
      // Before the release: the store has let the dead connection go, and the look it makes then
      // (notifications may have been lost) has been answered, finding the key still held.
      const deadline = Date.now() + 20_000;
      while (!(b.listenClient?.processID !== pid && statements.sent > sentBefore && statements.answered === statements.sent)) {
        assert.ok(Date.now() < deadline, "the store did not look again after its LISTEN connection ended");
        await sleep(5);
      }
      assert.equal(await a.release(key, holder), true);
      assert.ok(await waiting, "no hand-over after the LISTEN connection died");
      assert.equal(b.listening, true, "the store did not LISTEN again");
      assert.notEqual(b.listenClient.processID, pid);
      assert.equal(await b.release(key, waiter), true);
    });

    test("mutual exclusion: 20 waiters over 4 stores, at most one inside at a time, fences rising, queue empty afterwards", { timeout: 60_000 }, async () => {
      const { pools } = env();
      const stores = pools.map((p) => storeOn(p));
      const key = uniqueKey("mutex");
      const ledger = fenceLedger();
      let inside = 0;
      let most = 0;
      let entered = 0;
      await Promise.all(
        Array.from({ length: 20 }, async (_, i) => {
          const store = stores[i % stores.length];
          const me = owner(`m${i}`);
          const answer = await store.acquireOrWait(key, me, LONG, 30_000, 10_000);
          assert.ok(answer, `${me} was not granted`);
          ledger.take(key, answer, me);
          inside++;
          entered++;
          most = Math.max(most, inside);
          await sleep(3);
          inside--;
          assert.equal(await store.release(key, me), true);
        }),
      );
      assert.equal(entered, 20);
      assert.equal(most, 1, `${most} holders inside at once`);
      assert.deepEqual(await waiterRows(pools[0], key), []);
    });

    test("through keel-lock: 20 callers of lock(k).run(fn, { timeout }) wait in the store — at most 3 statements per acquisition, no polling; a polling store is caught", { timeout: 60_000 }, async (t) => {
      const { pools } = env();
      const keel = await importKeelLock();
      // Every statement the store sends through the pool is counted (the LISTEN connection,
      // options.listen, carries only LISTEN and the notifications). The safety net looks once a
      // minute: none is due during a run, however long a loaded machine makes it.
      const counted = () => {
        const stats = { statements: 0 };
        const db = { query: (...args) => (stats.statements++, pools[0].query(...args)) };
        return { stats, store: storeOn(db, { driver: "pg", listen: () => pools[0].connect(), safetyNetMs: 60_000 }) };
      };
      const callers = 20;
      const runAll = async (store, options) => {
        const key = uniqueKey("keel-lock");
        const previous = keel.getLockStore();
        keel.setLockStore(store);
        let inside = 0;
        let most = 0;
        const fences = [];
        try {
          const results = await Promise.all(
            Array.from({ length: callers }, () =>
              keel.lock(key, LONG).run(async ({ fence }) => {
                most = Math.max(most, ++inside);
                fences.push(fence);
                await sleep(10);
                inside--;
              }, options),
            ),
          );
          assert.deepEqual(results.map(([ran]) => ran), Array(callers).fill(true), "a caller did not get the lock");
        } finally {
          keel.setLockStore(previous);
        }
        assert.equal(most, 1, `${most} callers inside at once`);
        assert.deepEqual([...fences].sort((x, y) => x - y), fences, "fences out of order");
        assert.deepEqual(await waiterRows(pools[0], key), []);
      };
      const perAcquisition = (stats) => stats.statements / callers;

      const waiting = counted();
      await runAll(waiting.store, { timeout: 30_000, retryDelay: 5_000 });
      assert.ok(perAcquisition(waiting.stats) <= 3, `${waiting.stats.statements} statements for ${callers} acquisitions: the callers polled`);
      assert.equal(waiting.store.waitingCount, 0);
      // A short retryDelay is the polling interval of stores that cannot hand over; this one's
      // safety net keeps to its own interval (safetyNetMs), so the count stays the same.
      const shortDelay = counted();
      await runAll(shortDelay.store, { timeout: 30_000, retryDelay: 10 });
      assert.ok(perAcquisition(shortDelay.stats) <= 3, `${shortDelay.stats.statements} statements for ${callers} acquisitions at retryDelay 10: the safety net followed retryDelay`);

      // The same callers on the same store without acquireOrWait/withdraw: the core polls
      // acquire every retryDelay, and the count shows it.
      const polling = counted();
      const { acquire, release, extend, isLocked, remainingTime } = polling.store;
      await runAll({ acquire, release, extend, isLocked, remainingTime }, { timeout: 30_000, retryDelay: 20 });
      t.diagnostic(`statements per acquisition: waiting in the store ${perAcquisition(waiting.stats)} (at retryDelay 10: ${perAcquisition(shortDelay.stats)}), polling ${perAcquisition(polling.stats)}`);
      assert.ok(perAcquisition(polling.stats) > 3, `the polling store sent only ${polling.stats.statements} statements`);
    });

    test("through keel-lock: aborting a queued run() withdraws it — the queue is clean and the key goes to the next waiter", { timeout: 30_000 }, async () => {
      const { pools } = env();
      const keel = await importKeelLock();
      const store = storeOn(pools[0]);
      const key = uniqueKey("abort");
      const holder = owner("holder");
      assert.ok(await store.acquire(key, holder, LONG));
      const previous = keel.getLockStore();
      keel.setLockStore(store);
      try {
        const controller = new AbortController();
        const aborted = keel.lock(key, LONG).run(() => "never", { timeout: 20_000, signal: controller.signal });
        await queued(pools[0], key, 1);
        const next = keel.lock(key, LONG).run(() => "next", { timeout: 20_000 });
        await queued(pools[0], key, 2);
        controller.abort(new Error("caller gave up"));
        await assert.rejects(aborted, /caller gave up/);
        assert.equal((await waiterRows(pools[0], key)).length, 1, "the aborted caller is still queued");
        assert.equal(await store.release(key, holder), true);
        assert.deepEqual(await next, [true, "next"]);
      } finally {
        keel.setLockStore(previous);
      }
      assert.deepEqual(await waiterRows(pools[0], key), []);
      assert.equal(await lockRow(pools[0], key), null);
    });

    test("close() withdraws pending waiters and ends the LISTEN connection; the store listens again when next used", async () => {
      const { pools } = env();
      const [a, b] = [storeOn(pools[0]), storeOn(pools[1])];
      const key = uniqueKey("close");
      const [holder, waiter] = [owner("holder"), owner("waiter")];
      assert.ok(await a.acquire(key, holder, LONG));
      const waiting = b.acquireOrWait(key, waiter, LONG, 20_000, 60_000);
      await queued(pools[0], key, 1);
      const before = pools[1].totalCount;
      await b.close();
      assert.equal(await waiting, false);
      assert.equal(b.listening, false);
      assert.equal(pools[1].totalCount, before - 1, "the LISTEN connection went back to the pool");
      assert.deepEqual(await waiterRows(pools[0], key), []);
      assert.equal(await a.release(key, holder), true);
      assert.ok(await b.acquireOrWait(key, waiter, LONG, 1_000, 50));
      assert.equal(b.listening, true);
      assert.equal(await b.release(key, waiter), true);
    });
  });

  describe("waiting with shared holds (pg): acquireSharedOrWait in the one FIFO queue", () => {
    afterEach(async () => {
      for (const store of made.splice(0)) await store.close();
    });

    test("a waiter for 3 permits is not starved: later single permits, which would fit, queue behind it", { timeout: 30_000 }, async () => {
      const { pools } = env();
      const [a, b] = [storeOn(pools[0]), storeOn(pools[1])];
      const key = uniqueKey("heavy");
      const [p1, p2, heavy, single, newcomer] = [owner("p1"), owner("p2"), owner("heavy"), owner("single"), owner("newcomer")];
      const ledger = fenceLedger();
      ledger.take(key, await a.acquireShared(key, p1, LONG, 1, 3), "p1");
      ledger.take(key, await a.acquireShared(key, p2, LONG, 1, 3), "p2");
      const heavyWait = b.acquireSharedOrWait(key, heavy, LONG, 3, 3, 20_000, 60_000);
      await queued(pools[0], key, 1);
      assert.equal(await a.acquireShared(key, newcomer, LONG, 1, 3), false, "a newcomer's permit overtook the queued heavy waiter");
      const singleWait = a.acquireSharedOrWait(key, single, LONG, 1, 3, 20_000, 60_000);
      await queued(pools[0], key, 2);
      assert.equal(await a.release(key, p1), true);
      assert.equal(await within(singleWait, 300), "pending", "the single permit overtook the heavy waiter");
      assert.deepEqual(await holders(pools[0], key), [p2]);
      assert.equal(await a.release(key, p2), true);
      const got = await heavyWait;
      ledger.take(key, got, "the heavy waiter");
      assert.ok(got.waitedMs >= 300, `waitedMs ${got.waitedMs}`);
      assert.deepEqual(await holders(pools[0], key), [heavy]);
      assert.equal(await within(singleWait, 200), "pending", "a permit was granted beside 3 of 3");
      assert.equal(await b.release(key, heavy), true);
      ledger.take(key, await singleWait, "the single waiter, after the heavy one");
      assert.equal(await a.release(key, single), true);
      assert.deepEqual(await waiterRows(pools[0], key), []);
      assert.equal(await lockRow(pools[0], key), null);
    });

    test("a queued writer is not overtaken by readers that come later; its release then lets them all in at once", { timeout: 30_000 }, async () => {
      const { pools } = env();
      const stores = pools.slice(0, 3).map((p) => storeOn(p));
      const key = uniqueKey("writer");
      const [reader, writer, late, r1, r2, r3] = ["reader", "writer", "late", "r1", "r2", "r3"].map(owner);
      const ledger = fenceLedger();
      ledger.take(key, await stores[0].acquireShared(key, reader, LONG, 1, READ_LIMIT), "the first reader");
      const writerWait = stores[1].acquireOrWait(key, writer, LONG, 20_000, 60_000);
      await queued(pools[0], key, 1);
      assert.equal(await stores[2].acquireShared(key, late, LONG, 1, READ_LIMIT), false, "a later reader overtook the queued writer");
      const readers = [];
      for (const [i, r] of [r1, r2, r3].entries()) {
        readers.push(stores[i % stores.length].acquireSharedOrWait(key, r, LONG, 1, READ_LIMIT, 20_000, 60_000));
        await queued(pools[0], key, i + 2);
      }
      assert.equal(await stores[0].release(key, reader), true);
      const w = await writerWait;
      ledger.take(key, w, "the writer");
      assert.deepEqual(await holders(pools[0], key), [writer]);
      for (const r of readers) assert.equal(await within(r, 100), "pending", "a reader was let in beside the writer");
      assert.equal(await stores[1].release(key, writer), true);
      const granted = await Promise.all(readers);
      // One release, three grants, in queue order.
      for (const [i, g] of granted.entries()) ledger.take(key, g, `reader ${i + 1}`);
      assert.deepEqual(await holders(pools[0], key), [r1, r2, r3].sort());
      assert.equal(await stores[2].acquire(key, owner("writer2"), LONG), false);
      for (const [i, r] of [r1, r2, r3].entries()) assert.equal(await stores[i % stores.length].release(key, r), true);
      assert.deepEqual(await waiterRows(pools[0], key), []);
      assert.equal(await lockRow(pools[0], key), null);
    });

    test("a hand-over grants front waiters while each fits and stops at the first that does not (weight, then limit)", { timeout: 30_000 }, async () => {
      const { pools } = env();
      const [a, b] = [storeOn(pools[0]), storeOn(pools[1])];
      const key = uniqueKey("fits");
      const [writer, s1, s2, s3, s4] = ["writer", "s1", "s2", "s3", "s4"].map(owner);
      assert.ok(await a.acquire(key, writer, LONG));
      const w1 = b.acquireSharedOrWait(key, s1, LONG, 1, 3, 20_000, 60_000);
      await queued(pools[0], key, 1);
      const w2 = a.acquireSharedOrWait(key, s2, LONG, 2, 3, 20_000, 60_000);
      await queued(pools[0], key, 2);
      const w3 = b.acquireSharedOrWait(key, s3, LONG, 1, 3, 20_000, 60_000);
      await queued(pools[0], key, 3);
      const w4 = a.acquireSharedOrWait(key, s4, LONG, 1, 5, 20_000, 60_000);
      await queued(pools[0], key, 4);
      assert.equal(await a.release(key, writer), true);
      const [g1, g2] = await Promise.all([w1, w2]);
      assert.ok(g1.fence < g2.fence, `fences out of queue order: ${g1.fence}, ${g2.fence}`);
      assert.deepEqual(await holders(pools[0], key), [s1, s2].sort());
      assert.equal(await within(w3, 200), "pending", "a waiter was granted past the limit");
      assert.equal(await b.release(key, s1), true);
      const g3 = await w3;
      assert.ok(g3.fence > g2.fence);
      assert.equal(await within(w4, 200), "pending", "a waiter under another limit was granted beside the held permits");
      assert.equal(await a.release(key, s2), true);
      assert.equal(await within(w4, 200), "pending");
      assert.equal(await b.release(key, s3), true);
      const g4 = await w4;
      assert.ok(g4.fence > g3.fence);
      assert.deepEqual(await holders(pools[0], key), [s4]);
      assert.equal(await a.release(key, s4), true);
      assert.deepEqual(await waiterRows(pools[0], key), []);
    });

    test("a permit whose holder crashed frees its capacity at its expiry: the waiter is handed it then, not at its next poll", { timeout: 30_000 }, async () => {
      const { pools } = env();
      const [a, b] = [storeOn(pools[0]), storeOn(pools[1])];
      const key = uniqueKey("permit-crash");
      const [crashed, steady, waiter, writer] = ["crashed", "steady", "waiter", "writer"].map(owner);
      const ledger = fenceLedger();
      // TTLs far enough apart that a stalled machine still tells the first expiry from the second.
      const [crashedTtl, steadyTtl] = [2_000, 8_000];
      const crashedAt = Date.now();
      ledger.take(key, await a.acquireShared(key, crashed, crashedTtl, 1, 2), "the crashing holder");
      const steadyAt = Date.now();
      ledger.take(key, await a.acquireShared(key, steady, steadyTtl, 1, 2), "the steady holder");
      const started = Date.now();
      const answer = await b.acquireSharedOrWait(key, waiter, LONG, 1, 2, 20_000, 60_000);
      ledger.take(key, answer, "the waiter, at the permit's expiry");
      assert.ok(Date.now() - started < 6_000, `granted after ${Date.now() - started} ms: not at the first permit's expiry`);
      assert.ok(Date.now() - crashedAt >= crashedTtl - 10, `granted ${Date.now() - crashedAt} ms after the ${crashedTtl} ms permit was sent: before it expired`);
      assert.ok(answer.waitedMs > 0, `waitedMs ${answer.waitedMs}: the waiter did not wait for the permit`);
      assert.equal(await a.release(key, crashed), false, "the crashed holder still held its permit");
      // An exclusive waiter behind permits is handed the key when the last of them expires.
      const writerWait = b.acquireOrWait(key, writer, LONG, 20_000, 60_000);
      assert.equal(await b.release(key, waiter), true);
      const w = await writerWait;
      ledger.take(key, w, "the writer, at the last permit's expiry");
      assert.ok(Date.now() - steadyAt >= steadyTtl - 10, "the writer was let in beside a live permit");
      assert.equal(await b.release(key, writer), true);
      assert.deepEqual(await waiterRows(pools[0], key), []);
    });

    test("acquireSharedOrWait: a limit mismatch is answered at once and not queued; a spent wait answers false and leaves no row", { timeout: 30_000 }, async () => {
      const { pools } = env();
      const store = storeOn(pools[0]);
      const key = uniqueKey("shared-wait");
      const [holder, other, late] = ["holder", "other", "late"].map(owner);
      const free = await store.acquireSharedOrWait(key, holder, LONG, 2, 2, 1_000, 50);
      assert.deepEqual(Object.keys(free).sort(), ["fence", "waitedMs"]);
      assert.equal(free.waitedMs, 0);
      // At once, not queued: well before its 20 s wait would end.
      assert.deepEqual(await within(store.acquireSharedOrWait(key, other, LONG, 1, 4, 20_000, 60_000), 10_000), { heldLimit: 2 });
      assert.deepEqual(await waiterRows(pools[0], key), [], "a mismatched request was queued");
      assert.equal(await store.acquireSharedOrWait(key, late, LONG, 1, 2, 300, 60_000), false);
      assert.deepEqual(await waiterRows(pools[0], key), []);
      assert.equal(store.waitingCount, 0);
      await assert.rejects(store.acquireSharedOrWait(key, late, LONG, 3, 2, 300, 50), RangeError);
      assert.equal(await store.release(key, holder), true);
      assert.equal(await lockRow(pools[0], key), null, "the key went to a waiter that had left");
    });

    test("withdraw: a queued shared waiter leaves at once; withdraw after a grant releases the permit and hands it on", { timeout: 30_000 }, async () => {
      const { pools } = env();
      const [a, b] = [storeOn(pools[0]), storeOn(pools[1])];
      const key = uniqueKey("shared-withdraw");
      const [holder, w1, w2] = ["holder", "w1", "w2"].map(owner);
      assert.ok(await a.acquireShared(key, holder, LONG, 1, 1));
      const first = b.acquireSharedOrWait(key, w1, LONG, 1, 1, 20_000, 60_000);
      await queued(pools[0], key, 1);
      const second = b.acquireSharedOrWait(key, w2, LONG, 1, 1, 20_000, 60_000);
      await queued(pools[0], key, 2);
      await b.withdraw(key, w1);
      assert.equal(await within(first, 10_000), false);
      assert.deepEqual((await waiterRows(pools[0], key)).map((r) => r.owner), [w2]);
      // The holder withdraws too (its grant is released): the next waiter is handed the permit.
      await a.withdraw(key, holder);
      assert.ok(await second, "the remaining waiter was not granted");
      assert.deepEqual(await holders(pools[0], key), [w2]);
      await b.withdraw(key, w2);
      assert.equal(await lockRow(pools[0], key), null);
      assert.deepEqual(await waiterRows(pools[0], key), []);
    });

    test("readers and writers over 4 stores, all waiting in one queue: a writer is always alone, readers share, fences are unique, the queue ends empty", { timeout: 60_000 }, async () => {
      const { pools } = env();
      const stores = pools.map((p) => storeOn(p));
      const key = uniqueKey("rw-mix");
      let readers = 0;
      let writers = 0;
      let mostReaders = 0;
      const fences = new Set();
      await Promise.all(
        Array.from({ length: 24 }, async (_, i) => {
          const store = stores[i % stores.length];
          const me = owner(`c${i}`);
          const write = i % 4 === 0;
          const answer = write
            ? await store.acquireOrWait(key, me, LONG, 30_000, 10_000)
            : await store.acquireSharedOrWait(key, me, LONG, 1, READ_LIMIT, 30_000, 10_000);
          assert.ok(answer && Number.isInteger(answer.fence), `${me} was not granted`);
          assert.ok(!fences.has(answer.fence), `fence ${answer.fence} handed out twice`);
          fences.add(answer.fence);
          if (write) {
            assert.equal(readers + writers, 0, `a writer was let in beside ${readers} readers and ${writers} writers`);
            writers++;
          } else {
            assert.equal(writers, 0, "a reader was let in beside a writer");
            mostReaders = Math.max(mostReaders, ++readers);
          }
          await sleep(5);
          if (write) writers--;
          else readers--;
          assert.equal(await store.release(key, me), true);
        }),
      );
      assert.equal(fences.size, 24);
      assert.ok(mostReaders > 1, "readers never shared the key");
      assert.deepEqual(await waiterRows(pools[0], key), []);
      assert.equal(await lockRow(pools[0], key), null);
    });
  });
}
