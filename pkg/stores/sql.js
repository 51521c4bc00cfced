// keel-lock/sql — a LockStore in a SQL table: SQLite (Cloudflare D1, better-sqlite3 and other
// synchronous SQLite drivers) or PostgreSQL (pg).
//
// No runtime dependencies: you hand it your database handle and it detects the driver:
//
//   d1       Cloudflare D1 binding          db.prepare(sql).bind(...params).first() / .run()
//   sqlite   better-sqlite3 (also node:sqlite, bun:sqlite)   db.prepare(sql).get(...params) / .run(...params)
//   pg       pg Pool or Client (and pg-compatible pools)     db.query(text, params) with $1 placeholders
//
// Table (see schema()): key TEXT PRIMARY KEY, owner TEXT, expires_at = ms since the Unix epoch by
// the DATABASE's clock. Every operation is one statement, so one round trip:
//
//   acquire   INSERT … ON CONFLICT (key) DO UPDATE … WHERE <existing row expired> RETURNING owner, fence
//             The primary key makes the insert atomic; the conditional upsert takes over an expired
//             row in the same statement. A row comes back only when this call won, with its fence.
//   release   DELETE … WHERE key AND owner RETURNING <was it still live>  (true only if it was)
//   extend    UPDATE … SET expires_at = now + ttl WHERE key AND owner AND not expired RETURNING
//   isLocked / remainingTime   SELECT … WHERE key AND not expired
//
// PostgreSQL also waits without polling (acquireOrWait / withdraw / close): a FIFO queue table
// <table>_waiters; release, and acquire of an expired key, hand the key to the oldest live
// waiter in the same statement and NOTIFY it; one LISTEN connection per store (see pgWaiting
// and postgresStatements). SQLite and D1 have no such methods: their callers poll acquire.
//
// "now" is always the database's clock (SQLite: julianday('now'); Postgres: clock_timestamp()),
// never the caller's Date.now(): callers' clocks drift, the database is the one judge.
// Expired rows are free but stay in the table until a later acquire of the same key takes them
// over or purgeExpired() deletes them.
//
// Fences: every successful acquire answers { fence }, an integer in 1..MAX_FENCE larger than every
// fence this table handed out before. The counter is one per lock table (shared by its keys, so a
// key's fences have gaps) and lives outside the lock rows, so release and purgeExpired() cannot
// take it back:
//   PostgreSQL  a SEQUENCE <table>_fence_seq (CACHE 1, MAXVALUE MAX_FENCE). nextval() runs only
//               on the row the upsert returned, i.e. after this statement has written and locked
//               the lock row: the next winner of the key waits for this transaction, so its
//               nextval() comes later and is larger. Failed attempts draw nothing.
//   SQLite      a one-row table <table>_fence holding the largest fence handed out. The upsert
//               writes fence = counter + 1 into the lock row; AFTER INSERT / AFTER UPDATE OF fence
//               triggers raise the counter to it in the same statement, under SQLite's write lock.
//               Failed attempts change no row, so no trigger fires.
//
// The parts: sql-schema.js (the table and the statements), sql-drivers.js (the handles it adapts
// to), sql-pg-waiting.js (PostgreSQL's waiting without polling).

import { argumentChecks, LockStoreClosedError, safetyNetOption } from "./args.js";
import { detectDriver, DRIVERS, driverFor, toFence, truthy } from "./sql-drivers.js";
import { pgWaiting } from "./sql-pg-waiting.js";
import { DEFAULT_TABLE, dialectOf, schema, schemaStatements, statements, tableParts, upgradeStatements } from "./sql-schema.js";

export { detectDriver, LockStoreClosedError, schema };

const check = argumentChecks("databaseLockStore");

/**
 * A keel-lock LockStore in a SQL table.
 *
 * @param {object} db a D1 binding, a better-sqlite3 (or node:sqlite / bun:sqlite) Database, or a pg Pool/Client
 * @param {{ table?: string, driver?: "d1" | "sqlite" | "pg" }} [options]
 *   `table` defaults to "keel_locks"; `driver` skips detection.
 */
export function databaseLockStore(db, options = {}) {
  if (options === null || typeof options !== "object") {
    throw new TypeError("databaseLockStore: options must be an object");
  }
  const table = options.table === undefined ? DEFAULT_TABLE : options.table;
  tableParts(table); // throws TypeError before anything touches the database
  let driver = options.driver;
  if (driver === undefined) {
    driver = detectDriver(db);
    if (driver === null) {
      throw new TypeError(
        "databaseLockStore: unrecognised database handle — expected a D1 binding, a better-sqlite3 " +
          "Database or a pg Pool/Client (or pass options.driver)",
      );
    }
  } else if (!DRIVERS.includes(driver)) {
    throw new TypeError(`databaseLockStore: driver must be one of ${DRIVERS.join(", ")}`);
  }
  const dialect = dialectOf(driver);
  const sql = statements(dialect, table);
  const io = driverFor(db, driver);
  // Checked for every dialect (a bad option is an error wherever it is given); pg uses it.
  const safetyNetMs = safetyNetOption("databaseLockStore", options.safetyNetMs);
  if (options.listen !== undefined && typeof options.listen !== "function") {
    throw new TypeError("databaseLockStore: options.listen must be a function answering a pg client");
  }

  const store = {
    table,
    driver,
    dialect,

    async acquire(key, owner, ttlMs) {
      check.key(key);
      check.owner(owner);
      check.ttl(ttlMs);
      const row = await io.row(sql.acquire, [key, owner, ttlMs]);
      if (row === null || row.owner !== owner) return false;
      let fence;
      try {
        fence = toFence(row.fence);
      } catch (error) {
        // Do not leave a lock held that the caller is told it did not get.
        await io.row(sql.release, [key, owner]).catch(() => {});
        throw error;
      }
      return { fence };
    },

    async release(key, owner) {
      check.key(key);
      check.owner(owner);
      // Deletes our row even if it has expired (nobody took it over, so it is garbage), but
      // answers true only if the lock was still live.
      const row = await io.row(sql.release, [key, owner]);
      return row !== null && truthy(row.live);
    },

    async extend(key, owner, ttlMs) {
      check.key(key);
      check.owner(owner);
      check.ttl(ttlMs);
      return (await io.row(sql.extend, [ttlMs, key, owner])) !== null;
    },

    async isLocked(key) {
      check.key(key);
      return (await io.row(sql.isLocked, [key])) !== null;
    },

    /**
     * Frees `key` whoever holds it (operators clearing a stuck lock); the holder finds out at its
     * next extend. Answers whether anyone held it. On Postgres the current holder's row is
     * released as that holder, so a queued waiter is handed the key as on any release.
     */
    async forceRelease(key) {
      check.key(key);
      if (sql.forceRelease) {
        const row = await io.row(sql.forceRelease, [key]);
        return row !== null && truthy(row.live);
      }
      // Between reading the holder and releasing it the key may change hands; try again then.
      for (let attempt = 0; attempt < 8; attempt++) {
        const holder = await io.row(sql.holder, [key]);
        if (holder === null) return false;
        const row = await io.row(sql.release, [key, holder.owner]);
        if (row !== null && truthy(row.live)) return true;
      }
      throw new Error(`databaseLockStore: forceRelease(${JSON.stringify(key)}): the key kept changing hands`);
    },

    async remainingTime(key) {
      check.key(key);
      const row = await io.row(sql.remainingTime, [key]);
      if (row === null) return null;
      const ms = Number(row.remaining);
      return ms > 0 ? ms : null;
    },

    /**
     * Creates the table, its expiry index and its fence counter if missing, and upgrades a table
     * from the layout without fences (idempotent; locks held in the table stay held).
     */
    async createTable() {
      const [createLockTable, ...rest] = schemaStatements(dialect, table);
      await io.count(createLockTable, []);
      for (const statement of upgradeStatements(dialect, table)) {
        try {
          await io.count(statement, []);
        } catch (error) {
          if (!/duplicate column/i.test(String(error?.message))) throw error;
        }
      }
      for (const statement of rest) await io.count(statement, []);
    },

    /** Deletes rows that have expired by the database's clock; answers how many went. */
    async purgeExpired() {
      return io.count(sql.purge, []);
    },

    /** The database's clock, in ms since the Unix epoch — the clock every expiry is judged by. */
    async now() {
      const row = await io.row(sql.now, []);
      return Number(row?.now);
    },
  };
  if (dialect !== "postgres") return store; // SQLite and D1: waiting callers poll acquire
  const wait = pgWaiting(db, sql, io, options, safetyNetMs);
  Object.defineProperties(store, Object.getOwnPropertyDescriptors(wait));
  store.end = store.close;
  return store;
}

export default databaseLockStore;
