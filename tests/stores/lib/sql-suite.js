// Tests that only make sense for databaseLockStore, run against each driver. `env()` answers
//   { dialect: "sqlite" | "postgres", db, stores: [store, …], raw }
// where raw(sql, params) runs SQL written with `?` placeholders directly on the database
// (bypassing the store) and answers the rows.
//
// Fences: `fenceLedger()` checks that every acquire answers { fence } with a fence larger than
// every earlier one for its key; `fenceScenario()` drives a key through release, expiry,
// purgeExpired() and races of 50 acquirers and feeds every fence to a ledger. Both are exported
// so the driver files can use them (restarts, threads) and so a broken variant can be shown to fail.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { inspect } from "node:util";
import { test } from "node:test";
import { databaseLockStore, schema, detectDriver } from "../../../pkg/stores/sql.js";
import { MAX_FENCE } from "../../../pkg/stores/args.js";
import { acquired } from "./contract.js";
import { sleep } from "./servers.js";

const LONG = 60_000;
// A lock meant to expire: short, then waited out with room to spare on a loaded machine.
const SHORT = 150;
const SETTLE = 250;
const CONTENDERS = 50;
const owner = () => randomBytes(16).toString("hex");
const uniqueKey = (label) => `keel-test:sql:${label}:${randomBytes(4).toString("hex")}`;
const uniqueTable = (label) => `${label}_${randomBytes(3).toString("hex")}`;

/**
 * Remembers the last fence per key. `take(key, answer, when)` asserts that `answer` is
 * `{ fence }` with an integer fence in 1..MAX_FENCE greater than every fence taken before for
 * that key, and answers the fence.
 */
export function fenceLedger() {
  const last = new Map();
  return {
    take(key, answer, when = "") {
      const where = when ? ` (${when})` : "";
      assert.ok(
        answer !== null && typeof answer === "object" && "fence" in answer,
        `acquire of ${key} answered ${inspect(answer)}, not { fence }${where}`,
      );
      const { fence } = answer;
      assert.ok(
        Number.isSafeInteger(fence) && fence >= 1 && fence <= MAX_FENCE,
        `fence ${inspect(fence)} is not an integer in 1..MAX_FENCE${where}`,
      );
      const before = last.get(key);
      assert.ok(
        before === undefined || fence > before,
        `fence ${fence} for ${key} is not greater than the fence ${before} handed out before it${where}`,
      );
      last.set(key, fence);
      return fence;
    },
    last: (key) => last.get(key),
  };
}

/** `count` acquires of one key at once, spread over `stores`; answers [{ owner, answer }]. */
export async function raceFor(stores, key, count, ttl) {
  const owners = Array.from({ length: count }, owner);
  const answers = await Promise.all(owners.map((o, i) => stores[i % stores.length].acquire(key, o, ttl)));
  return owners.map((o, i) => ({ owner: o, answer: answers[i] }));
}

/** Exactly one winner, every loser answered exactly `false`; the winner's fence goes to the ledger. */
function oneWinner(results, ledger, key, when) {
  const winners = results.filter((r) => acquired(r.answer));
  assert.equal(winners.length, 1, `${winners.length} of ${results.length} acquirers won (${when})`);
  for (const r of results) {
    if (r !== winners[0]) assert.equal(r.answer, false, `a losing acquire answered ${inspect(r.answer)} (${when})`);
  }
  ledger.take(key, winners[0].answer, when);
  return winners[0].owner;
}

/**
 * One key through every way a lock ends — release, expiry and takeover, purgeExpired() — and
 * races of 50 acquirers for a free and for an expired key, all fences checked by one ledger.
 * `stores` share one table; `purge()` runs purgeExpired() for it.
 */
export async function fenceScenario({ stores, purge = () => stores[0].purgeExpired() }, label = "fences") {
  const [store] = stores;
  const other = stores[stores.length - 1];
  const ledger = fenceLedger();
  const key = uniqueKey(label);

  let a = owner();
  ledger.take(key, await store.acquire(key, a, LONG), "first acquire");
  assert.equal(await store.acquire(key, owner(), LONG), false, "a held key was acquired");
  assert.equal(await store.release(key, a), true);
  a = owner();
  ledger.take(key, await other.acquire(key, a, LONG), "after a release");
  assert.equal(await other.release(key, a), true);

  ledger.take(key, await store.acquire(key, owner(), SHORT), "before expiry");
  await sleep(SHORT + SETTLE);
  ledger.take(key, await other.acquire(key, owner(), SHORT), "taking over the expired lock");
  await sleep(SHORT + SETTLE);

  assert.ok((await purge()) >= 1, "purgeExpired() did not remove the expired lock row");
  ledger.take(key, await store.acquire(key, owner(), SHORT), "after purgeExpired()");
  await sleep(SHORT + SETTLE);

  a = oneWinner(await raceFor(stores, key, CONTENDERS, LONG), ledger, key, `${CONTENDERS} acquirers, expired key`);
  assert.equal(await store.release(key, a), true);
  a = oneWinner(await raceFor(stores, key, CONTENDERS, LONG), ledger, key, `${CONTENDERS} acquirers, released key`);
  assert.equal(await store.release(key, a), true);

  // A released row is gone: purge finds nothing of it, and the counter still moves on.
  await purge();
  a = owner();
  ledger.take(key, await store.acquire(key, a, LONG), "after release and purgeExpired()");
  assert.equal(await store.release(key, a), true);
  return ledger.last(key);
}

// Drops a lock table and what createTable() made next to it.
async function dropLockTable(raw, dialect, table) {
  const parts = table.split(".");
  const last = parts[parts.length - 1];
  const schemaPrefix = parts.length === 2 ? `"${parts[0]}".` : "";
  await raw(`DROP TABLE IF EXISTS ${schemaPrefix}"${last}"`, []);
  await raw(`DROP TABLE IF EXISTS ${schemaPrefix}"${last}_shared"`, []);
  if (dialect === "sqlite") await raw(`DROP TABLE IF EXISTS ${schemaPrefix}"${last}_fence"`, []);
  else {
    await raw(`DROP SEQUENCE IF EXISTS ${schemaPrefix}"${last}_fence_seq"`, []);
    await raw(`DROP TABLE IF EXISTS ${schemaPrefix}"${last}_waiters"`, []);
    await raw(`DROP TABLE IF EXISTS ${schemaPrefix}"${last}_watchers"`, []);
    for (const fn of ["take_shared", "release_shared", "extend_shared", "hand_over", "tick", "take_many", "keep_fence", "watch", "unwatch", "watch_report"]) {
      await raw(`DROP FUNCTION IF EXISTS ${schemaPrefix}"${last}_${fn}"`, []);
    }
  }
}

// The table as schema() laid it out before fences: what existing installations have.
function unfencedDdl(dialect, table) {
  const type = dialect === "sqlite" ? "INTEGER" : "BIGINT";
  const keyNotNull = dialect === "sqlite" ? " NOT NULL" : "";
  return [
    `CREATE TABLE "${table}" (key TEXT PRIMARY KEY${keyNotNull}, owner TEXT NOT NULL, expires_at ${type} NOT NULL)`,
    `CREATE INDEX "${table}_expires_at_idx" ON "${table}" (expires_at)`,
  ];
}

export const BAD_TABLE_NAMES = [
  "locks; DROP TABLE keel_locks; --",
  'locks" (key) VALUES (1); --',
  "locks--",
  "locks)",
  "lo cks",
  "1locks",
  "",
  "a.b.c",
  ".locks",
  "locks.",
  "lócks",
  '"locks"',
  "`locks`",
  "[locks]",
  "locks\u0000",
  "x".repeat(64),
  null,
  42,
  {},
];

export function registerSqlTests(env, { driver }) {
  test(`the handle is detected as ${driver}`, () => {
    const { db, stores } = env();
    assert.equal(detectDriver(db), driver);
    assert.equal(stores[0].driver, driver);
    assert.equal(stores[0].table, "keel_locks");
  });

  test("forceRelease frees a key whoever holds it; the holder's extend is then refused", async () => {
    const { stores } = env();
    const key = uniqueKey("force");
    const [a, b] = [owner(), owner()];
    assert.equal(acquired(await stores[0].acquire(key, a, LONG)), true);
    assert.equal(await stores[1 % stores.length].forceRelease(key), true);
    assert.equal(await stores[0].isLocked(key), false);
    assert.equal(await stores[0].extend(key, a, LONG), false, "the forced-out holder extended");
    assert.equal(await stores[0].forceRelease(key), false, "nothing left to free");
    // The key is usable again, with a higher fence.
    assert.equal(acquired(await stores[0].acquire(key, b, LONG)), true);
    assert.equal(await stores[0].release(key, b), true);
  });

  test("unrecognised handles and options are refused", () => {
    const { db } = env();
    assert.throws(() => databaseLockStore({}), TypeError);
    assert.throws(() => databaseLockStore(null), TypeError);
    assert.throws(() => databaseLockStore(db, { driver: "mysql" }), TypeError);
    assert.throws(() => databaseLockStore(db, null), TypeError);
    for (const safetyNetMs of [0, -1, 1.5, NaN, "1000", 2 ** 31]) {
      assert.throws(() => databaseLockStore(db, { safetyNetMs }), RangeError, `safetyNetMs ${String(safetyNetMs)}`);
    }
  });

  test("a table name that is not a plain identifier is refused with TypeError, before any SQL runs", async () => {
    const { db, stores, raw, dialect } = env();
    const canary = uniqueKey("canary");
    const a = owner();
    assert.equal(acquired(await stores[0].acquire(canary, a, LONG)), true);
    for (const table of BAD_TABLE_NAMES) {
      assert.throws(() => databaseLockStore(db, { table }), TypeError, `accepted table ${JSON.stringify(table)}`);
      assert.throws(() => schema({ dialect, table }), TypeError, `schema() accepted ${JSON.stringify(table)}`);
    }
    // Nothing was dropped or written on the way.
    const rows = await raw("SELECT owner FROM keel_locks WHERE key = ?", [canary]);
    assert.deepEqual(rows.map((r) => r.owner), [a]);
    assert.equal(await stores[0].release(canary, a), true);
  });

  test("schema() has the DDL for both dialects, fence counter included; unknown dialects are refused", () => {
    for (const dialect of ["sqlite", "d1", "postgres", "pg"]) {
      const ddl = schema({ dialect, table: "my_locks" });
      assert.match(ddl, /CREATE TABLE IF NOT EXISTS "my_locks"/);
      assert.match(ddl, /key\s+TEXT/);
      assert.match(ddl, /expires_at\s+(BIGINT|INTEGER) NOT NULL/);
      assert.match(ddl, /CREATE INDEX IF NOT EXISTS "my_locks_expires_at_idx"/);
    }
    for (const dialect of ["sqlite", "d1"]) {
      const ddl = schema({ dialect, table: "my_locks" });
      assert.match(ddl, /fence\s+INTEGER CHECK \(fence BETWEEN 1 AND 9007199254740991\)/);
      assert.match(ddl, /CREATE TABLE IF NOT EXISTS "my_locks_fence"/);
      assert.match(ddl, /CREATE TRIGGER IF NOT EXISTS "my_locks_fence_on_insert" AFTER INSERT ON "my_locks"/);
      assert.match(ddl, /CREATE TRIGGER IF NOT EXISTS "my_locks_fence_on_update" AFTER UPDATE OF fence ON "my_locks"/);
    }
    for (const dialect of ["postgres", "pg"]) {
      const ddl = schema({ dialect, table: "my_locks" });
      assert.match(ddl, /CREATE SEQUENCE IF NOT EXISTS "my_locks_fence_seq" .*MAXVALUE 9007199254740991 .*CACHE 1 /);
    }
    assert.match(schema(), /"keel_locks"/);
    assert.throws(() => schema({ dialect: "oracle" }), TypeError);
  });

  test("createTable is idempotent and creates key, owner, expires_at (and the fence counter)", async () => {
    const { stores, raw, dialect } = env();
    await stores[0].createTable();
    await stores[0].createTable();
    const columns =
      dialect === "sqlite"
        ? (await raw("SELECT name FROM pragma_table_info('keel_locks') ORDER BY cid", [])).map((r) => r.name)
        : (
            await raw(
              "SELECT column_name AS name FROM information_schema.columns WHERE table_name = 'keel_locks' ORDER BY ordinal_position",
              [],
            )
          ).map((r) => r.name);
    if (dialect === "sqlite") {
      // The fence and metadata of the current holder sit in its row; the counter is a one-row table.
      assert.deepEqual(columns, ["key", "owner", "expires_at", "fence", "metadata"]);
      const counter = await raw('SELECT id, value FROM "keel_locks_fence"', []);
      assert.equal(counter.length, 1);
      assert.equal(counter[0].id, 1);
    } else {
      // queued_until: the latest deadline of a caller that queued for the key (acquireOrWait);
      // fence and metadata: the current holder's; watched_until: the latest lease of a watch.
      assert.deepEqual(columns, ["key", "owner", "expires_at", "queued_until", "fence", "metadata", "watched_until"]);
      const waiterColumns = (
        await raw(
          "SELECT column_name AS name FROM information_schema.columns WHERE table_name = 'keel_locks_waiters' ORDER BY ordinal_position",
          [],
        )
      ).map((r) => r.name);
      assert.deepEqual(waiterColumns, ["key", "owner", "seq", "ttl_ms", "enqueued_at", "deadline", "granted_at", "fence", "weight", "lim", "metadata"]);
      const [seq] = await raw(
        "SELECT max_value::text AS max, cache_size::text AS cache, cycle FROM pg_sequences WHERE sequencename = 'keel_locks_fence_seq'",
        [],
      );
      assert.deepEqual(seq, { max: String(MAX_FENCE), cache: "1", cycle: false });
    }
  });

  test("now() is the database's wall clock in ms", async () => {
    const { stores } = env();
    const now = await stores[0].now();
    assert.ok(Number.isSafeInteger(now), `now() = ${now}`);
    assert.ok(Math.abs(now - Date.now()) < 5_000, `database clock ${now} vs ${Date.now()}`);
  });

  test("acquire writes expires_at = database now + ttl", async () => {
    const { stores, raw } = env();
    const store = stores[0];
    const [key, a] = [uniqueKey("expiry"), owner()];
    const before = await store.now();
    assert.equal(acquired(await store.acquire(key, a, LONG)), true);
    const after = await store.now();
    const [row] = await raw("SELECT expires_at FROM keel_locks WHERE key = ?", [key]);
    const expires = Number(row.expires_at);
    assert.ok(expires >= before + LONG && expires <= after + LONG, `${expires} not in [${before}, ${after}] + ${LONG}`);
    assert.equal(await store.release(key, a), true);
  });

  test("the upsert takes over an expired row in one statement and answers a row only to the winner", async () => {
    const { stores, raw } = env();
    const store = stores[0];
    const [key, stale, b, c] = [uniqueKey("takeover"), owner(), owner(), owner()];
    const now = await store.now();
    await raw("INSERT INTO keel_locks (key, owner, expires_at) VALUES (?, ?, ?)", [key, stale, now - 1]);
    assert.equal(await store.isLocked(key), false, "a row expired by the database clock reads as held");
    assert.equal(acquired(await store.acquire(key, b, LONG)), true, "the expired row was not taken over");
    assert.equal(await store.acquire(key, c, LONG), false, "a live row was taken over");
    const rows = await raw("SELECT owner FROM keel_locks WHERE key = ?", [key]);
    assert.deepEqual(rows.map((r) => r.owner), [b]);
    assert.equal(await store.release(key, stale), false);
    assert.equal(await store.release(key, b), true);
  });

  test("a row that is live by the database clock is held, whatever the caller thinks", async () => {
    const { stores, raw } = env();
    const store = stores[0];
    const [key, a, b] = [uniqueKey("live"), owner(), owner()];
    const now = await store.now();
    await raw("INSERT INTO keel_locks (key, owner, expires_at) VALUES (?, ?, ?)", [key, a, now + 30_000]);
    assert.equal(await store.isLocked(key), true);
    const left = await store.remainingTime(key);
    assert.ok(left > 25_000 && left <= 30_000, `remainingTime ${left}`);
    assert.equal(await store.acquire(key, b, LONG), false);
    assert.equal(await store.extend(key, a, LONG), true);
    assert.equal(await store.release(key, a), true);
  });

  test("release of one's own expired row answers false and clears the row", async () => {
    const { stores, raw } = env();
    const store = stores[0];
    const [key, a] = [uniqueKey("garbage"), owner()];
    const now = await store.now();
    await raw("INSERT INTO keel_locks (key, owner, expires_at) VALUES (?, ?, ?)", [key, a, now - 1_000]);
    assert.equal(await store.release(key, a), false);
    assert.deepEqual(await raw("SELECT owner FROM keel_locks WHERE key = ?", [key]), []);
  });

  test("purgeExpired deletes exactly the rows expired by the database clock", async () => {
    const { db, raw, dialect } = env();
    const table = `purge_${randomBytes(3).toString("hex")}`;
    const store = databaseLockStore(db, { table });
    await store.createTable();
    assert.equal(await store.purgeExpired(), 0);
    const now = await store.now();
    const rows = [
      ["expired-1ms", now - 1],
      ["expired-1m", now - 60_000],
      ["expired-epoch", 0],
      ["live-1m", now + 60_000],
      ["live-1h", now + 3_600_000],
    ];
    for (const [key, expires] of rows) {
      await raw(`INSERT INTO ${table} (key, owner, expires_at) VALUES (?, ?, ?)`, [key, owner(), expires]);
    }
    assert.equal(await store.purgeExpired(), 3);
    const left = (await raw(`SELECT key FROM ${table} ORDER BY key`, [])).map((r) => r.key);
    assert.deepEqual(left, ["live-1h", "live-1m"]);
    assert.equal(await store.purgeExpired(), 0);
    await dropLockTable(raw, dialect, table);
  });

  test("a custom table name (and a table laid out as in the Keel docs, once createTable() adds fences) works", async () => {
    const { db, raw, dialect } = env();
    const table = uniqueTable("Docs_Locks");
    // The column layout from the Keel documentation, created by the application itself.
    await raw(`CREATE TABLE "${table}" (key TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_at BIGINT NOT NULL)`, []);
    const store = databaseLockStore(db, { table });
    await store.createTable();
    const [key, a, b] = [uniqueKey("custom"), owner(), owner()];
    const ledger = fenceLedger();
    ledger.take(key, await store.acquire(key, a, LONG));
    assert.equal(await store.acquire(key, b, LONG), false);
    assert.equal((await raw(`SELECT owner FROM "${table}" WHERE key = ?`, [key]))[0].owner, a);
    assert.equal(await store.release(key, a), true);
    await dropLockTable(raw, dialect, table);
    // Schema-qualified names are accepted too; the counter lives in the same schema. Another
    // table is another set of locks, with its own counter: a new ledger.
    const qualified = dialect === "sqlite" ? "main.qualified_locks" : "public.qualified_locks";
    const q = databaseLockStore(db, { table: qualified });
    await q.createTable();
    const qLedger = fenceLedger();
    qLedger.take(key, await q.acquire(key, b, LONG));
    assert.equal(await q.isLocked(key), true);
    assert.equal(await q.release(key, b), true);
    qLedger.take(key, await q.acquire(key, b, LONG));
    assert.equal(await q.release(key, b), true);
    await dropLockTable(raw, dialect, qualified);
  });

  // ---------------------------------------------------------------------------------------------
  // Fences

  test("acquire answers { fence } with a safe integer, or exactly false — never true", async () => {
    const { stores } = env();
    const [key, a, b] = [uniqueKey("answer"), owner(), owner()];
    const answer = await stores[0].acquire(key, a, LONG);
    assert.deepEqual(Object.keys(answer), ["fence"]);
    assert.equal(typeof answer.fence, "number");
    assert.ok(Number.isSafeInteger(answer.fence) && answer.fence >= 1, `fence ${answer.fence}`);
    assert.equal(await stores[0].acquire(key, b, LONG), false);
    assert.equal(await stores[0].acquire(key, a, LONG), false, "the holder re-acquired");
    assert.equal(await stores[0].release(key, a), true);
  });

  test(`fences strictly increase per key across release, expiry, purgeExpired() and ${CONTENDERS} competing acquirers`, { timeout: 60_000 }, async () => {
    const { stores } = env();
    await fenceScenario({ stores });
  });

  test("keys share the table's counter: fences are unique across keys, each key's still increasing", async () => {
    const { stores } = env();
    const ledger = fenceLedger();
    const keys = [uniqueKey("k1"), uniqueKey("k2"), uniqueKey("k3")];
    const seen = new Set();
    for (let round = 0; round < 3; round++) {
      for (const key of keys) {
        const a = owner();
        const fence = ledger.take(key, await stores[round % stores.length].acquire(key, a, LONG), `round ${round}`);
        assert.ok(!seen.has(fence), `fence ${fence} handed out twice`);
        seen.add(fence);
        assert.equal(await stores[0].release(key, a), true);
      }
    }
  });

  test("the fence check catches a broken variant: a counter that purgeExpired() resets", { timeout: 60_000 }, async () => {
    const { db, raw, dialect } = env();
    const table = uniqueTable("broken_fences");
    const store = databaseLockStore(db, { table });
    await store.createTable();
    // The design this library avoids: a fence kept only with the lock rows, so deleting the rows
    // (here: purging) starts the count again.
    const reset = dialect === "sqlite" ? `UPDATE "${table}_fence" SET value = 0` : `ALTER SEQUENCE "${table}_fence_seq" RESTART`;
    const purge = async () => {
      const removed = await store.purgeExpired();
      await raw(reset, []);
      return removed;
    };
    await assert.rejects(
      fenceScenario({ stores: [store], purge }, "broken"),
      (error) => error instanceof assert.AssertionError && /not greater than the fence \d+ handed out before it \(after purgeExpired\(\)\)/.test(error.message),
    );
    await dropLockTable(raw, dialect, table);
  });

  test("migration: createTable() upgrades a table laid out without fences; live locks stay held", async () => {
    const { db, raw, dialect } = env();
    const table = uniqueTable("unfenced");
    for (const ddl of unfencedDdl(dialect, table)) await raw(ddl, []);
    const store = databaseLockStore(db, { table });
    const [held, stale, a, b] = [uniqueKey("held"), uniqueKey("stale"), owner(), owner()];
    const now = await store.now();
    await raw(`INSERT INTO "${table}" (key, owner, expires_at) VALUES (?, ?, ?)`, [held, a, now + LONG]);
    await raw(`INSERT INTO "${table}" (key, owner, expires_at) VALUES (?, ?, ?)`, [stale, a, now - 1]);

    await store.createTable();
    await store.createTable(); // idempotent on the upgraded table

    assert.equal(await store.isLocked(held), true, "the upgrade dropped a live lock");
    const left = await store.remainingTime(held);
    assert.ok(left > LONG - 10_000 && left <= LONG, `remainingTime ${left} after the upgrade`);
    assert.equal(await store.acquire(held, b, LONG), false, "a live lock was taken after the upgrade");
    assert.equal(await store.extend(held, a, LONG), true, "the holder could not extend after the upgrade");

    const ledger = fenceLedger();
    ledger.take(stale, await store.acquire(stale, b, LONG), "taking over a row from before the upgrade");
    assert.equal(await store.release(held, a), true, "the holder could not release after the upgrade");
    const fence = ledger.take(held, await store.acquire(held, b, LONG), "first acquire after the upgrade");
    assert.notEqual(fence, ledger.last(stale));
    assert.equal(await store.release(held, b), true);
    ledger.take(held, await store.acquire(held, a, LONG), "second acquire after the upgrade");
    assert.equal(await store.release(held, a), true);
    assert.equal(await store.release(stale, b), true);

    if (dialect === "sqlite") {
      const columns = (await raw(`SELECT name FROM pragma_table_info('${table}') ORDER BY cid`, [])).map((r) => r.name);
      assert.deepEqual(columns, ["key", "owner", "expires_at", "fence", "metadata"]);
    }
    await dropLockTable(raw, dialect, table);
  });

  test("the last fence is MAX_FENCE, exactly; past it acquire fails and leaves no lock", async () => {
    const { db, raw, dialect } = env();
    const table = uniqueTable("max_fence");
    const store = databaseLockStore(db, { table });
    await store.createTable();
    const [key, a, b] = [uniqueKey("max"), owner(), owner()];
    // Bring the counter to just below the end, as if 2^53 − 2 fences had been handed out.
    if (dialect === "sqlite") await raw(`UPDATE "${table}_fence" SET value = ?`, [MAX_FENCE - 1]);
    else await raw(`ALTER SEQUENCE "${table}_fence_seq" RESTART WITH ${MAX_FENCE}`, []);
    assert.deepEqual(await store.acquire(key, a, LONG), { fence: MAX_FENCE });
    assert.equal(await store.release(key, a), true);
    await assert.rejects(store.acquire(key, b, LONG), dialect === "sqlite" ? /CHECK constraint failed/ : /maximum value of sequence/);
    assert.equal(await store.isLocked(key), false, "a refused acquire left a lock");
    if (dialect === "postgres") {
      // A sequence altered by hand to go further: the store refuses the fence it cannot
      // represent exactly, and releases the row it had just won.
      await raw(`ALTER SEQUENCE "${table}_fence_seq" MAXVALUE ${MAX_FENCE + 100}`, []);
      await assert.rejects(store.acquire(key, b, LONG), (error) => error instanceof RangeError && /9007199254740992, outside 1\.\.9007199254740991/.test(error.message));
      assert.equal(await store.isLocked(key), false, "a refused fence left a lock");
    }
    await dropLockTable(raw, dialect, table);
  });

  test("a 63-character table name gets a fence counter of its own", async () => {
    const { db, raw, dialect } = env();
    // Postgres cuts identifiers at 63 bytes: "<table>_fence_seq" must not be cut back to the
    // table's own name. Two long names differing only at the end must not share a counter.
    const base = `long_${randomBytes(3).toString("hex")}_`;
    const tables = ["a", "b"].map((end) => base.padEnd(62, "x") + end);
    const stores = tables.map((table) => databaseLockStore(db, { table }));
    for (const store of stores) await store.createTable();
    const key = uniqueKey("long");
    const ledgers = [fenceLedger(), fenceLedger()];
    for (let round = 0; round < 2; round++) {
      for (const i of [0, 1]) {
        ledgers[i].take(key, await stores[i].acquire(key, `o${round}`, LONG), `${tables[i]}, round ${round}`);
        assert.equal(await stores[i].release(key, `o${round}`), true);
      }
    }
    // Separate counters: each table started at 1.
    assert.deepEqual([ledgers[0].last(key), ledgers[1].last(key)], [2, 2]);
    for (const table of tables) {
      if (dialect === "postgres") {
        const sequence = schema({ dialect, table }).match(/CREATE SEQUENCE IF NOT EXISTS ("[^"]+")/)[1];
        assert.ok(sequence.length - 2 <= 63, sequence);
        const waiters = schema({ dialect, table }).match(/CREATE TABLE IF NOT EXISTS ("[^"]+")\s*\(\s*key\s+TEXT\s+NOT NULL/)[1];
        assert.ok(waiters.length - 2 <= 63 && waiters !== `"${table}"`, waiters);
        await raw(`DROP TABLE "${table}", ${waiters}`, []);
        await raw(`DROP SEQUENCE ${sequence}`, []);
      } else {
        await dropLockTable(raw, dialect, table);
      }
    }
  });

  if (driver !== "pg") {
    test("SQLite: a missing counter row is reported, not answered as a fence; createTable() restores it above the fences in the rows", async () => {
      const { db, raw } = env();
      const table = uniqueTable("lost_counter");
      const store = databaseLockStore(db, { table });
      await store.createTable();
      const [key, other, a, b] = [uniqueKey("lost"), uniqueKey("other"), owner(), owner()];
      const ledger = fenceLedger();
      ledger.take(key, await store.acquire(key, a, LONG));
      const live = ledger.take(other, await store.acquire(other, a, LONG));
      await raw(`DELETE FROM "${table}_fence"`, []);
      assert.equal(await store.release(key, a), true);
      await assert.rejects(store.acquire(key, b, LONG), /no fence.*createTable/);
      assert.equal(await store.isLocked(key), false, "an acquire without a fence left a lock");
      await store.createTable();
      const next = ledger.take(key, await store.acquire(key, b, LONG));
      assert.ok(next > live, `fence ${next} after restoring the counter is not above the live row's ${live}`);
      await dropLockTable(raw, "sqlite", table);
    });
  }

  registerSharedTests(env, { driver });
}

// ---------------------------------------------------------------------------------------------
// Shared holds: semaphore permits (weight under a limit) and read locks (weight 1 under
// READ_LIMIT), next to exclusive locks on the same keys.

export const READ_LIMIT = 4_294_967_295;

/** The weights of the live shared holds of `key`, read from the table itself. */
async function liveShares(raw, key, table = "keel_locks") {
  const rows = await raw(
    `SELECT owner, weight, lim, expires_at FROM "${table}_shared" WHERE key = ? ORDER BY owner`,
    [key],
  );
  return rows;
}

/**
 * `requests` ([{ weight, limit }]) for one key at once, spread over `stores`, each with its own
 * owner; answers [{ owner, weight, answer }].
 */
export async function raceShared(stores, key, requests, ttl) {
  const owners = requests.map(owner);
  const answers = await Promise.all(
    requests.map(({ weight, limit }, i) => stores[i % stores.length].acquireShared(key, owners[i], ttl, weight, limit)),
  );
  return requests.map(({ weight }, i) => ({ owner: owners[i], weight, answer: answers[i] }));
}

function registerSharedTests(env, { driver }) {
  test("shared: acquireShared grants permits up to the limit, answers false past it, and release frees exactly one holder's permits", async () => {
    const { stores } = env();
    const [store, other] = [stores[0], stores[stores.length - 1]];
    const key = uniqueKey("permits");
    const [a, b, c, d] = [owner(), owner(), owner(), owner()];
    const first = await store.acquireShared(key, a, LONG, 2, 3);
    assert.deepEqual(Object.keys(first), ["fence"]);
    assert.ok(Number.isSafeInteger(first.fence) && first.fence >= 1);
    assert.ok(acquired(await other.acquireShared(key, b, LONG, 1, 3)), "a permit that fits was refused");
    assert.equal(await store.acquireShared(key, c, LONG, 1, 3), false, "a fourth permit of 3 was granted");
    assert.equal(await store.acquireShared(key, b, LONG, 1, 3), false, "a holder was granted a second hold");
    assert.equal(await other.release(key, a), true);
    assert.equal(await other.release(key, a), false, "a permit was released twice");
    assert.equal(await store.isLocked(key), true, "releasing one holder freed the others");
    assert.ok(acquired(await store.acquireShared(key, c, LONG, 2, 3)), "the released permits were not free again");
    assert.equal(await store.acquireShared(key, d, LONG, 1, 3), false);
    assert.equal(await store.release(key, b), true);
    assert.equal(await store.release(key, c), true);
    assert.equal(await store.isLocked(key), false);
    assert.equal(await store.remainingTime(key), null);
    // Invalid weights and limits are refused before any SQL runs.
    for (const [weight, limit] of [[0, 3], [4, 3], [1, 0], [1, READ_LIMIT + 1], [1.5, 3], [1, 2.5], ["1", 3], [1, NaN]]) {
      await assert.rejects(async () => store.acquireShared(key, d, LONG, weight, limit), RangeError, `weight ${weight}, limit ${limit}`);
    }
    await assert.rejects(async () => store.acquireShared("", d, LONG, 1, 3), TypeError);
    await assert.rejects(async () => store.acquireShared(key, d, 0, 1, 3), RangeError);
    assert.equal(await store.isLocked(key), false, "a refused call left a hold behind");
  });

  test("shared: at most `limit` permits are ever held by racing callers (6 rounds of 40, weights 1–3 under 7, and 4 exclusive acquirers), and the rows agree", { timeout: 60_000 }, async () => {
    const { stores, raw } = env();
    const key = uniqueKey("race");
    const ledger = fenceLedger();
    for (let round = 0; round < 6; round++) {
      const requests = Array.from({ length: 40 }, (_, i) => ({ weight: 1 + ((i + round) % 3), limit: 7 }));
      const writers = Array.from({ length: 4 }, () => owner());
      const [results, written] = await Promise.all([
        raceShared(stores, key, requests, LONG),
        Promise.all(writers.map((w, i) => stores[(i + 1) % stores.length].acquire(key, w, LONG))),
      ]);
      const winners = results.filter((r) => acquired(r.answer));
      const writer = writers.filter((_, i) => acquired(written[i]));
      if (writer.length > 0) {
        // A lock won the race: alone.
        assert.deepEqual([writer.length, winners.length], [1, 0], `round ${round}: ${writer.length} locks beside ${winners.length} permits`);
        assert.equal(await stores[0].release(key, writer[0]), true);
        continue;
      }
      const held = winners.reduce((sum, r) => sum + r.weight, 0);
      assert.ok(held <= 7, `round ${round}: ${held} permits of 7 granted`);
      assert.ok(held >= 5, `round ${round}: only ${held} permits of 7 granted (a free permit was refused)`);
      for (const r of results) if (!acquired(r.answer)) assert.equal(r.answer, false, `round ${round}: a refusal answered ${inspect(r.answer)}`);
      const fences = winners.map((r) => r.answer.fence).sort((x, y) => x - y);
      assert.equal(new Set(fences).size, fences.length, `round ${round}: a fence was handed out twice`);
      for (const fence of fences) ledger.take(key, { fence }, `round ${round}`);
      const rows = await liveShares(raw, key);
      assert.deepEqual(rows.map((r) => r.owner).sort(), winners.map((r) => r.owner).sort(), `round ${round}: rows and winners differ`);
      assert.equal(await stores[0].acquire(key, owner(), LONG), false, "an exclusive acquire was granted beside permits");
      await Promise.all(winners.map((r, i) => stores[i % stores.length].release(key, r.owner)));
      assert.equal(await stores[0].isLocked(key), false, `round ${round}: held after every holder released`);
    }
  });

  test("shared: each permit expires on its own; the key reads as held until the last one does", { timeout: 30_000 }, async () => {
    const { stores, raw } = env();
    const store = stores[0];
    const key = uniqueKey("permit-expiry");
    const [short, long, next, writer] = [owner(), owner(), owner(), owner()];
    // The short permit is held for the refusal right after it (on a loaded machine too), then
    // given a short TTL that runs out.
    assert.ok(acquired(await store.acquireShared(key, short, LONG, 1, 2)));
    assert.ok(acquired(await store.acquireShared(key, long, 20_000, 1, 2)));
    assert.equal(await store.acquireShared(key, next, LONG, 1, 2), false);
    assert.equal(await store.extend(key, short, SHORT), true);
    await sleep(SHORT + SETTLE);
    assert.equal(await store.extend(key, short, LONG), false, "an expired permit was extended");
    assert.ok(acquired(await store.acquireShared(key, next, LONG, 1, 2)), "an expired permit was not free again");
    assert.equal(await store.release(key, short), false, "an expired permit released as live");
    assert.deepEqual((await liveShares(raw, key)).map((r) => r.owner).sort(), [long, next].sort(), "the expired permit's row was not cleaned");
    assert.equal(await store.release(key, next), true);
    const left = await store.remainingTime(key);
    assert.ok(left > 5_000 && left <= 20_000, `remainingTime ${left} is not the remaining permit's`);
    assert.equal(await store.acquire(key, writer, LONG), false, "an exclusive acquire was granted beside a live permit");
    assert.equal(await store.extend(key, long, SHORT), true, "a holder could not shorten its permit");
    await sleep(SHORT + SETTLE);
    assert.equal(await store.isLocked(key), false, "held after its last permit expired");
    assert.equal(await store.remainingTime(key), null);
    assert.ok(acquired(await store.acquire(key, writer, LONG)), "an exclusive acquire was refused after every permit expired");
    assert.equal(await store.release(key, writer), true);
  });

  test("shared: release and extend act on the caller's own hold only; remainingTime is the last hold's", async () => {
    const { stores } = env();
    const store = stores[0];
    const key = uniqueKey("owned");
    const [a, b, stranger] = [owner(), owner(), owner()];
    assert.ok(acquired(await store.acquireShared(key, a, 5_000, 1, READ_LIMIT)));
    assert.ok(acquired(await store.acquireShared(key, b, 30_000, 1, READ_LIMIT)));
    let left = await store.remainingTime(key);
    assert.ok(left > 25_000 && left <= 30_000, `remainingTime ${left}: not the last expiry`);
    assert.equal(await store.release(key, stranger), false);
    assert.equal(await store.extend(key, stranger, LONG), false);
    assert.equal(await store.extend(key, a, LONG), true);
    left = await store.remainingTime(key);
    assert.ok(left > LONG - 5_000 && left <= LONG, `remainingTime ${left} after extending one hold`);
    assert.equal(await store.release(key, a), true);
    left = await store.remainingTime(key);
    assert.ok(left > 20_000 && left <= 30_000, `remainingTime ${left}: the released hold still counts`);
    assert.equal(await store.extend(key, a, LONG), false, "a released hold was extended");
    assert.equal(await store.release(key, b), true);
    assert.equal(await store.remainingTime(key), null);
    assert.equal(await store.isLocked(key), false);
  });

  test("shared: readers share, and a writer excludes them (and they it)", async () => {
    const { stores } = env();
    const [store, other] = [stores[0], stores[stores.length - 1]];
    const key = uniqueKey("rw");
    const readers = [owner(), owner(), owner()];
    const writer = owner();
    for (const r of readers) assert.ok(acquired(await store.acquireShared(key, r, LONG, 1, READ_LIMIT)), "readers did not share");
    assert.equal(await other.acquire(key, writer, LONG), false, "a writer was let in beside readers");
    for (const r of readers) assert.equal(await other.release(key, r), true);
    assert.ok(acquired(await other.acquire(key, writer, LONG)), "the writer could not take the key after the readers left");
    assert.equal(await store.acquireShared(key, owner(), LONG, 1, READ_LIMIT), false, "a reader was let in beside a writer");
    assert.equal(await store.acquireShared(key, owner(), LONG, 2, 5), false, "a permit was granted beside a writer");
    assert.equal(await store.acquireShared(key, writer, LONG, 1, READ_LIMIT), false, "the writer took a read hold beside its own");
    assert.equal(await store.release(key, writer), true);
    assert.ok(acquired(await store.acquireShared(key, readers[0], LONG, 1, READ_LIMIT)));
    assert.equal(await store.release(key, readers[0]), true);
  });

  test("shared: holds under another limit answer { heldLimit } and are never granted; an expired hold's limit does not count", async () => {
    const { stores, raw } = env();
    const store = stores[0];
    const key = uniqueKey("mismatch");
    const [a, b, c] = [owner(), owner(), owner()];
    assert.ok(acquired(await store.acquireShared(key, a, LONG, 1, 3)));
    assert.deepEqual(await store.acquireShared(key, b, LONG, 1, 5), { heldLimit: 3 });
    assert.deepEqual(await store.acquireShared(key, b, LONG, 1, READ_LIMIT), { heldLimit: 3 }, "a reader beside permits");
    assert.deepEqual((await liveShares(raw, key)).map((r) => r.owner), [a], "a mismatched request left a row");
    assert.equal(await store.release(key, a), true);
    assert.ok(acquired(await store.acquireShared(key, b, SHORT, 1, 5)), "the new limit was refused once nothing was held");
    await sleep(SHORT + SETTLE);
    assert.ok(acquired(await store.acquireShared(key, c, LONG, 3, 3)), "an expired hold's limit still counted");
    assert.deepEqual(await store.acquireShared(key, b, LONG, 1, 5), { heldLimit: 3 });
    assert.equal(await store.release(key, c), true);
  });

  test("shared: fences strictly increase across every grant of a key — locks, permits, read holds, races, expiry", { timeout: 60_000 }, async () => {
    const { stores } = env();
    const [store, other] = [stores[0], stores[stores.length - 1]];
    const key = uniqueKey("shared-fences");
    const ledger = fenceLedger();
    let w = owner();
    ledger.take(key, await store.acquire(key, w, LONG), "a lock");
    assert.equal(await store.release(key, w), true);
    const permits = [owner(), owner(), owner()];
    for (const p of permits) ledger.take(key, await other.acquireShared(key, p, LONG, 1, 3), "a permit");
    for (const p of permits) assert.equal(await store.release(key, p), true);
    w = owner();
    ledger.take(key, await other.acquire(key, w, SHORT), "a lock after permits");
    await sleep(SHORT + SETTLE);
    const reader = owner();
    ledger.take(key, await store.acquireShared(key, reader, SHORT, 1, READ_LIMIT), "a reader after the lock expired");
    await sleep(SHORT + SETTLE);
    ledger.take(key, await other.acquire(key, owner(), SHORT), "a lock after the reader expired");
    await sleep(SHORT + SETTLE);
    // A race of readers: all are granted, each a fence of its own above the last.
    const results = await raceShared(stores, key, Array.from({ length: 20 }, () => ({ weight: 1, limit: READ_LIMIT })), LONG);
    assert.ok(results.every((r) => acquired(r.answer)), "a racing reader was refused");
    for (const fence of results.map((r) => r.answer.fence).sort((x, y) => x - y)) ledger.take(key, { fence }, "racing readers");
    assert.equal(await store.forceRelease(key), true);
    ledger.take(key, await store.acquire(key, owner(), LONG), "a lock after forceRelease of readers");
    assert.equal(await store.forceRelease(key), true);
  });

  test("shared: forceRelease frees every hold of the key; the holders find out at their next extend", async () => {
    const { stores, raw } = env();
    const [store, other] = [stores[0], stores[stores.length - 1]];
    const key = uniqueKey("force-shared");
    const holders = [owner(), owner()];
    for (const h of holders) assert.ok(acquired(await store.acquireShared(key, h, LONG, 2, 4)));
    assert.equal(await other.forceRelease(key), true);
    assert.equal(await store.isLocked(key), false);
    assert.deepEqual(await liveShares(raw, key), [], "forceRelease left shared rows");
    for (const h of holders) assert.equal(await store.extend(key, h, LONG), false, "a forced-out holder extended");
    assert.equal(await store.forceRelease(key), false, "nothing left to free");
    const w = owner();
    assert.ok(acquired(await store.acquire(key, w, LONG)));
    assert.equal(await store.release(key, w), true);
  });

  test("shared: expired holds leave nothing behind — purgeExpired() deletes their rows and their key's row", async () => {
    const { stores, raw } = env();
    const store = stores[0];
    const [gone, kept] = [uniqueKey("purge-shared"), uniqueKey("purge-kept")];
    const [a, b, c] = [owner(), owner(), owner()];
    assert.ok(acquired(await store.acquireShared(gone, a, SHORT, 1, 2)));
    assert.ok(acquired(await store.acquireShared(gone, b, SHORT, 1, 2)));
    assert.ok(acquired(await store.acquireShared(kept, a, SHORT, 1, 2)));
    assert.ok(acquired(await store.acquireShared(kept, c, LONG, 1, 2)));
    await sleep(SHORT + SETTLE);
    assert.ok((await store.purgeExpired()) >= 3, "purgeExpired() removed fewer than the expired rows");
    assert.deepEqual(await liveShares(raw, gone), []);
    assert.deepEqual(await raw("SELECT key FROM keel_locks WHERE key = ?", [gone]), [], "the key's row outlived its holds");
    assert.deepEqual((await liveShares(raw, kept)).map((r) => r.owner), [c], "a live hold was purged");
    assert.equal(await store.isLocked(kept), true);
    assert.equal(await store.release(kept, c), true);
    assert.deepEqual(await raw("SELECT key FROM keel_locks WHERE key = ?", [kept]), [], "the key's row outlived its last release");
    assert.deepEqual(await liveShares(raw, kept), []);
  });

  test("shared: createTable() adds shared holds to a table from before them; its locks stay held", async () => {
    const { db, raw, dialect } = env();
    const table = uniqueTable("before_shared");
    // The layout of the previous release: lock table, fence counter and (Postgres) the queue
    // without the shared waiters' columns.
    if (dialect === "sqlite") {
      for (const ddl of unfencedDdl(dialect, table)) await raw(ddl, []);
      await raw(`ALTER TABLE "${table}" ADD COLUMN fence INTEGER`, []);
    } else {
      await raw(`CREATE TABLE "${table}" (key TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_at BIGINT NOT NULL, queued_until BIGINT NOT NULL DEFAULT 0)`, []);
      await raw(`CREATE SEQUENCE "${table}_fence_seq" AS BIGINT MINVALUE 1 MAXVALUE ${MAX_FENCE} START 1 CACHE 1 NO CYCLE`, []);
      await raw(
        `CREATE TABLE "${table}_waiters" (key TEXT NOT NULL, owner TEXT NOT NULL, seq BIGINT GENERATED ALWAYS AS IDENTITY, ttl_ms BIGINT NOT NULL, ` +
          "enqueued_at BIGINT NOT NULL, deadline BIGINT NOT NULL, granted_at BIGINT, fence BIGINT, PRIMARY KEY (key, owner))",
        [],
      );
    }
    const store = databaseLockStore(db, { table });
    const [held, key, a, b] = [uniqueKey("held"), uniqueKey("new"), owner(), owner()];
    const now = await store.now();
    await raw(`INSERT INTO "${table}" (key, owner, expires_at) VALUES (?, ?, ?)`, [held, a, now + LONG]);
    await store.createTable();
    await store.createTable();
    assert.equal(await store.isLocked(held), true, "the upgrade dropped a live lock");
    assert.equal(await store.acquireShared(held, b, LONG, 1, 2), false, "a permit was granted beside a lock from before the upgrade");
    assert.equal(await store.release(held, a), true);
    assert.ok(acquired(await store.acquireShared(key, a, LONG, 1, 2)));
    assert.ok(acquired(await store.acquireShared(key, b, LONG, 1, 2)));
    assert.equal(await store.acquire(key, owner(), LONG), false);
    assert.equal(await store.release(key, a), true);
    assert.equal(await store.release(key, b), true);
    if (dialect === "postgres") {
      const columns = (
        await raw("SELECT column_name AS name FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position", [`${table}_waiters`])
      ).map((r) => r.name);
      assert.deepEqual(columns.slice(-3), ["weight", "lim", "metadata"]);
      // The queue works for shared waiters on the upgraded table.
      const w = owner();
      assert.ok(acquired(await store.acquire(key, a, LONG)));
      const waiting = store.acquireSharedOrWait(key, w, LONG, 1, 2, 20_000, 60_000);
      const deadline = Date.now() + 20_000;
      while ((await raw(`SELECT 1 FROM "${table}_waiters" WHERE key = ? AND granted_at IS NULL`, [key])).length === 0) {
        assert.ok(Date.now() < deadline, "the shared waiter never queued");
        await sleep(5);
      }
      assert.equal(await store.release(key, a), true);
      assert.ok(acquired(await waiting), "a shared waiter was not handed the key on the upgraded table");
      assert.equal(await store.release(key, w), true);
      await store.close();
    }
    await dropLockTable(raw, dialect, table);
  });

  test("shared: schema() lays out the shared holds table (and, per dialect, its triggers or functions)", () => {
    for (const dialect of ["sqlite", "postgres"]) {
      const ddl = schema({ dialect, table: "my_locks" });
      assert.match(ddl, /CREATE TABLE IF NOT EXISTS "my_locks_shared" \(\s*key\s+TEXT\s+NOT NULL,\s*owner\s+TEXT\s+NOT NULL,\s*expires_at\s+(BIGINT|INTEGER) NOT NULL,\s*weight\s+(BIGINT|INTEGER) NOT NULL,\s*lim\s+(BIGINT|INTEGER) NOT NULL,\s*fence/);
      assert.match(ddl, /PRIMARY KEY \(key, owner\)/);
      assert.match(ddl, /CREATE INDEX IF NOT EXISTS "my_locks_shared_expires_at_idx"/);
    }
    assert.match(schema({ dialect: "sqlite", table: "my_locks" }), /CREATE TRIGGER IF NOT EXISTS "my_locks_shared_on_insert" AFTER INSERT ON "my_locks_shared"/);
    assert.match(schema({ dialect: "postgres", table: "my_locks" }), /CREATE OR REPLACE FUNCTION "my_locks_take_shared"\(/);
  });
}
