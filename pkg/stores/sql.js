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

import { argumentChecks, MAX_FENCE } from "./args.js";

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

// PostgreSQL truncates identifiers to 63 bytes, so `<table>_fence_seq` for a long table name
// would silently become another name (for a 63-character table, the table's own). A name that
// would not fit keeps a prefix of the table name plus a hash of all of it, and the suffix.
function fitIdentifier(base, suffix) {
  const name = `${base}${suffix}`;
  if (name.length <= 63) return name;
  let hash = 0x811c9dc5; // FNV-1a, 32 bits
  for (let i = 0; i < base.length; i++) hash = Math.imul(hash ^ base.charCodeAt(i), 0x01000193) >>> 0;
  const tag = `_${hash.toString(16).padStart(8, "0")}`;
  return `${base.slice(0, 63 - tag.length - suffix.length)}${tag}${suffix}`;
}

// Names of the objects that belong to a lock table, derived from its last part and placed in its
// schema: the expiry index, the fence counter (SQLite table / Postgres sequence) and the triggers.
function objectNames(table) {
  const parts = tableParts(table);
  const last = parts[parts.length - 1];
  const inSchema = (name) => (parts.length === 2 ? `${quote(parts[0])}.${quote(name)}` : quote(name));
  return {
    parts,
    last,
    table: parts.map(quote).join("."),
    index: `${last}_expires_at_idx`,
    indexInSchema: inSchema(`${last}_expires_at_idx`),
    // SQLite: the counter table, qualified (outside triggers) and bare (inside trigger bodies,
    // where SQLite resolves names in the trigger's own schema and refuses qualified ones).
    counter: inSchema(`${last}_fence`),
    counterBare: quote(`${last}_fence`),
    insertTrigger: inSchema(`${last}_fence_on_insert`),
    updateTrigger: inSchema(`${last}_fence_on_update`),
    // Postgres: the sequence. acquire names it inside a string literal for nextval(); the parts
    // are plain identifiers (tableParts), so nothing in them can end the literal.
    sequence: inSchema(fitIdentifier(last, "_fence_seq")),
  };
}

// The fence's range in SQL: MAX_FENCE = 2^53 − 1 exactly.
const MAX_FENCE_SQL = String(MAX_FENCE);

function schemaStatements(dialect, table) {
  const n = objectNames(table);
  if (dialect === "postgres") {
    return [
      `CREATE TABLE IF NOT EXISTS ${n.table} (\n` +
        "  key        TEXT   PRIMARY KEY,\n" +
        "  owner      TEXT   NOT NULL,\n" +
        "  expires_at BIGINT NOT NULL\n" +
        ")",
      // An index name is never schema-qualified in Postgres: it lives in its table's schema.
      `CREATE INDEX IF NOT EXISTS ${quote(n.index)} ON ${n.table} (expires_at)`,
      // CACHE 1: with a per-session cache, two sessions would hand out values out of order.
      `CREATE SEQUENCE IF NOT EXISTS ${n.sequence} AS BIGINT MINVALUE 1 MAXVALUE ${MAX_FENCE_SQL} START 1 CACHE 1 NO CYCLE`,
    ];
  }
  // SQLite: the index and triggers take the schema qualifier, the table in ON must not.
  const raise =
    `BEGIN UPDATE ${n.counterBare} SET value = NEW.fence WHERE id = 1 AND value < NEW.fence; END`;
  return [
    `CREATE TABLE IF NOT EXISTS ${n.table} (\n` +
      "  key        TEXT    PRIMARY KEY NOT NULL,\n" +
      "  owner      TEXT    NOT NULL,\n" +
      "  expires_at INTEGER NOT NULL,\n" +
      `  fence      INTEGER CHECK (fence BETWEEN 1 AND ${MAX_FENCE_SQL})\n` +
      ")",
    `CREATE INDEX IF NOT EXISTS ${n.indexInSchema} ON ${quote(n.last)} (expires_at)`,
    `CREATE TABLE IF NOT EXISTS ${n.counter} (\n` +
      "  id    INTEGER PRIMARY KEY CHECK (id = 1),\n" +
      `  value INTEGER NOT NULL CHECK (value BETWEEN 0 AND ${MAX_FENCE_SQL})\n` +
      ")",
    // Seeded once; from the lock rows' fences if the counter is ever recreated next to them.
    `INSERT OR IGNORE INTO ${n.counter} (id, value) SELECT 1, COALESCE(MAX(fence), 0) FROM ${n.table}`,
    `CREATE TRIGGER IF NOT EXISTS ${n.insertTrigger} AFTER INSERT ON ${quote(n.last)} WHEN NEW.fence IS NOT NULL ${raise}`,
    `CREATE TRIGGER IF NOT EXISTS ${n.updateTrigger} AFTER UPDATE OF fence ON ${quote(n.last)} WHEN NEW.fence IS NOT NULL ${raise}`,
  ];
}

// What createTable() runs after the CREATE TABLE and before the rest of schemaStatements(), to
// bring a table from the layout without fences up to date. SQLite has no ADD COLUMN IF NOT EXISTS: the statement fails with "duplicate
// column name" on a table that has the column, and createTable() ignores exactly that error.
// (Postgres keeps no fence in the lock row: its migration is the CREATE SEQUENCE above.)
function upgradeStatements(dialect, table) {
  if (dialect === "postgres") return [];
  const n = objectNames(table);
  return [`ALTER TABLE ${n.table} ADD COLUMN fence INTEGER CHECK (fence BETWEEN 1 AND ${MAX_FENCE_SQL})`];
}

// The statements, per dialect. Parameters are listed in the order each statement binds them.
function statements(dialect, table) {
  const n = objectNames(table);
  const t = n.table;
  if (dialect === "sqlite") {
    // Milliseconds since the epoch by SQLite's clock. julianday('now') has ms resolution and is
    // fixed for the duration of one statement; this works on every SQLite version that has
    // upsert (unixepoch('subsec') would need 3.42+).
    const now = "CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)";
    return {
      // The new fence is read from the counter inside the statement, which already holds
      // SQLite's write lock; the triggers raise the counter when the row is written.
      acquire:
        `INSERT INTO ${t} AS cur (key, owner, expires_at, fence) ` +
        `VALUES (?, ?, ${now} + CAST(? AS INTEGER), (SELECT value + 1 FROM ${n.counter} WHERE id = 1)) ` +
        "ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at, fence = excluded.fence " +
        `WHERE cur.expires_at <= ${now} RETURNING owner, fence`, // key, owner, ttl
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
  const clockCte = "c AS (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now)";
  const clock = `WITH ${clockCte} `;
  return {
    // nextval() is evaluated for the row `won` returns, after the upsert has written (and so
    // locked) the lock row — never for a failed attempt, never before the row lock is held.
    acquire:
      `WITH ${clockCte}, ` +
      `won AS (INSERT INTO ${t} AS cur (key, owner, expires_at) SELECT $1, $2, c.now + $3::bigint FROM c ` +
      "ON CONFLICT (key) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at " +
      "WHERE cur.expires_at <= (SELECT now FROM c) RETURNING cur.owner) " +
      `SELECT won.owner, nextval('${n.sequence}') AS fence FROM won`,
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
 * A fence as the database returned it — a number (SQLite), a bigint (better-sqlite3 with
 * safeIntegers, pg with a BigInt type parser) or a decimal string (pg's default for BIGINT) — as
 * a JS number, exactly. Anything that is not an integer in 1..MAX_FENCE is refused: a rounded or
 * missing fence would defeat the check it exists for.
 */
function toFence(value) {
  let big = null;
  if (typeof value === "bigint") big = value;
  else if (typeof value === "string" && /^[0-9]{1,30}$/.test(value)) big = BigInt(value);
  else if (typeof value === "number" && Number.isInteger(value)) big = Number.isSafeInteger(value) ? BigInt(value) : null;
  if (value === null || value === undefined) {
    throw new Error(
      "databaseLockStore: the acquire returned no fence — the fence counter is missing; run store.createTable() to upgrade the table",
    );
  }
  if (big === null || big < 1n || big > BigInt(MAX_FENCE)) {
    throw new RangeError(
      `databaseLockStore: the database returned the fence ${String(value)}, outside 1..${MAX_FENCE} ` +
        "(MAX_FENCE, the largest integer a JS number holds exactly)",
    );
  }
  return Number(big);
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
}

export default databaseLockStore;
