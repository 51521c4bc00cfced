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

import { argumentChecks, IDLE_CLOSE_MS, LockStoreClosedError, MAX_FENCE, safetyNetOption, unrefTimer } from "./args.js";

export { LockStoreClosedError };

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
    // Postgres, waiting: the queue table, its index (unqualified, like every Postgres index
    // name) and the LISTEN/NOTIFY channel (a name, not a relation: the table as written, so two
    // schemas' tables of one name do not share a channel).
    waiters: inSchema(fitIdentifier(last, "_waiters")),
    waitersIndex: quote(fitIdentifier(last, "_waiters_queue_idx")),
    channel: fitIdentifier(parts.join("_"), "_wake"),
  };
}

// The fence's range in SQL: MAX_FENCE = 2^53 − 1 exactly.
const MAX_FENCE_SQL = String(MAX_FENCE);

function schemaStatements(dialect, table) {
  const n = objectNames(table);
  if (dialect === "postgres") {
    return [
      `CREATE TABLE IF NOT EXISTS ${n.table} (\n` +
        "  key          TEXT   PRIMARY KEY,\n" +
        "  owner        TEXT   NOT NULL,\n" +
        "  expires_at   BIGINT NOT NULL,\n" +
        "  queued_until BIGINT NOT NULL DEFAULT 0\n" +
        ")",
      // An index name is never schema-qualified in Postgres: it lives in its table's schema.
      `CREATE INDEX IF NOT EXISTS ${quote(n.index)} ON ${n.table} (expires_at)`,
      // CACHE 1: with a per-session cache, two sessions would hand out values out of order.
      `CREATE SEQUENCE IF NOT EXISTS ${n.sequence} AS BIGINT MINVALUE 1 MAXVALUE ${MAX_FENCE_SQL} START 1 CACHE 1 NO CYCLE`,
      // Callers of acquireOrWait queued for a key, oldest first by seq. A row lives from the
      // enqueue until its owner leaves (timeout, withdraw, release); fence and granted_at are set
      // when the store hands the key over.
      `CREATE TABLE IF NOT EXISTS ${n.waiters} (\n` +
        "  key         TEXT   NOT NULL,\n" +
        "  owner       TEXT   NOT NULL,\n" +
        "  seq         BIGINT GENERATED ALWAYS AS IDENTITY,\n" +
        "  ttl_ms      BIGINT NOT NULL,\n" +
        "  enqueued_at BIGINT NOT NULL,\n" +
        "  deadline    BIGINT NOT NULL,\n" +
        "  granted_at  BIGINT,\n" +
        "  fence       BIGINT,\n" +
        "  PRIMARY KEY (key, owner)\n" +
        ")",
      `CREATE INDEX IF NOT EXISTS ${n.waitersIndex} ON ${n.waiters} (key, seq)`,
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
// Postgres keeps no fence in the lock row (its fence migration is the CREATE SEQUENCE above);
// waiting adds the queued_until column (ADD COLUMN IF NOT EXISTS, so no error to ignore).
function upgradeStatements(dialect, table) {
  const n = objectNames(table);
  if (dialect === "postgres") {
    return [`ALTER TABLE ${n.table} ADD COLUMN IF NOT EXISTS queued_until BIGINT NOT NULL DEFAULT 0`];
  }
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
      forceRelease: `DELETE FROM ${t} WHERE key = ? RETURNING expires_at > ${now} AS live`, // key
      extend:
        `UPDATE ${t} SET expires_at = ${now} + CAST(? AS INTEGER) ` +
        `WHERE key = ? AND owner = ? AND expires_at > ${now} RETURNING 1 AS ok`, // ttl, key, owner
      isLocked: `SELECT 1 AS held FROM ${t} WHERE key = ? AND expires_at > ${now}`, // key
      remainingTime: `SELECT expires_at - ${now} AS remaining FROM ${t} WHERE key = ? AND expires_at > ${now}`, // key
      purge: `DELETE FROM ${t} WHERE expires_at <= ${now}`,
      now: `SELECT ${now} AS now`,
    };
  }
  return postgresStatements(n);
}

// PostgreSQL: clock_timestamp() is the real current time (now() is frozen at transaction start,
// which matters when the caller passes a client inside a transaction). It is volatile, so each
// statement reads it once in a CTE and uses that one value throughout.
//
// Waiting. Every statement below is one round trip. Lock order, to rule out deadlocks: a
// statement locks the key's lock row before any of its waiter rows. What serialises a hand-over
// is the lock row: a grant writes it (INSERT … ON CONFLICT … WHERE expired, or UPDATE by the
// releasing owner), and only a statement whose write went through marks a waiter granted — so two
// statements that race to hand over one key never grant two waiters.
//
// In READ COMMITTED a statement sees the waiters committed before it started, and only the lock
// row (which it locks or writes) as of now. So a release may miss a waiter that joined while the
// release ran. The lock row's queued_until covers it: every enqueue writes it (under the lock
// row's lock), the release reads the current value, and when it is in the future and no waiter
// was visible, the release notifies "freed" and the waiters' stores grant the key themselves.
function postgresStatements(n) {
  const t = n.table;
  const w = n.waiters;
  const seq = `nextval('${n.sequence}')`;
  const clockCte = "c AS (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now)";
  const clock = `WITH ${clockCte} `;
  const nowSql = "(SELECT now FROM c)";
  // Waiters still in the running: not granted, deadline not passed.
  const live = "w.granted_at IS NULL AND w.deadline > c.now";
  // A NOTIFY on the table's channel. The payload is JSON: [key, owner, fence, waitedMs, ttlMs]
  // for a grant, [key, null] for "the key was freed, look again". A payload over Postgres's
  // 8000-byte limit (a very long key or owner) becomes ["", null]: every waiter looks again.
  const notify = (json) =>
    `pg_notify('${n.channel}', CASE WHEN octet_length(${json}) <= 7900 THEN ${json} ELSE '["",null]' END)`;
  const grantedPayload = "json_build_array(g.key, g.owner, g.fence, g.waited_ms, g.ttl_ms)::text";
  const freedPayload = "json_build_array($1::text, NULL)::text";
  // Rows nobody needs any more: waiters whose deadline passed, grants older than their TTL.
  const stale =
    "((w.granted_at IS NULL AND w.deadline <= c.now) OR (w.granted_at IS NOT NULL AND w.granted_at + w.ttl_ms <= c.now))";
  const grantReturning = "RETURNING w.key, w.owner, w.fence, w.granted_at - w.enqueued_at AS waited_ms, w.ttl_ms";

  // Hands key $1 to its oldest live waiter if the lock is free or expired, when `guard` holds.
  // CTEs: l (the lock row, locked), head (the oldest live waiter, locked; rows that stopped
  // qualifying while it waited for the lock are skipped), hw (the lock row written for the head,
  // only if it is still free), g (the head marked granted, with a fence drawn after hw), swept.
  const grantChain = (guard) =>
    `l AS (SELECT cur.expires_at FROM ${t} AS cur WHERE cur.key = $1 AND ${guard} FOR UPDATE OF cur), ` +
    `head AS (SELECT w.owner, w.ttl_ms FROM ${w} AS w, c WHERE w.key = $1 AND ${live} AND ${guard} ` +
    "AND NOT EXISTS (SELECT 1 FROM l WHERE l.expires_at > c.now) ORDER BY w.seq LIMIT 1 FOR UPDATE OF w), " +
    `hw AS (INSERT INTO ${t} AS cur (key, owner, expires_at) SELECT $1, head.owner, c.now + head.ttl_ms FROM head, c ` +
    "ON CONFLICT (key) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at " +
    `WHERE cur.expires_at <= ${nowSql} RETURNING cur.owner), ` +
    `g AS (UPDATE ${w} AS w SET granted_at = c.now, fence = ${seq} FROM hw, c WHERE w.key = $1 AND w.owner = hw.owner ` +
    `${grantReturning}), ` +
    `swept AS (DELETE FROM ${w} AS w USING c WHERE w.key = $1 AND ${guard} AND ${stale})`;
  const notifyGrant = `(SELECT count(*) FROM g, LATERAL (SELECT ${notify(grantedPayload)}) AS sent)`;
  // Are there waiters (as this statement sees them)?
  const queued = `q AS (SELECT EXISTS (SELECT 1 FROM ${w} AS w, c WHERE w.key = $1 AND ${live}) AS queued)`;

  return {
    // nextval() is evaluated for the row `won` returns, after the upsert has written (and so
    // locked) the lock row — never for a failed attempt, never before the row lock is held.
    // With waiters queued the caller does not take the key: if it is free or expired, it goes to
    // the oldest waiter in this same statement.
    acquire:
      `WITH ${clockCte}, ${queued}, ` +
      `won AS (INSERT INTO ${t} AS cur (key, owner, expires_at) SELECT $1, $2, c.now + $3::bigint FROM c, q WHERE NOT q.queued ` +
      "ON CONFLICT (key) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at " +
      `WHERE cur.expires_at <= ${nowSql} RETURNING cur.owner), ` +
      `${grantChain("(SELECT queued FROM q)")} ` +
      `SELECT won.owner, ${seq} AS fence, ${notifyGrant} AS notified FROM won ` +
      `UNION ALL SELECT NULL, NULL, ${notifyGrant} WHERE NOT EXISTS (SELECT 1 FROM won)`,
    // Frees the key, or hands it to the oldest live waiter (other than the caller) in the same
    // statement; also deletes the caller's own waiter row (so this is withdraw too) and stale
    // rows of the key.
    release:
      `WITH ${clockCte}, ` +
      `mine AS (SELECT cur.expires_at > c.now AS live, cur.queued_until > c.now AS queued FROM ${t} AS cur, c ` +
      "WHERE cur.key = $1 AND cur.owner = $2 FOR UPDATE OF cur), " +
      `head AS (SELECT w.owner, w.ttl_ms FROM ${w} AS w, c WHERE w.key = $1 AND w.owner <> $2 AND ${live} ` +
      "AND EXISTS (SELECT 1 FROM mine) ORDER BY w.seq LIMIT 1 FOR UPDATE OF w), " +
      `moved AS (UPDATE ${t} AS cur SET owner = head.owner, expires_at = c.now + head.ttl_ms FROM head, c ` +
      "WHERE cur.key = $1 AND cur.owner = $2 RETURNING cur.owner), " +
      `freed AS (DELETE FROM ${t} AS cur WHERE cur.key = $1 AND cur.owner = $2 AND NOT EXISTS (SELECT 1 FROM head) RETURNING 1), ` +
      `g AS (UPDATE ${w} AS w SET granted_at = c.now, fence = ${seq} FROM moved, c WHERE w.key = $1 AND w.owner = moved.owner ` +
      `${grantReturning}), ` +
      `gone AS (DELETE FROM ${w} AS w USING c WHERE w.key = $1 AND (w.owner = $2 OR ${stale})) ` +
      `SELECT mine.live, ${notifyGrant} AS notified, ` +
      `(SELECT count(*) FROM (SELECT ${notify(freedPayload)} WHERE mine.queued AND NOT EXISTS (SELECT 1 FROM head)) AS sent) AS freed_notified ` +
      "FROM mine",
    extend:
      clock +
      `UPDATE ${t} AS cur SET expires_at = c.now + $1::bigint FROM c ` +
      "WHERE cur.key = $2 AND cur.owner = $3 AND cur.expires_at > c.now RETURNING 1 AS ok",
    isLocked: clock + `SELECT 1 AS held FROM ${t} AS cur, c WHERE cur.key = $1 AND cur.expires_at > c.now`,
    // Who holds the key now: forceRelease frees it through `release` as that owner, so a waiter
    // is handed the key exactly as on a normal release.
    holder: clock + `SELECT cur.owner FROM ${t} AS cur, c WHERE cur.key = $1 AND cur.expires_at > c.now`,
    remainingTime:
      clock + `SELECT cur.expires_at - c.now AS remaining FROM ${t} AS cur, c WHERE cur.key = $1 AND cur.expires_at > c.now`,
    // Lock rows expired by the database clock go (the count answered); so do waiter rows nobody
    // will ask for any more.
    purge:
      clock +
      `, swept AS (DELETE FROM ${w} AS w USING c WHERE ${stale}) ` +
      `DELETE FROM ${t} AS cur USING c WHERE cur.expires_at <= c.now`,
    now: clock + "SELECT now FROM c",

    // acquireOrWait's first statement ($1 key, $2 owner, $3 ttl, $4 wait): take the key if it is
    // free (or expired) and nobody is queued — answers fence; otherwise join the queue — answers
    // remaining, the holder's ms left as of now (null: no holder; ≤ 0: expired), read from the
    // lock row this statement wrote, so it is current. Either way the lock row's queued_until is
    // raised to the new waiter's deadline (see postgresStatements).
    enqueue:
      `WITH ${clockCte}, ${queued}, ` +
      `won AS (INSERT INTO ${t} AS cur (key, owner, expires_at, queued_until) SELECT $1, $2, c.now + $3::bigint, 0 FROM c, q WHERE NOT q.queued ` +
      // The same owner already holding the key is not a new grant: no update, so no fence.
      "ON CONFLICT (key) DO UPDATE SET " +
      `owner = CASE WHEN cur.expires_at <= ${nowSql} THEN EXCLUDED.owner ELSE cur.owner END, ` +
      `queued_until = CASE WHEN cur.expires_at <= ${nowSql} THEN cur.queued_until ELSE GREATEST(cur.queued_until, ${nowSql} + $4::bigint) END, ` +
      `expires_at = CASE WHEN cur.expires_at <= ${nowSql} THEN EXCLUDED.expires_at ELSE cur.expires_at END ` +
      "WHERE cur.owner <> EXCLUDED.owner RETURNING cur.owner, cur.expires_at), " +
      `raised AS (UPDATE ${t} AS cur SET queued_until = GREATEST(cur.queued_until, c.now + $4::bigint) FROM c, q ` +
      "WHERE cur.key = $1 AND q.queued RETURNING cur.expires_at), " +
      `fenced AS (SELECT ${seq} AS fence FROM won WHERE won.owner = $2), ` +
      `joined AS (INSERT INTO ${w} AS w (key, owner, ttl_ms, enqueued_at, deadline) SELECT $1, $2, $3::bigint, c.now, c.now + $4::bigint FROM c ` +
      "WHERE NOT EXISTS (SELECT 1 FROM fenced) ON CONFLICT (key, owner) DO NOTHING RETURNING 1) " +
      "SELECT (SELECT fence FROM fenced) AS fence, " +
      "(SELECT e.expires_at - c.now FROM (SELECT expires_at FROM won WHERE won.owner <> $2 UNION ALL SELECT expires_at FROM raised) AS e, c LIMIT 1) AS remaining, " +
      "(SELECT count(*) FROM joined) AS joined",
    // A waiter's look ($1 key, $2 owner or null): hand the key to the oldest live waiter if it is
    // free or expired; answer that grant (g_*), the caller's own row as this statement sees it
    // (me_*), and the holder's ms left as of now.
    tick:
      `WITH ${clockCte}, ${grantChain("true")}, ` +
      `me AS (SELECT w.fence, w.granted_at - w.enqueued_at AS waited_ms, w.granted_at IS NOT NULL AS granted, ` +
      `w.granted_at + w.ttl_ms > c.now AS grant_live FROM ${w} AS w, c WHERE w.key = $1 AND w.owner = $2) ` +
      "SELECT g.owner AS g_owner, g.fence AS g_fence, g.waited_ms AS g_waited_ms, g.ttl_ms AS g_ttl_ms, " +
      "EXISTS (SELECT 1 FROM me) AS me_exists, me.granted AS me_granted, me.grant_live AS me_grant_live, me.fence AS me_fence, me.waited_ms AS me_waited_ms, " +
      `COALESCE(g.ttl_ms, (SELECT l.expires_at - c.now FROM l, c)) AS remaining, ${notifyGrant} AS notified ` +
      "FROM (SELECT 1) AS one LEFT JOIN g ON true LEFT JOIN me ON true",
    // A waiter whose wait is spent leaves the queue ($1 key, $2 owner). If the key was handed to
    // it before it left (and the grant is still live), that grant is answered.
    leave:
      `WITH ${clockCte}, gone AS (DELETE FROM ${w} AS w WHERE w.key = $1 AND w.owner = $2 ` +
      "RETURNING w.fence, w.granted_at, w.enqueued_at, w.ttl_ms) " +
      "SELECT gone.fence, gone.granted_at - gone.enqueued_at AS waited_ms, " +
      "(gone.granted_at IS NOT NULL AND gone.granted_at + gone.ttl_ms > c.now) AS granted FROM gone, c",
    listen: `LISTEN ${quote(n.channel)}`,
    unlisten: `UNLISTEN ${quote(n.channel)}`,
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

/** Longest wait acquireOrWait accepts, in ms (the core's limit for `timeout`). */
const MAX_WAIT_MS = 2_147_483_647;

// A pg.Pool (its own pool of connections: one is checked out to LISTEN) or a single client.
const isPgPool = (db) => typeof db.connect === "function" && typeof db.totalCount === "number";

/**
 * Waiting without polling on PostgreSQL: acquireOrWait / withdraw / close for databaseLockStore.
 *
 * The queue is the waiters table; the hand-over happens in SQL (statements.release, .acquire,
 * .tick). This side only waits: each pending call is an entry in `waiting` (by key, then owner),
 * woken by NOTIFY on one LISTEN connection per store. A grant's notification carries its fence
 * and waited ms, so a waiter granted by someone's release costs no statement of its own. Timers:
 *   - per call: its deadline (then `leave`), and the safety net every max(pollMs, safetyNetMs)
 *     (`tick`), in case a notification is lost (listener connection dropped, a releaser on a
 *     version that does not notify);
 *   - per key: the holder's expiry, learned from the enqueue, a tick or a grant notification;
 *     when it passes, one `tick` hands the key to the oldest waiter (a crashed holder never
 *     releases).
 * The LISTEN connection is the store's own only when it came from a pool (or options.listen):
 * then it is given back IDLE_CLOSE_MS after the last wait left, so `pool.end()` is never kept
 * waiting for it by an idle store. When the user ends their pool or client, waits still queued
 * fail with LockStoreClosedError (a single client's "end" event at once; a pool, which has no
 * such event, at the wait's next safety-net look).
 */
function pgWaiting(db, sql, io, options) {
  const waiting = new Map(); // key -> Map(owner -> entry)
  const expiryTimers = new Map(); // key -> { at, timer }
  let listener = null; // { client, own: boolean, dead: boolean, close() }
  let idleTimer = null; // gives the LISTEN connection back once no wait is left
  const safetyNetMs = safetyNetOption("databaseLockStore", options.safetyNetMs);
  const pool = isPgPool(db);
  // A pg Pool says it is ending (or ended) once end() was called; a Client says nothing, but
  // emits "end", which the listener follows.
  const poolEnded = () => pool && (db.ending === true || db.ended === true);

  const entriesOf = (key) => waiting.get(key);

  function forget(entry) {
    clearTimeout(entry.deadlineTimer);
    clearTimeout(entry.pollTimer);
    const entries = waiting.get(entry.key);
    if (entries?.get(entry.owner) === entry) {
      entries.delete(entry.owner);
      if (entries.size === 0) {
        waiting.delete(entry.key);
        const expiry = expiryTimers.get(entry.key);
        if (expiry) clearTimeout(expiry.timer);
        expiryTimers.delete(entry.key);
        if (waiting.size === 0) closeWhenIdle();
      }
    }
  }

  function closeWhenIdle() {
    if (!listener?.own || idleTimer) return;
    idleTimer = unrefTimer(() => {
      idleTimer = null;
      if (waiting.size === 0) stopListening().catch(() => {});
    }, IDLE_CLOSE_MS);
  }

  async function stopListening() {
    clearTimeout(idleTimer);
    idleTimer = null;
    const closing = listener ?? (opening ? await opening.catch(() => null) : null);
    listener = null;
    if (closing && !closing.dead) await closing.close();
    else if (closing) await closing.close().catch(() => {});
  }

  // The user ended the pool or client: every wait fails now (its queue row lapses at its
  // deadline, or a key handed to it meanwhile at its TTL, as a crashed caller's would) and the
  // listener is given back, so that the pool can finish ending.
  function databaseClosed() {
    for (const entries of [...waiting.values()]) {
      for (const entry of [...entries.values()]) {
        fail(entry, new LockStoreClosedError(`databaseLockStore: the ${pool ? "pool" : "client"} was ended while waiting for ${JSON.stringify(entry.key)}`));
      }
    }
    stopListening().catch(() => {});
  }

  function settle(entry, answer) {
    if (entry.state === "done") return;
    entry.state = "done";
    forget(entry);
    entry.resolve(answer);
  }

  function fail(entry, error) {
    if (entry.state === "done") return;
    entry.state = "done";
    forget(entry);
    entry.reject(error);
  }

  const grantOf = (fence, waitedMs) => ({ fence: toFence(fence), waitedMs: Math.max(0, Number(waitedMs) || 0) });

  // Look again at `key` when its holder's TTL has passed (ms from now, as the database said).
  function expireAfter(key, ms) {
    if (!waiting.has(key) || ms === null || ms === undefined) return;
    const delay = Math.max(0, Math.ceil(Number(ms))) + 1;
    const at = Date.now() + delay;
    const existing = expiryTimers.get(key);
    if (existing && existing.at <= at) return;
    if (existing) clearTimeout(existing.timer);
    const timer = setTimeout(() => {
      expiryTimers.delete(key);
      tick(key, null).catch(() => {});
    }, delay);
    timer.unref?.();
    expiryTimers.set(key, { at, timer });
  }

  // One tick statement: hands `key` over if it is free or expired, and settles what it learns.
  // With an owner, also answers that waiter's own state.
  async function tick(key, owner) {
    const row = await io.row(sql.tick, [key, owner]);
    if (row === null) return;
    const entries = entriesOf(key);
    if (row.g_owner !== null && row.g_owner !== undefined) {
      const granted = entries?.get(row.g_owner);
      if (granted?.state === "waiting") settle(granted, grantOf(row.g_fence, row.g_waited_ms));
    }
    if (owner !== null) {
      const entry = entries?.get(owner);
      if (entry?.state === "waiting" && row.g_owner !== owner) {
        if (!truthy(row.me_exists)) settle(entry, false); // withdrawn or swept elsewhere
        else if (truthy(row.me_granted)) {
          settle(entry, truthy(row.me_grant_live) ? grantOf(row.me_fence, row.me_waited_ms) : false);
        }
      }
    }
    if (row.remaining !== null) expireAfter(key, row.remaining);
  }

  function onNotification(message) {
    let payload;
    try {
      payload = JSON.parse(message.payload);
    } catch {
      return;
    }
    if (!Array.isArray(payload)) return;
    const [key, owner, fence, waitedMs, ttlMs] = payload;
    if (key === "") {
      // Payload too long to name the key: every waiter of this store looks again.
      for (const entries of waiting.values()) {
        for (const entry of entries.values()) if (entry.state === "waiting") tick(entry.key, entry.owner).catch(() => {});
      }
      return;
    }
    const entries = entriesOf(key);
    if (!entries) return;
    if (owner === null) {
      tick(key, null).catch(() => {}); // freed without a visible waiter: hand it over from here
      return;
    }
    const entry = entries.get(owner);
    if (entry?.state === "waiting") {
      try {
        settle(entry, grantOf(fence, waitedMs));
      } catch (error) {
        fail(entry, error);
      }
    }
    expireAfter(key, ttlMs);
  }

  // A connection that is LISTENing on the table's channel, made on first use: options.listen()
  // if given, else a connection checked out of the pool, else the single client itself.
  async function openListener() {
    let client;
    let own;
    if (typeof options.listen === "function") {
      client = await options.listen();
      own = true;
    } else if (isPgPool(db)) {
      client = await db.connect();
      own = true;
    } else if (typeof db.on === "function") {
      client = db;
      own = false;
    } else {
      return null; // nothing to LISTEN on: the safety-net poll does all the work
    }
    const state = { client, own, dead: false };
    const onError = () => markDead();
    const markDead = () => {
      if (state.dead) return;
      state.dead = true;
      if (listener === state) listener = null;
      // Notifications may have been lost: every waiter looks now.
      for (const entries of waiting.values()) {
        for (const entry of entries.values()) if (entry.state === "waiting") tick(entry.key, entry.owner).catch(() => {});
      }
    };
    client.on("notification", onNotification);
    client.on("error", onError);
    // The user's own client ended: nothing can reach the database for these waits any more.
    const onEnd = own ? markDead : () => (markDead(), databaseClosed());
    client.on("end", onEnd);
    state.close = async () => {
      state.dead = true;
      client.removeListener?.("notification", onNotification);
      client.removeListener?.("end", onEnd);
      if (own) {
        if (typeof client.release === "function") client.release(true); // destroyed: the pool never hands out a LISTENing connection
        else await client.end?.();
        client.removeListener?.("error", onError);
      } else {
        await client.query(sql.unlisten).catch(() => {});
        client.removeListener?.("error", onError);
      }
    };
    try {
      await client.query(sql.listen);
    } catch (error) {
      await state.close().catch(() => {});
      throw error;
    }
    return state;
  }

  let opening = null;
  async function ensureListener() {
    clearTimeout(idleTimer);
    idleTimer = null;
    if (poolEnded()) throw new LockStoreClosedError("databaseLockStore: the pool was ended");
    if (listener && !listener.dead) return;
    if (!opening) {
      opening = openListener().finally(() => {
        opening = null;
      });
      const opened = await opening;
      if (opened) listener = opened;
      return;
    }
    await opening;
  }

  function schedulePoll(entry) {
    entry.pollTimer = setTimeout(async () => {
      if (entry.state !== "waiting") return;
      if (poolEnded()) return databaseClosed();
      await ensureListener().catch(() => {});
      await tick(entry.key, entry.owner).catch(() => {});
      if (entry.state === "waiting") schedulePoll(entry);
    }, entry.pollMs);
  }

  async function leave(entry) {
    if (entry.state !== "waiting") return;
    if (poolEnded()) return databaseClosed();
    entry.state = "leaving";
    clearTimeout(entry.pollTimer);
    try {
      const row = await io.row(sql.leave, [entry.key, entry.owner]);
      const granted = row !== null && truthy(row.granted);
      entry.state = "waiting"; // so that settle() below is the one that finishes it
      settle(entry, granted && !entry.withdrawn ? grantOf(row.fence, row.waited_ms) : false);
    } catch (error) {
      entry.state = "waiting";
      fail(entry, error);
    }
  }

  return {
    /**
     * Takes the key, or queues for it and waits up to waitMs for the store to hand it over.
     * Answers { fence, waitedMs } or false (the wait is spent and the caller is not queued).
     */
    async acquireOrWait(key, owner, ttlMs, waitMs, pollMs) {
      check.key(key);
      check.owner(owner);
      check.ttl(ttlMs);
      if (!Number.isInteger(waitMs) || waitMs < 0 || waitMs > MAX_WAIT_MS) {
        throw new RangeError(`databaseLockStore: waitMs must be a whole number of ms in 0..${MAX_WAIT_MS}, got ${waitMs}`);
      }
      if (!Number.isInteger(pollMs) || pollMs < 1 || pollMs > MAX_WAIT_MS) {
        throw new RangeError(`databaseLockStore: pollMs must be a whole number of ms in 1..${MAX_WAIT_MS}, got ${pollMs}`);
      }
      if (entriesOf(key)?.has(owner)) {
        throw new Error(`databaseLockStore: ${owner} is already waiting for this key`);
      }
      // Listening before joining the queue, so no grant's notification can come too early.
      await ensureListener();
      let entry;
      const answer = new Promise((resolve, reject) => {
        entry = { key, owner, pollMs: Math.max(pollMs, safetyNetMs), state: "waiting", withdrawn: false, resolve, reject };
      });
      // The deadline timer can settle (or fail) `answer` while the enqueue below is still in
      // flight, before the caller holds `answer`: marked handled so that an early failure is not
      // an unhandled rejection (the caller still sees it when it awaits).
      answer.catch(() => {});
      let entries = waiting.get(key);
      if (!entries) waiting.set(key, (entries = new Map()));
      entries.set(owner, entry);
      entry.deadlineTimer = setTimeout(() => leave(entry), waitMs);
      let row;
      try {
        row = await io.row(sql.enqueue, [key, owner, ttlMs, waitMs]);
      } catch (error) {
        // Whether or not the enqueue committed, the caller neither holds nor waits afterwards.
        await io.row(sql.release, [key, owner]).catch(() => {});
        fail(entry, error);
        return answer;
      }
      if (row?.fence !== null && row?.fence !== undefined) {
        try {
          settle(entry, grantOf(row.fence, 0));
        } catch (error) {
          await io.row(sql.release, [key, owner]).catch(() => {});
          fail(entry, error);
        }
        return answer;
      }
      if (entry.state === "waiting") {
        schedulePoll(entry);
        const remaining = row?.remaining === null || row?.remaining === undefined ? null : Number(row.remaining);
        // No holder, or an expired one: nobody is going to release — hand over now.
        if (remaining === null || remaining <= 0) tick(key, owner).catch(() => {});
        else expireAfter(key, remaining);
      }
      return answer;
    },

    /**
     * `owner` stops waiting for `key`: it leaves the queue, a grant it got is released (and handed
     * to the next waiter), and its pending acquireOrWait answers false.
     */
    async withdraw(key, owner) {
      check.key(key);
      check.owner(owner);
      const entry = entriesOf(key)?.get(owner);
      if (entry) {
        entry.withdrawn = true;
        if (entry.state === "waiting") {
          entry.state = "withdrawing";
          clearTimeout(entry.pollTimer);
          clearTimeout(entry.deadlineTimer);
        }
      }
      try {
        await io.row(sql.release, [key, owner]);
      } finally {
        if (entry && entry.state === "withdrawing") {
          entry.state = "waiting";
          settle(entry, false);
        }
      }
    },

    /**
     * Stops waiting: pending acquireOrWait calls leave their queues (answering a grant they got
     * before leaving, else false) and the LISTEN connection is closed (a pool's connection is
     * destroyed, a single client only stops listening). The store stays usable; a later
     * acquireOrWait listens again.
     */
    async close() {
      const pending = [];
      for (const entries of waiting.values()) for (const entry of entries.values()) pending.push(leave(entry));
      await Promise.all(pending);
      await stopListening();
    },

    /** How many acquireOrWait calls of this store are waiting, and whether it is listening. */
    get waitingCount() {
      let count = 0;
      for (const entries of waiting.values()) count += entries.size;
      return count;
    },
    get listening() {
      return listener !== null && !listener.dead;
    },
    /** The LISTEN connection's client, if any (for tests and diagnostics). */
    get listenClient() {
      return listener?.client ?? null;
    },
  };
}


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
  const wait = pgWaiting(db, sql, io, options);
  Object.defineProperties(store, Object.getOwnPropertyDescriptors(wait));
  store.end = store.close;
  return store;
}

export default databaseLockStore;
