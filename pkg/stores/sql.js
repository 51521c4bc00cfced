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
//   acquire   INSERT … ON CONFLICT (key) DO UPDATE … WHERE <existing row expired> RETURNING owner
//             The primary key makes the insert atomic; the conditional upsert takes over an expired
//             row in the same statement. A row comes back only when this call won.
//   release   DELETE … WHERE key AND owner RETURNING <was it still live>  (true only if it was)
//   extend    UPDATE … SET expires_at = now + ttl WHERE key AND owner AND not expired RETURNING
//   isLocked / remainingTime   SELECT … WHERE key AND not expired
//
// "now" is always the database's clock (SQLite: julianday('now'); Postgres: clock_timestamp()),
// never the caller's Date.now(): callers' clocks drift, the database is the one judge.
// Expired rows are free but stay in the table until a later acquire of the same key takes them
// over or purgeExpired() deletes them.

import { argumentChecks } from "./args.js";

const DRIVERS = ["d1", "sqlite", "pg"];
const DEFAULT_TABLE = "keel_locks";

// Plain SQL identifiers only, optionally schema-qualified: no quotes, spaces or punctuation can
// reach the SQL text. 63 characters is PostgreSQL's limit for one identifier.
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;

/**
 * Validates a table name: one identifier, or `schema.table`. Throws TypeError otherwise.
 * @returns {string[]} its parts
 */
function tableParts(table) {
  if (typeof table !== "string") {
    throw new TypeError(`keel-lock sql store: table name must be a string, got ${typeof table}`);
  }
  const parts = table.split(".");
  if (parts.length > 2 || !parts.every((p) => IDENTIFIER.test(p))) {
    throw new TypeError(
      `keel-lock sql store: invalid table name ${JSON.stringify(table)} — use letters, digits and ` +
        "underscores, not starting with a digit, at most 63 characters, optionally schema.table",
    );
  }
  return parts;
}

const quote = (identifier) => `"${identifier}"`;

function dialectOf(driverOrDialect) {
  switch (driverOrDialect) {
    case "d1":
    case "sqlite":
      return "sqlite";
    case "pg":
    case "postgres":
    case "postgresql":
      return "postgres";
    default:
      throw new TypeError(
        `keel-lock sql store: unknown dialect ${JSON.stringify(driverOrDialect)} — use "sqlite" or "postgres"`,
      );
  }
}

/**
 * The DDL for the lock table, as one string of `;`-terminated statements.
 * @param {{ dialect?: "sqlite" | "postgres" | "d1" | "pg", table?: string }} [options]
 */
export function schema(options = {}) {
  if (options === null || typeof options !== "object") throw new TypeError("schema: options must be an object");
  const table = options.table === undefined ? DEFAULT_TABLE : options.table;
  return schemaStatements(dialectOf(options.dialect ?? "sqlite"), table)
    .map((s) => `${s};\n`)
    .join("");
}

function schemaStatements(dialect, table) {
  const parts = tableParts(table);
  const name = parts.map(quote).join(".");
  const last = parts[parts.length - 1];
  const index = `${last}_expires_at_idx`;
  if (dialect === "postgres") {
    return [
      `CREATE TABLE IF NOT EXISTS ${name} (\n` +
        "  key        TEXT   PRIMARY KEY,\n" +
        "  owner      TEXT   NOT NULL,\n" +
        "  expires_at BIGINT NOT NULL\n" +
        ")",
      // An index name is never schema-qualified in Postgres: it lives in its table's schema.
      `CREATE INDEX IF NOT EXISTS ${quote(index)} ON ${name} (expires_at)`,
    ];
  }
  // SQLite: the index takes the schema qualifier, the table in ON must not.
  const indexName = parts.length === 2 ? `${quote(parts[0])}.${quote(index)}` : quote(index);
  return [
    `CREATE TABLE IF NOT EXISTS ${name} (\n` +
      "  key        TEXT    PRIMARY KEY NOT NULL,\n" +
      "  owner      TEXT    NOT NULL,\n" +
      "  expires_at INTEGER NOT NULL\n" +
      ")",
    `CREATE INDEX IF NOT EXISTS ${indexName} ON ${quote(last)} (expires_at)`,
  ];
}

// The statements, per dialect. Parameters are listed in the order each statement binds them.
function statements(dialect, table) {
  const t = tableParts(table).map(quote).join(".");
  if (dialect === "sqlite") {
    // Milliseconds since the epoch by SQLite's clock. julianday('now') has ms resolution and is
    // fixed for the duration of one statement; this works on every SQLite version that has
    // upsert (unixepoch('subsec') would need 3.42+).
    const now = "CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)";
    return {
      acquire:
        `INSERT INTO ${t} AS cur (key, owner, expires_at) VALUES (?, ?, ${now} + CAST(? AS INTEGER)) ` +
        "ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at " +
        `WHERE cur.expires_at <= ${now} RETURNING owner`, // key, owner, ttl
      release: `DELETE FROM ${t} WHERE key = ? AND owner = ? RETURNING expires_at > ${now} AS live`, // key, owner
      extend:
        `UPDATE ${t} SET expires_at = ${now} + CAST(? AS INTEGER) ` +
        `WHERE key = ? AND owner = ? AND expires_at > ${now} RETURNING 1 AS ok`, // ttl, key, owner
      isLocked: `SELECT 1 AS held FROM ${t} WHERE key = ? AND expires_at > ${now}`, // key
      remainingTime: `SELECT expires_at - ${now} AS remaining FROM ${t} WHERE key = ? AND expires_at > ${now}`, // key
      purge: `DELETE FROM ${t} WHERE expires_at <= ${now}`,
      now: `SELECT ${now} AS now`,
    };
  }
  // PostgreSQL: clock_timestamp() is the real current time (now() is frozen at transaction
  // start, which matters when the caller passes a client inside a transaction). It is volatile,
  // so each statement reads it once in a CTE and uses that one value throughout.
  const clock = "WITH c AS (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now) ";
  return {
    acquire:
      clock +
      `INSERT INTO ${t} AS cur (key, owner, expires_at) SELECT $1, $2, c.now + $3::bigint FROM c ` +
      "ON CONFLICT (key) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at " +
      "WHERE cur.expires_at <= (SELECT now FROM c) RETURNING cur.owner",
    release: clock + `DELETE FROM ${t} AS cur USING c WHERE cur.key = $1 AND cur.owner = $2 RETURNING cur.expires_at > c.now AS live`,
    extend:
      clock +
      `UPDATE ${t} AS cur SET expires_at = c.now + $1::bigint FROM c ` +
      "WHERE cur.key = $2 AND cur.owner = $3 AND cur.expires_at > c.now RETURNING 1 AS ok",
    isLocked: clock + `SELECT 1 AS held FROM ${t} AS cur, c WHERE cur.key = $1 AND cur.expires_at > c.now`,
    remainingTime:
      clock + `SELECT cur.expires_at - c.now AS remaining FROM ${t} AS cur, c WHERE cur.key = $1 AND cur.expires_at > c.now`,
    purge: clock + `DELETE FROM ${t} AS cur USING c WHERE cur.expires_at <= c.now`,
    now: clock + "SELECT now FROM c",
  };
}

/**
 * Works out which driver `db` is: a D1 binding has `batch` and `prepare`; a synchronous SQLite
 * handle has `prepare` (better-sqlite3, node:sqlite, bun:sqlite); pg has `query`.
 */
export function detectDriver(db) {
  if (db === null || (typeof db !== "object" && typeof db !== "function")) return null;
  const has = (name) => typeof db[name] === "function";
  if (has("prepare") && has("batch")) return "d1";
  if (has("prepare")) return "sqlite";
  if (has("query")) return "pg";
  return null;
}

// Each driver answers two primitives: `row(sql, params)` → the first row or null, and
// `count(sql, params)` → rows changed.
function driverFor(db, driver) {
  switch (driver) {
    case "d1":
      return {
        async row(sql, params) {
          return (await db.prepare(sql).bind(...params).first()) ?? null;
        },
        async count(sql, params) {
          const result = await db.prepare(sql).bind(...params).run();
          return Number(result?.meta?.changes ?? 0);
        },
      };
    case "sqlite": {
      // Synchronous drivers: prepare each statement once per handle.
      const cache = new Map();
      const prepared = (sql) => {
        let stmt = cache.get(sql);
        if (stmt === undefined) {
          stmt = db.prepare(sql);
          cache.set(sql, stmt);
        }
        return stmt;
      };
      return {
        async row(sql, params) {
          return prepared(sql).get(...params) ?? null;
        },
        async count(sql, params) {
          return Number(prepared(sql).run(...params)?.changes ?? 0);
        },
      };
    }
    case "pg":
      return {
        async row(sql, params) {
          const result = await db.query(sql, params);
          return result?.rows?.[0] ?? null;
        },
        async count(sql, params) {
          const result = await db.query(sql, params);
          return Number(result?.rowCount ?? 0);
        },
      };
    default:
      throw new TypeError(`keel-lock sql store: driver must be one of ${DRIVERS.join(", ")}`);
  }
}

const check = argumentChecks("databaseLockStore");

// SQLite answers 1/0 (or 1n/0n with safeIntegers), Postgres true/false.
const truthy = (value) => value === true || Number(value) === 1;

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

  return {
    table,
    driver,
    dialect,

    async acquire(key, owner, ttlMs) {
      check.key(key);
      check.owner(owner);
      check.ttl(ttlMs);
      const row = await io.row(sql.acquire, [key, owner, ttlMs]);
      return row !== null && row.owner === owner;
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

    async remainingTime(key) {
      check.key(key);
      const row = await io.row(sql.remainingTime, [key]);
      if (row === null) return null;
      const ms = Number(row.remaining);
      return ms > 0 ? ms : null;
    },

    /** Creates the table and its expiry index if missing (idempotent). */
    async createTable() {
      for (const statement of schemaStatements(dialect, table)) await io.count(statement, []);
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
}

export default databaseLockStore;
