// Tests that only make sense for databaseLockStore, run against each driver. `env()` answers
//   { dialect: "sqlite" | "postgres", db, stores: [store, …], raw }
// where raw(sql, params) runs SQL written with `?` placeholders directly on the database
// (bypassing the store) and answers the rows.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { test } from "node:test";
import { databaseLockStore, schema, detectDriver } from "../../../pkg/stores/sql.js";

const LONG = 60_000;
const owner = () => randomBytes(16).toString("hex");
const uniqueKey = (label) => `keel-test:sql:${label}:${randomBytes(4).toString("hex")}`;

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

  test("unrecognised handles and options are refused", () => {
    const { db } = env();
    assert.throws(() => databaseLockStore({}), TypeError);
    assert.throws(() => databaseLockStore(null), TypeError);
    assert.throws(() => databaseLockStore(db, { driver: "mysql" }), TypeError);
    assert.throws(() => databaseLockStore(db, null), TypeError);
  });

  test("a table name that is not a plain identifier is refused with TypeError, before any SQL runs", async () => {
    const { db, stores, raw, dialect } = env();
    const canary = uniqueKey("canary");
    const a = owner();
    assert.equal(await stores[0].acquire(canary, a, LONG), true);
    for (const table of BAD_TABLE_NAMES) {
      assert.throws(() => databaseLockStore(db, { table }), TypeError, `accepted table ${JSON.stringify(table)}`);
      assert.throws(() => schema({ dialect, table }), TypeError, `schema() accepted ${JSON.stringify(table)}`);
    }
    // Nothing was dropped or written on the way.
    const rows = await raw("SELECT owner FROM keel_locks WHERE key = ?", [canary]);
    assert.deepEqual(rows.map((r) => r.owner), [a]);
    assert.equal(await stores[0].release(canary, a), true);
  });

  test("schema() has the DDL for both dialects; unknown dialects are refused", () => {
    for (const dialect of ["sqlite", "d1", "postgres", "pg"]) {
      const ddl = schema({ dialect, table: "my_locks" });
      assert.match(ddl, /CREATE TABLE IF NOT EXISTS "my_locks"/);
      assert.match(ddl, /key\s+TEXT/);
      assert.match(ddl, /expires_at\s+(BIGINT|INTEGER) NOT NULL/);
      assert.match(ddl, /CREATE INDEX IF NOT EXISTS "my_locks_expires_at_idx"/);
    }
    assert.match(schema(), /"keel_locks"/);
    assert.throws(() => schema({ dialect: "oracle" }), TypeError);
  });

  test("createTable is idempotent and creates key, owner, expires_at", async () => {
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
    assert.deepEqual(columns, ["key", "owner", "expires_at"]);
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
    assert.equal(await store.acquire(key, a, LONG), true);
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
    assert.equal(await store.acquire(key, b, LONG), true, "the expired row was not taken over");
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
    await raw(`DROP TABLE ${table}`, []);
    assert.ok(dialect);
  });

  test("a custom table name (and a table laid out as in the Keel docs) works", async () => {
    const { db, raw, dialect } = env();
    const table = `Docs_Locks_${randomBytes(3).toString("hex")}`;
    // The column layout from the Keel documentation, created by the application itself.
    await raw(`CREATE TABLE "${table}" (key TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_at BIGINT NOT NULL)`, []);
    const store = databaseLockStore(db, { table });
    const [key, a, b] = [uniqueKey("custom"), owner(), owner()];
    assert.equal(await store.acquire(key, a, LONG), true);
    assert.equal(await store.acquire(key, b, LONG), false);
    assert.equal((await raw(`SELECT owner FROM "${table}" WHERE key = ?`, [key]))[0].owner, a);
    assert.equal(await store.release(key, a), true);
    await raw(`DROP TABLE "${table}"`, []);
    // Schema-qualified names are accepted too.
    const qualified = dialect === "sqlite" ? "main.qualified_locks" : "public.qualified_locks";
    const q = databaseLockStore(db, { table: qualified });
    await q.createTable();
    assert.equal(await q.acquire(key, b, LONG), true);
    assert.equal(await q.isLocked(key), true);
    assert.equal(await q.release(key, b), true);
    await raw("DROP TABLE qualified_locks", []);
  });
}
