// databaseLockStore's watch(key, onChange) over pg, against a throwaway PostgreSQL cluster started
// here: every change of a key's exclusive holder that a store operation makes is pushed, once, in
// commit order, with its fence and metadata and never an owner; expiry, extend and shared holds
// are not; stop() ends the reports and unregisters the key; a lost LISTEN connection is followed
// by onChange(null); a key nobody watches costs no NOTIFY; createTable() upgrades a table from
// before watch. The main check (reportsEveryChange) is also run against tables whose report
// triggers were dropped, and must fail there.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { fileURLToPath } from "node:url";
import { after, afterEach, before, describe, test } from "node:test";
import Database from "better-sqlite3";
import pg from "pg";
import { databaseLockStore } from "../../pkg/stores/sql.js";
import { schemaStatements } from "../../pkg/stores/sql-schema.js";
import { sleep, startPostgres } from "./lib/servers.js";

const LONG = 60_000;
const owner = (label = "o") => `${label}-${randomBytes(8).toString("hex")}`;
const uniqueKey = (label) => `keel-test:watch:${label}:${randomBytes(4).toString("hex")}`;
const tag = () => randomBytes(3).toString("hex");

let server;
const pools = [];
let raw; // a pg.Client for looking at tables and LISTENing on the side
const made = [];

/** A store of its own (its own LISTEN connection), closed after the test. */
function storeOn(pool, options) {
  const store = databaseLockStore(pool, options);
  made.push(store);
  return store;
}

/** Watches `key` on `store`: { reports, stop }, every call of onChange pushed as it came. */
async function watching(store, key) {
  const reports = [];
  const stop = await store.watch(key, (change) => reports.push(change));
  assert.equal(typeof stop, "function", "watch() did not resolve to a function");
  return { reports, stop };
}

/**
 * Waits until `reports` has `count` entries (at most 10 s: the checks that must fail wait that
 * long for reports that never come), then a little more for extras.
 */
async function settled(reports, count) {
  const deadline = Date.now() + 10_000;
  while (reports.length < count && Date.now() < deadline) await sleep(5);
  await sleep(100);
  return reports;
}

const grantOf = (answer, metadata = null) => {
  assert.ok(answer && typeof answer === "object" && Number.isSafeInteger(answer.fence), `not a grant: ${JSON.stringify(answer)}`);
  return { fence: answer.fence, held: true, metadata };
};
const endOf = (fence) => ({ fence, held: false });

/** The reports with remainingMs checked against `ttl` and dropped, for comparing with what happened. */
function comparable(reports, ttl = LONG) {
  return reports.map((r) => {
    if (r === null) return null;
    if (!r.held) {
      assert.deepEqual(Object.keys(r).sort(), ["fence", "held"], `an end report is ${JSON.stringify(r)}`);
      return r;
    }
    assert.deepEqual(Object.keys(r).sort(), ["fence", "held", "metadata", "remainingMs"], `a grant report is ${JSON.stringify(r)}`);
    assert.ok(Number.isInteger(r.remainingMs) && r.remainingMs > 0 && r.remainingMs <= ttl, `remainingMs ${r.remainingMs} of a ${ttl} ms hold`);
    return { fence: r.fence, held: true, metadata: r.metadata };
  });
}

function noOwnerIn(reports, owners) {
  const text = JSON.stringify(reports);
  for (const o of owners) assert.ok(!text.includes(o), `a report carries the owner ${o}: ${text}`);
}

/**
 * Notifications on `channel` seen by the side client while `fn` runs: every one sent before a
 * marker NOTIFY made once `fn` is done (notifications arrive in commit order, so the marker comes
 * after them all).
 */
async function notificationsDuring(channel, fn) {
  const seen = [];
  const marker = `marker-${randomBytes(6).toString("hex")}`;
  let marked = false;
  const onNotification = (message) => {
    if (message.channel !== channel) return;
    if (message.payload === marker) marked = true;
    else if (!marked) seen.push(message.payload);
  };
  raw.on("notification", onNotification);
  await raw.query(`LISTEN "${channel}"`);
  try {
    await fn();
    await pools[0].query("SELECT pg_notify($1, $2)", [channel, marker]);
    const deadline = Date.now() + 20_000;
    while (!marked) {
      assert.ok(Date.now() < deadline, `the marker NOTIFY on ${channel} never came`);
      await sleep(5);
    }
  } finally {
    await raw.query(`UNLISTEN "${channel}"`);
    raw.removeListener("notification", onNotification);
  }
  return seen;
}

/** Resolves once `count` callers are queued for `key` in `store`'s table (waiter rows not yet granted). */
async function queued(store, key, count) {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const { rows } = await raw.query(`SELECT 1 FROM "${store.table}_waiters" WHERE key = $1 AND granted_at IS NULL`, [key]);
    if (rows.length >= count) return;
    assert.ok(Date.now() < deadline, `${count} waiters never queued for ${key} (${rows.length} did)`);
    await sleep(5);
  }
}

const watcherRows = async (key, table = "keel_locks") =>
  (await raw.query(`SELECT watcher FROM "${table}_watchers" WHERE key = $1`, [key])).rows;
const lockRowOf = async (key, table = "keel_locks") =>
  (await raw.query(`SELECT owner, expires_at, watched_until FROM "${table}" WHERE key = $1`, [key])).rows[0] ?? null;

/**
 * One key's holders changed by every kind of store operation, from two stores other than the
 * watching one: a grant, a hand-over to a waiter by a release, a force-release, a grant of
 * acquireMany, a hand-over by a release, the withdraw of a handed key (handing it on), a
 * release, and acquireOrWait taking a free key. The watch must report exactly these changes, in
 * this order, with their fences and metadata, and no owner.
 */
export async function reportsEveryChange({ watcher, actors }) {
  const [a, b] = actors;
  const key = uniqueKey("every");
  const { reports, stop } = await watching(watcher, key);
  const expected = [];
  const owners = [];
  const o = (label) => {
    const name = owner(label);
    owners.push(name);
    return name;
  };
  try {
    const first = o("first");
    let fence = grantOf(await a.acquire(key, first, LONG, "first holder")).fence;
    expected.push({ fence, held: true, metadata: "first holder" });
    // A waiter queued on another store is handed the key by the release.
    const w1 = o("w1");
    const handed = b.acquireOrWait(key, w1, LONG, 20_000, 60_000, "waiter one");
    await queued(b, key, 1);
    assert.equal(await a.release(key, first), true);
    expected.push(endOf(fence));
    fence = grantOf(await handed).fence;
    expected.push({ fence, held: true, metadata: "waiter one" });
    // An operator frees it.
    assert.equal(await a.forceRelease(key), true);
    expected.push(endOf(fence));
    // A set of keys in one step, this key among them.
    const [m1, m2] = [o("m1"), o("m2")];
    const other = `${key}:z`;
    const set = await a.acquireMany([key, other], [m1, m2], LONG, ["many", undefined]);
    assert.ok(Array.isArray(set), `acquireMany answered ${JSON.stringify(set)}`);
    fence = set[0].fence;
    expected.push({ fence, held: true, metadata: "many" });
    // Two waiters; the release hands to the first, whose withdraw hands to the second.
    const [w2, w3] = [o("w2"), o("w3")];
    const second = b.acquireOrWait(key, w2, LONG, 20_000, 60_000, "waiter two");
    await queued(b, key, 1);
    const third = a.acquireOrWait(key, w3, LONG, 20_000, 60_000);
    await queued(a, key, 2);
    assert.equal(await a.release(key, m1), true);
    expected.push(endOf(fence));
    fence = grantOf(await second).fence;
    expected.push({ fence, held: true, metadata: "waiter two" });
    await b.withdraw(key, w2);
    expected.push(endOf(fence));
    fence = grantOf(await third).fence;
    expected.push({ fence, held: true, metadata: null });
    assert.equal(await a.release(key, w3), true);
    expected.push(endOf(fence));
    // acquireOrWait finding the key free takes it at once.
    const quick = o("quick");
    fence = grantOf(await b.acquireOrWait(key, quick, LONG, 1_000, 60_000, "at once")).fence;
    expected.push({ fence, held: true, metadata: "at once" });
    assert.equal(await b.release(key, quick), true);
    expected.push(endOf(fence));
    assert.equal(await a.release(other, m2), true);
    await settled(reports, expected.length);
  } finally {
    await stop();
  }
  assert.deepEqual(comparable(reports), expected, "the reports are not the changes, in order");
  noOwnerIn(reports, owners);
  return { key, expected };
}

before(async () => {
  server = await startPostgres();
  for (let i = 0; i < 3; i++) {
    const pool = new pg.Pool({ connectionString: server.connectionString, max: 6 });
    pool.on("error", () => {}); // a connection terminated on purpose is not a test failure
    pools.push(pool);
  }
  raw = new pg.Client({ connectionString: server.connectionString });
  raw.on("error", () => {});
  await raw.connect();
  await databaseLockStore(pools[0]).createTable();
});

after(async () => {
  for (const store of made.splice(0)) await store.close();
  await raw?.end();
  for (const pool of pools) await pool.end();
  await server?.stop();
});

afterEach(async () => {
  for (const store of made.splice(0)) await store.close();
});

describe("watch (pg)", () => {
  test("only the PostgreSQL store has watch; bad arguments reject with TypeError and register nothing", async () => {
    const sqlite = databaseLockStore(new Database(":memory:"));
    assert.equal(sqlite.watch, undefined, "a SQLite store has watch(), but SQLite cannot push");
    const store = storeOn(pools[0]);
    assert.equal(typeof store.watch, "function");
    const key = uniqueKey("args");
    for (const [k, fn] of [[123, () => {}], ["", () => {}], [null, () => {}], [key, null], [key, "onChange"], [key, {}]]) {
      await assert.rejects(store.watch(k, fn), TypeError, `watch(${JSON.stringify(k)}, ${typeof fn}) did not reject with TypeError`);
    }
    assert.deepEqual(await watcherRows(key), [], "a refused watch registered the key");
  });

  test("every change a store operation makes is reported once, in commit order, with fence and metadata and no owner", { timeout: 30_000 }, async () => {
    const [watcher, a, b] = [storeOn(pools[0]), storeOn(pools[1]), storeOn(pools[2])];
    await reportsEveryChange({ watcher, actors: [a, b] });
  });

  test("the watching store's own operations are reported as well", { timeout: 30_000 }, async () => {
    const store = storeOn(pools[0]);
    await reportsEveryChange({ watcher: store, actors: [store, store] });
  });

  test("expiry and extend are not reported; the takeover of an expired hold is", { timeout: 30_000 }, async () => {
    const [watcher, store] = [storeOn(pools[0]), storeOn(pools[1])];
    const key = uniqueKey("expiry");
    const { reports, stop } = await watching(watcher, key);
    try {
      const a = owner("a");
      // Held for its extend (on a loaded machine too), which gives it 400 ms.
      const first = await store.acquire(key, a, LONG, "short");
      assert.equal(await store.extend(key, a, 400), true);
      await sleep(700); // expired
      assert.equal(await store.isLocked(key), false);
      const b = owner("b");
      const second = await store.acquire(key, b, LONG);
      assert.equal(await store.release(key, a), false, "the expired holder's release was answered true");
      await settled(reports, 2);
      assert.deepEqual(comparable(reports), [grantOf(first, "short"), grantOf(second)], "an extend, an expiry or a late release was reported");
      assert.ok(reports[0].remainingMs > LONG - 10_000, `the first grant's remainingMs is ${reports[0].remainingMs} of ${LONG}`);
      assert.equal(await store.release(key, b), true);
    } finally {
      await stop();
    }
  });

  test("shared holds are not reported; an exclusive waiter handed the key by a shared release is", { timeout: 30_000 }, async () => {
    const [watcher, store] = [storeOn(pools[0]), storeOn(pools[1])];
    const key = uniqueKey("shared");
    const { reports, stop } = await watching(watcher, key);
    try {
      const [r1, r2] = [owner("r1"), owner("r2")];
      assert.ok((await store.acquireShared(key, r1, LONG, 1, 4, "reader")).fence);
      assert.ok((await store.acquireShared(key, r2, LONG, 1, 4)).fence);
      assert.equal(await store.release(key, r2), true);
      const w = owner("writer");
      const writer = store.acquireOrWait(key, w, LONG, 20_000, 60_000, "writer");
      await queued(store, key, 1);
      assert.equal(await store.release(key, r1), true);
      const granted = await writer;
      assert.equal(await store.release(key, w), true);
      const r3 = owner("r3");
      assert.ok((await store.acquireShared(key, r3, LONG, 1, 4)).fence);
      assert.equal(await store.forceRelease(key), true);
      await settled(reports, 2);
      assert.deepEqual(comparable(reports), [grantOf(granted, "writer"), endOf(granted.fence)], "a shared hold was reported, or the writer's hold was not");
    } finally {
      await stop();
    }
  });

  test("two stores watching one key, and two watches on one store, each get every report", { timeout: 30_000 }, async () => {
    const [one, two, actor] = [storeOn(pools[0]), storeOn(pools[1]), storeOn(pools[2])];
    const key = uniqueKey("two");
    const watches = [await watching(one, key), await watching(two, key), await watching(two, key)];
    const expected = [];
    try {
      for (let i = 0; i < 5; i++) {
        const o = owner(`h${i}`);
        const answer = await actor.acquire(key, o, LONG, `holder ${i}`);
        expected.push(grantOf(answer, `holder ${i}`));
        assert.equal(await actor.release(key, o), true);
        expected.push(endOf(answer.fence));
      }
      for (const { reports } of watches) await settled(reports, expected.length);
      for (const [i, { reports }] of watches.entries()) assert.deepEqual(comparable(reports), expected, `watch ${i} missed or reordered reports`);
      // Each watch has its own report object.
      assert.notEqual(watches[1].reports[0], watches[2].reports[0]);
      // One of the second store's watches stops; the other still hears, and the key stays registered.
      await watches[2].stop();
      assert.equal((await watcherRows(key)).length, 2, "one watch's stop unregistered the store's other watch of the key");
      const o = owner("after");
      const answer = await actor.acquire(key, o, LONG);
      await settled(watches[1].reports, expected.length + 1);
      assert.deepEqual(comparable(watches[1].reports.slice(expected.length)), [grantOf(answer)]);
      assert.equal(watches[2].reports.length, expected.length, "a stopped watch was told");
      assert.equal(await actor.release(key, o), true);
    } finally {
      for (const w of watches) await w.stop();
    }
  });

  test("stop() ends the reports at once and unregisters the key; a second stop() changes nothing", { timeout: 30_000 }, async () => {
    const [watcher, store] = [storeOn(pools[0]), storeOn(pools[1])];
    const key = uniqueKey("stop");
    const { reports, stop } = await watching(watcher, key);
    assert.equal((await watcherRows(key)).length, 1, "the watch registered no lease");
    assert.ok(Number((await lockRowOf(key)).watched_until) > Date.now(), "the lock row does not say the key is watched");
    const a = owner("a");
    const answer = await store.acquire(key, a, LONG);
    await settled(reports, 1);
    const stopping = stop();
    const release = store.release(key, a); // made while the stop is under way: not reported
    await stopping;
    assert.equal(await release, true);
    await stop();
    assert.deepEqual(await watcherRows(key), [], "the key is still registered after stop()");
    assert.equal(await lockRowOf(key), null, "the row kept for the watch outlived it");
    const seen = await notificationsDuring(watcher.table + "_watch", async () => {
      const b = owner("b");
      assert.ok(await store.acquire(key, b, LONG));
      assert.equal(await store.release(key, b), true);
    });
    assert.deepEqual(seen, [], "an unwatched key's operations still NOTIFY");
    await sleep(100);
    assert.deepEqual(comparable(reports), [grantOf(answer)], "onChange was called after stop()");
    // The store gives its LISTEN connection back once nothing waits or watches.
    const deadline = Date.now() + 20_000;
    while (watcher.listening) {
      assert.ok(Date.now() < deadline, "the store still listens with no watch left");
      await sleep(5);
    }
  });

  test("a key nobody watches: no NOTIFY, and its row goes with its release; a watched key's row stays, expired and ownerless", async () => {
    const store = storeOn(pools[0]);
    const key = uniqueKey("cost");
    const seen = await notificationsDuring("keel_locks_watch", async () => {
      const a = owner();
      assert.ok(await store.acquire(key, a, LONG));
      assert.equal(await store.extend(key, a, LONG), true);
      assert.equal(await store.release(key, a), true);
    });
    assert.deepEqual(seen, []);
    assert.equal(await lockRowOf(key), null);
    const { stop } = await watching(store, key);
    try {
      const b = owner();
      const heard = await notificationsDuring("keel_locks_watch", async () => {
        assert.ok(await store.acquire(key, b, LONG));
        assert.equal(await store.release(key, b), true);
      });
      assert.equal(heard.length, 2, `a watched key's acquire and release sent ${JSON.stringify(heard)}`);
      for (const payload of heard) assert.ok(!payload.includes(b), `a NOTIFY payload carries the owner: ${payload}`);
      const row = await lockRowOf(key);
      assert.equal(row?.owner, "", "a watched key's row did not stay after its release");
      assert.equal(Number(row.expires_at), 0);
      assert.equal(await store.isLocked(key), false);
      assert.deepEqual((await store.inspect(key)).holders, []);
      assert.equal(await store.purgeExpired() >= 0, true);
      assert.notEqual(await lockRowOf(key), null, "purgeExpired() took the row of a watched key");
    } finally {
      await stop();
    }
  });

  test("a killed LISTEN connection: onChange(null) once listening again, then the reports go on; the pool gets the dead connection back", { timeout: 30_000 }, async () => {
    const pool = new pg.Pool({ connectionString: server.connectionString, max: 4 });
    pool.on("error", () => {});
    const watcher = databaseLockStore(pool);
    const store = storeOn(pools[1]);
    const key = uniqueKey("killed");
    const { reports, stop } = await watching(watcher, key);
    const pid = watcher.listenClient?.processID;
    assert.ok(pid, "no LISTEN connection");
    await raw.query("SELECT pg_terminate_backend($1)", [pid]);
    await settled(reports, 1);
    assert.deepEqual(reports, [null], "the lost connection was not followed by one onChange(null)");
    assert.ok(watcher.listening, "the store did not listen again");
    assert.notEqual(watcher.listenClient.processID, pid);
    const a = owner();
    const answer = await store.acquire(key, a, LONG, "after");
    assert.equal(await store.release(key, a), true);
    await settled(reports, 3);
    assert.deepEqual(comparable(reports.slice(1)), [grantOf(answer, "after"), endOf(answer.fence)], "no reports after the connection came back");
    await stop();
    // The dead connection went back to the pool: ending it finishes once the store is idle.
    const deadline = Date.now() + 20_000;
    while (watcher.listening) {
      assert.ok(Date.now() < deadline, "the store still listens with no watch left");
      await sleep(5);
    }
    const ended = await Promise.race([pool.end().then(() => "ended"), sleep(20_000).then(() => "pool.end() still pending")]);
    assert.equal(ended, "ended");
  });

  test("a report too long for a NOTIFY payload is a look-again (null) for that key's watchers", { timeout: 30_000 }, async () => {
    const [watcher, store] = [storeOn(pools[0]), storeOn(pools[1])];
    const key = `${uniqueKey("long")}:${"k".repeat(3000)}`;
    const { reports, stop } = await watching(watcher, key);
    try {
      // 1024 bytes of control characters: JSON writes each as six, past Postgres's 8000 bytes.
      const metadata = "\u0001".repeat(1024);
      const a = owner();
      const answer = await store.acquire(key, a, LONG, metadata);
      assert.equal(await store.release(key, a), true);
      await settled(reports, 2);
      assert.deepEqual(comparable(reports), [null, endOf(answer.fence)], "the grant too long to send was not answered by a look-again");
    } finally {
      await stop();
    }
  });

  test("a watch whose lease runs out (its store died) stops costing reports; purgeExpired() removes it", { timeout: 30_000 }, async () => {
    const store = storeOn(pools[0]);
    const key = uniqueKey("lapsed");
    // What a store does when it watches, with a lease of 2 s that nobody renews (room for the
    // grant below to come inside it on a loaded machine).
    await raw.query('SELECT "keel_locks_watch"($1::text[], $2, 2000)', [[key], "a-store-that-died"]);
    const leased = Date.now();
    const a = owner();
    const heard = await notificationsDuring("keel_locks_watch", async () => {
      assert.ok(await store.acquire(key, a, LONG));
    });
    assert.equal(heard.length, 1, "the watched key's grant was not reported");
    await sleep(Math.max(0, leased + 2_000 + 300 - Date.now())); // past the lease
    const later = await notificationsDuring("keel_locks_watch", async () => {
      assert.equal(await store.release(key, a), true);
      assert.ok(await store.acquire(key, a, LONG));
      assert.equal(await store.release(key, a), true);
    });
    assert.deepEqual(later, [], "a lapsed lease still reports");
    assert.equal(await lockRowOf(key), null, "the row of a key whose watch lapsed stays");
    assert.equal((await watcherRows(key)).length, 1);
    await store.purgeExpired();
    assert.deepEqual(await watcherRows(key), [], "purgeExpired() left a lapsed watcher row");
  });

  test("observe, through keel-lock, is told every change at once: a leader that comes and goes between two polls is seen", { timeout: 30_000 }, async () => {
    const keel = await import(process.env.KEEL_LOCK_ENTRY ?? "keel-lock").then((m) => (m.default?.lock ? m.default : m));
    const store = storeOn(pools[0]);
    keel.setLockStore(store);
    const key = uniqueKey("observe");
    const controller = new AbortController();
    const seen = [];
    const iterating = (async () => {
      // Polling once a minute: without watch, nothing after the first look would be seen here.
      for await (const leader of keel.observe(key, { signal: controller.signal, intervalMs: 60_000 })) seen.push(leader);
    })();
    // observe's first look comes once its watch is live.
    for (const until = Date.now() + 20_000; seen.length < 1 && Date.now() < until; ) await sleep(10);
    const held = keel.lock(key, LONG);
    assert.ok(await held.acquire({ metadata: "leader one" }));
    const fence = held.fence;
    await held.release();
    for (const until = Date.now() + 20_000; seen.length < 3 && Date.now() < until; ) await sleep(10);
    controller.abort();
    await iterating;
    assert.deepEqual(seen, [null, { metadata: "leader one", fence }, null], "observe did not see the leader come and go");
  });
});

describe("the conformance kit's watch property (pg)", () => {
  test("keel-lock/testing holds the PostgreSQL store to watch_reports_every_change_in_order, and it passes", { timeout: 60_000 }, async () => {
    const { lockStoreResults } = await import("keel-lock/testing");
    const store = storeOn(pools[0]);
    const results = await lockStoreResults(store, { keyPrefix: `keel-test:kit:${tag()}:` });
    const watch = results.find((r) => r.property === "watch_reports_every_change_in_order");
    assert.ok(watch, `the kit has no watch property: ${results.map((r) => r.property).join(", ")}`);
    assert.deepEqual({ ok: watch.ok, applicable: watch.applicable, message: watch.message }, { ok: true, applicable: true, message: null });
    const failed = results.filter((r) => !r.ok);
    assert.deepEqual(failed, [], "the PostgreSQL store fails the kit");
  });
});

describe("createTable() upgrades a table from before watch (pg)", () => {
  test("a lock held across the upgrade stays held; watch then works and reports its release", { timeout: 30_000 }, async () => {
    const table = `pre_watch_${tag()}`;
    const store = storeOn(pools[0], { table });
    // Today's layout without what watch added: the column, the watchers table, the triggers
    // and the functions.
    for (const statement of schemaStatements("postgres", table)) await raw.query(statement);
    await raw.query(`DROP TRIGGER "${table}_watch_on_update" ON "${table}"`);
    await raw.query(`DROP TRIGGER "${table}_watch_on_delete" ON "${table}"`);
    await raw.query(`ALTER TABLE "${table}" DROP COLUMN watched_until`);
    await raw.query(`DROP TABLE "${table}_watchers"`);
    for (const fn of ["watch", "unwatch", "watch_report"]) await raw.query(`DROP FUNCTION "${table}_${fn}"`);
    try {
      // Before the upgrade locks work, and watch says what to do.
      const a = owner("a");
      const held = await store.acquire(`${table}:held`, a, LONG, "from before");
      assert.ok(held.fence);
      const key = uniqueKey("upgrade");
      const b = owner("b");
      assert.ok(await store.acquire(key, b, LONG));
      assert.equal(await store.release(key, b), true);
      await assert.rejects(store.watch(key, () => {}), /createTable\(\)/, "watch on a table without watch did not name createTable()");
      await store.createTable();
      await store.createTable();
      const columns = (await raw.query("SELECT column_name FROM information_schema.columns WHERE table_name = $1 ORDER BY ordinal_position", [table])).rows;
      assert.equal(columns.at(-1).column_name, "watched_until");
      assert.equal(await store.isLocked(`${table}:held`), true, "the upgrade dropped a held lock");
      const { reports, stop } = await watching(store, `${table}:held`);
      try {
        assert.equal(await store.release(`${table}:held`, a), true);
        const c = owner("c");
        const next = await store.acquire(`${table}:held`, c, LONG, "after");
        assert.equal(await store.release(`${table}:held`, c), true);
        await settled(reports, 3);
        assert.deepEqual(comparable(reports), [endOf(held.fence), grantOf(next, "after"), endOf(next.fence)]);
      } finally {
        await stop();
      }
    } finally {
      await raw.query(`DROP TABLE IF EXISTS "${table}", "${table}_waiters", "${table}_shared", "${table}_watchers"`);
      await raw.query(`DROP SEQUENCE IF EXISTS "${table}_fence_seq"`);
    }
  });
});

describe("the checks catch a store that does not report (pg)", () => {
  for (const [dropped, what] of [
    ["update", "grants and hand-overs are not reported"],
    ["delete", "releases are not reported"],
  ]) {
    test(`without the ${dropped} trigger, ${what}: reportsEveryChange fails`, { timeout: 30_000 }, async () => {
      const table = `broken_${dropped}_${tag()}`;
      const stores = [0, 1, 2].map((i) => storeOn(pools[i], { table }));
      await stores[0].createTable();
      await raw.query(`DROP TRIGGER "${table}_watch_on_${dropped}" ON "${table}"`);
      try {
        await assert.rejects(
          reportsEveryChange({ watcher: stores[0], actors: stores.slice(1) }),
          (error) => error instanceof assert.AssertionError && /not the changes/.test(error.message),
        );
      } finally {
        for (const store of stores) await store.close();
        await raw.query(`DROP TABLE IF EXISTS "${table}", "${table}_waiters", "${table}_shared", "${table}_watchers"`);
        await raw.query(`DROP SEQUENCE IF EXISTS "${table}_fence_seq"`);
      }
    });
  }
});

describe("the process exits when the user ends their pool while a watch is on (pg)", () => {
  test("pool.end() without stop(): onChange(null), and the process ends by itself (within 10 s)", { timeout: 60_000 }, async () => {
    const child = spawn(process.execPath, ["--input-type=module", "-e", CHILD, server.connectionString], {
      cwd: fileURLToPath(new URL(".", import.meta.url)),
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (err += d));
    let closingAt = null;
    const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal, at: Date.now() })));
    const kill = setTimeout(() => child.kill("SIGKILL"), 50_000);
    while (closingAt === null && child.exitCode === null) {
      if (out.includes("closing")) closingAt = Date.now();
      await sleep(10);
    }
    const { code, signal, at } = await exited;
    clearTimeout(kill);
    assert.equal(err, "", "nothing on stderr");
    assert.equal(signal, null, `the child was killed: ${out}`);
    assert.equal(code, 0, out);
    assert.ok(closingAt !== null && at - closingAt < 10_000, `the process ended ${at - closingAt} ms after pool.end(): ${out}`);
    assert.match(out, /told: \[null\]/, "the watch was not told to look again when the pool ended");
  });
});

// The child: a pool, a store, a watch — then pool.end() and nothing else.
const CHILD = `
import pg from "pg";
import { databaseLockStore } from "../../pkg/stores/sql.js";
const pool = new pg.Pool({ connectionString: process.argv[1], max: 3 });
const store = databaseLockStore(pool, { table: "exit_watch" });
await store.createTable();
const told = [];
await store.watch("exit:watched", (change) => told.push(change));
await store.acquire("exit:watched", "child-owner", 10000);
await store.release("exit:watched", "child-owner");
// Both reports in before the pool ends.
for (const deadline = Date.now() + 20000; told.length < 2 && Date.now() < deadline; ) await new Promise((resolve) => setTimeout(resolve, 10));
console.log("closing");
await pool.end();
console.log("told: " + JSON.stringify(told.slice(2)));
`;
