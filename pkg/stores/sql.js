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
//   inspect   SELECT the key's live lock row (not a header) UNION ALL its live shared holds:
//             fence, metadata, ms left (and, Postgres, the count of live waiters)
//
// Hold metadata (an optional last argument of every acquiring method, at most 1024 bytes of
// UTF-8) is a column of the row the grant writes, written by the same statement; a Postgres
// waiter's is kept in its queue row until the hand-over writes it into its hold's row. A
// Postgres lock row also keeps its holder's fence, for inspect (see sql/postgres.js, fenceOf).
//
// acquireMany takes several keys in one step, all or none: on SQLite one INSERT … SELECT over the
// keys (as JSON arrays) WHERE none of them has a live row, ON CONFLICT as acquire; on PostgreSQL
// one call of a PL/pgSQL function that locks the keys' rows in one order, then checks and writes
// (see sql/sqlite.js, sql/postgres-functions.js and stores/README.md, "Several keys in one step
// (SQL)").
//
// PostgreSQL also waits without polling (acquireOrWait / acquireSharedOrWait / withdraw /
// close): a FIFO queue table <table>_waiters; release, and acquire of an expired key, hand the
// key to the oldest live waiter in the same statement and NOTIFY it; one LISTEN connection per
// store (see pgWaiting and sql/postgres.js, postgresStatements). SQLite and D1 have no such methods: their
// callers poll acquire and acquireShared.
//
// PostgreSQL also pushes holder changes (watch): the statements that grant or end an exclusive
// hold NOTIFY the key's watchers, only while the lock row's watched_until says someone watches
// it; a watching store keeps a lease on the key in <table>_watchers (see sql-pg-watch.js).
// SQLite and D1 have no watch: keel-lock's observe polls inspect there.
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
// Shared holds (semaphore permits, read locks: acquireShared, and acquireSharedOrWait on pg) are
// rows of <table>_shared keyed by (key, owner). While any is live, the key's lock row is their
// header (owner '', expires_at the latest of theirs), so the exclusive statements above refuse,
// and answer isLocked/remainingTime, without reading the shared table. SQLite keeps the header in
// step by triggers, so each shared operation is one statement; PostgreSQL runs each in a PL/pgSQL
// function that locks the lock row first (see sql/postgres-functions.js).
//
// The parts: sql-schema.js (the table and the statements, per dialect: sql/names.js, sql/sqlite.js,
// sql/postgres.js, sql/postgres-functions.js), sql-drivers.js (the handles it adapts to),
// sql-pg-waiting.js (PostgreSQL's waiting without polling).

import { argumentChecks, checkKeySet, kindOption, LockStoreClosedError, safetyNetOption } from "./args.js";
import { checkMetadata, checkMetadataList } from "./metadata.js";
import { detectDriver, DRIVERS, driverFor, toFence, truthy } from "./sql-drivers.js";
import { pgWaiting } from "./sql-pg-waiting.js";
import {
  DEFAULT_TABLE,
  dialectOf,
  lateUpgradeStatements,
  schema,
  schemaStatements,
  statements,
  tableParts,
  upgradeStatements,
} from "./sql-schema.js";

export { detectDriver, LockStoreClosedError, schema };

const check = argumentChecks("databaseLockStore");

// acquireMany's arguments (args.js).
const checkSet = (keys, owners, ttlMs) => checkKeySet("databaseLockStore.acquireMany", keys, owners, ttlMs);

const metadataOf = (metadata) => checkMetadata("databaseLockStore", metadata);

/** One holder of inspect's answer, from a row's fence, metadata and ms left (never its owner). */
function holderOf(fence, metadata, remaining) {
  return {
    metadata: metadata ?? null,
    fence: fence === null || fence === undefined ? null : toFence(fence),
    remainingMs: Math.max(0, Math.floor(Number(remaining))),
  };
}

/** The largest limit of a shared hold, 2^32 − 1 (a read lock's). */
const MAX_LIMIT = 4_294_967_295;

function checkShare(weight, limit) {
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LIMIT) {
    throw new RangeError(`databaseLockStore: limit must be a whole number in 1..${MAX_LIMIT}, got ${limit}`);
  }
  if (!Number.isInteger(weight) || weight < 1 || weight > limit) {
    throw new RangeError(`databaseLockStore: weight must be a whole number in 1..${limit} (the limit), got ${weight}`);
  }
}

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
  const driver = kindOption("databaseLockStore", "driver", options.driver, DRIVERS, () => detectDriver(db),
    "database handle — expected a D1 binding, a better-sqlite3 Database or a pg Pool/Client");
  const dialect = dialectOf(driver);
  const sql = statements(dialect, table);
  const postgres = dialect === "postgres";
  const io = withUpgradeHint(driverFor(db, driver), table, postgres);
  // Checked for every dialect (a bad option is an error wherever it is given); pg uses it.
  const safetyNetMs = safetyNetOption("databaseLockStore", options.safetyNetMs);
  if (options.listen !== undefined && typeof options.listen !== "function") {
    throw new TypeError("databaseLockStore: options.listen must be a function answering a pg client");
  }

  // A shared hold's answer as the database gave it: Postgres answers JSON from its function,
  // SQLite a row of the grant (or nothing) and, after a refusal, the limit of the live holds.
  async function takeShared(key, owner, ttlMs, weight, limit, metadata) {
    const { text, params } = sql.acquireShared;
    if (postgres) {
      const r = (await io.row(text, params(key, owner, ttlMs, weight, limit, metadata)))?.r ?? null;
      if (r?.held_limit !== null && r?.held_limit !== undefined) return { heldLimit: Number(r.held_limit) };
      return r?.fence === null || r?.fence === undefined ? null : r.fence;
    }
    const [row, held] = await io.rows(
      [
        [text, params(key, owner, ttlMs, weight, limit, metadata)],
        [sql.heldLimit.text, sql.heldLimit.params(key, limit)],
      ],
      (first) => first === null, // the limit is asked only after a refusal
    );
    if (row !== null) return row.fence;
    return held === null ? null : { heldLimit: Number(held.lim) };
  }

  // Releases `owner`'s shared hold of `key` (every hold of it, owner null: Postgres only).
  async function releaseShared(key, owner) {
    const row = await io.row(sql.releaseShared, [key, owner]);
    return truthy(postgres ? row?.r?.live : row?.live);
  }

  // Any hold of `owner`: the exclusive statement first, so a lock's release is the one statement
  // it always was; only when the owner holds no lock row is its shared hold looked for.
  async function releaseAny(key, owner) {
    const row = await io.row(sql.release, [key, owner]);
    if (row !== null) {
      // A shared waiter was at the front: hand over now rather than at its store's next look.
      if (truthy(row.hand_over)) await io.row(sql.tick, [key, null]).catch(() => {});
      return truthy(row.live);
    }
    return releaseShared(key, owner);
  }

  const store = {
    // The name lock events and keel-lock/otel give this store.
    [Symbol.toStringTag]: "DatabaseLockStore",
    table,
    driver,
    dialect,

    /** `metadata` (optional): a string of at most 1024 bytes of UTF-8, kept with the hold. */
    async acquire(key, owner, ttlMs, metadata) {
      check.key(key);
      check.owner(owner);
      check.ttl(ttlMs);
      const row = await io.row(sql.acquire, [key, owner, ttlMs, metadataOf(metadata)]);
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

    /**
     * Several keys in one step: when `acquire(keys[i], owners[i], ttlMs)` would grant every key
     * now, each is granted to its owner as acquire grants it and the fences are answered in key
     * order; otherwise nothing changes and the answer is false. Null (nothing changed): a
     * PostgreSQL table createTable() has not upgraded since this capability came. `metadata`
     * (optional): one string or undefined per key, each kept with its key's hold.
     */
    async acquireMany(keys, owners, ttlMs, metadata) {
      checkSet(keys, owners, ttlMs);
      const metadataList = checkMetadataList("databaseLockStore.acquireMany", metadata, keys.length);
      const { text, params } = sql.acquireMany;
      let fences;
      try {
        if (postgres) {
          fences = (await io.row(text, params(keys, owners, ttlMs, metadataList)))?.fences ?? null;
        } else {
          const rows = await io.all(text, params(keys, owners, ttlMs, metadataList));
          const byKey = new Map(rows.map((row) => [row.key, row]));
          const whole = rows.length === keys.length && keys.every((key, i) => byKey.get(key)?.owner === owners[i]);
          fences = rows.length === 0 ? null : whole ? keys.map((key) => byKey.get(key).fence) : [];
        }
      } catch (error) {
        // Postgres: the function is missing (undefined_function); the keys can still be taken one by one.
        if (postgres && error?.code === "42883" && String(error.message).includes("take_many")) return null;
        throw error;
      }
      if (fences === null) return false;
      try {
        if (!Array.isArray(fences) || fences.length !== keys.length) {
          throw new Error(`databaseLockStore.acquireMany: the database granted part of the set (${keys.length} keys)`);
        }
        return fences.map((fence) => ({ fence: toFence(fence) }));
      } catch (error) {
        // Do not leave keys held that the caller is told it did not get.
        for (let i = keys.length - 1; i >= 0; i--) await io.row(sql.release, [keys[i], owners[i]]).catch(() => {});
        throw error;
      }
    },

    /**
     * A shared hold of `weight` permits under `limit` (a semaphore's permits; a read lock is
     * weight 1 under 2^32 − 1): `{ fence }`, `false` (does not fit, or callers are queued), or
     * `{ heldLimit }` when the live holds are under another limit.
     */
    async acquireShared(key, owner, ttlMs, weight, limit, metadata) {
      check.key(key);
      check.owner(owner);
      check.ttl(ttlMs);
      checkShare(weight, limit);
      const answer = await takeShared(key, owner, ttlMs, weight, limit, metadataOf(metadata));
      if (answer === null) return false;
      if (typeof answer === "object") return answer;
      try {
        return { fence: toFence(answer) };
      } catch (error) {
        await releaseShared(key, owner).catch(() => {});
        throw error;
      }
    },

    async release(key, owner) {
      check.key(key);
      check.owner(owner);
      // Deletes our row even if it has expired (nobody took it over, so it is garbage), but
      // answers true only if the hold was still live.
      return releaseAny(key, owner);
    },

    async extend(key, owner, ttlMs) {
      check.key(key);
      check.owner(owner);
      check.ttl(ttlMs);
      if ((await io.row(sql.extend, [ttlMs, key, owner])) !== null) return true;
      const row = await io.row(sql.extendShared, [ttlMs, key, owner]);
      return row !== null && truthy(row.ok);
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
        // SQLite: a header's holds go with it, by trigger.
        const row = await io.row(sql.forceRelease, [key]);
        return row !== null && truthy(row.live);
      }
      // Between reading the holder and releasing it the key may change hands; try again then.
      for (let attempt = 0; attempt < 8; attempt++) {
        const holder = await io.row(sql.holder, [key]);
        if (holder === null) return false;
        // Owner '' is the header of shared holds: all of them go.
        if (holder.owner === "" ? await releaseShared(key, null) : await releaseAny(key, holder.owner)) return true;
      }
      throw new Error(`databaseLockStore: forceRelease(${JSON.stringify(key)}): the key kept changing hands`);
    },

    /**
     * Who holds `key` now, in one statement: `{ holders: [{ metadata, fence, remainingMs }],
     * waiting }` — the live holds in fence order (a lock, or each shared hold), each with the
     * metadata given at acquisition (or null), its fence and the whole ms until it expires by
     * the database's clock; `waiting` the live waiters queued for the key (Postgres; SQLite and
     * D1 keep no queue and cannot count callers that poll: null). Never an owner.
     */
    async inspect(key) {
      check.key(key);
      if (postgres) {
        const row = await io.row(sql.inspect, [key]);
        const holders = Array.isArray(row?.holders) ? row.holders : [];
        return {
          holders: holders.map(([fence, metadata, remaining]) => holderOf(fence, metadata, remaining)),
          waiting: Number(row?.waiting ?? 0),
        };
      }
      const rows = await io.all(sql.inspect.text, sql.inspect.params(key));
      return { holders: rows.map((row) => holderOf(row.fence, row.metadata, row.remaining)), waiting: null };
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
     * from an earlier layout (without fences, shared holds or metadata; idempotent; locks held in
     * the table stay held).
     */
    async createTable() {
      const [createLockTable, ...rest] = schemaStatements(dialect, table);
      // SQLite: ADD COLUMN of a column the table has fails with "duplicate column name".
      const addColumn = async (statement) => {
        try {
          await io.count(statement, []);
        } catch (error) {
          if (!/duplicate column/i.test(String(error?.message))) throw error;
        }
      };
      await io.count(createLockTable, []);
      for (const statement of upgradeStatements(dialect, table)) await addColumn(statement);
      for (const statement of rest) await io.count(statement, []);
      for (const statement of lateUpgradeStatements(dialect, table)) await addColumn(statement);
    },

    /** Deletes rows (locks and shared holds) expired by the database's clock; answers how many went. */
    async purgeExpired() {
      if (postgres) return Number((await io.row(sql.purge, []))?.purged ?? 0);
      let purged = 0;
      for (const statement of sql.purge) purged += await io.count(statement, []);
      return purged;
    },

    /** The database's clock, in ms since the Unix epoch — the clock every expiry is judged by. */
    async now() {
      const row = await io.row(sql.now, []);
      return Number(row?.now);
    },
  };
  if (!postgres) return store; // SQLite and D1: waiting callers poll acquire and acquireShared
  const wait = pgWaiting(db, sql, io, options, safetyNetMs, releaseAny, checkShare, metadataOf);
  Object.defineProperties(store, Object.getOwnPropertyDescriptors(wait));
  store.end = store.close;
  return store;
}

export default databaseLockStore;

// A statement that names what createTable() adds for hold metadata (the metadata columns, a
// Postgres lock row's fence, the functions that take metadata) or for watch (Postgres: the lock
// row's watched_until, the watchers table and its functions) fails on a table it has not
// upgraded: that error is answered as one that says so. Its code and message are kept.
function withUpgradeHint(io, table, postgres) {
  const hint = (error) => {
    const message = String(error?.message ?? "");
    const missing = postgres
      ? (error?.code === "42703" && /column (\w+\.)?"?(metadata|fence|watched_until)\b/.test(message)) ||
        (error?.code === "42883" && /_(keep_fence|take_shared|watch|unwatch)\b/.test(message)) ||
        (error?.code === "42P01" && /_watchers\b/.test(message))
      : /no such column: (\w+\.)?(metadata|fence)\b|has no column named (metadata|fence)\b/.test(message);
    if (!missing) return error;
    const hinted = new Error(
      `databaseLockStore: the table ${JSON.stringify(table)} lacks what createTable() adds — run store.createTable() to upgrade it (${message})`,
      { cause: error },
    );
    if (error.code !== undefined) hinted.code = error.code;
    return hinted;
  };
  const guarded = (method) => async (...args) => {
    try {
      return await method(...args);
    } catch (error) {
      throw hint(error);
    }
  };
  return { row: guarded(io.row), all: guarded(io.all), count: guarded(io.count), rows: guarded(io.rows) };
}
