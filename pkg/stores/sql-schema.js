// keel-lock/sql: the lock table and every statement the store runs, per dialect (SQLite for
// D1 and better-sqlite3; PostgreSQL, with its waiters table and the hand-over in SQL). How each
// operation maps onto a statement, and why it is atomic: stores/README.md, "keel-lock/sql".

import { MAX_FENCE } from "./args.js";

export const DEFAULT_TABLE = "keel_locks";

// Plain SQL identifiers only, optionally schema-qualified: no quotes, spaces or punctuation can
// reach the SQL text. 63 characters is PostgreSQL's limit for one identifier.
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;

/**
 * Validates a table name: one identifier, or `schema.table`. Throws TypeError otherwise.
 * @returns {string[]} its parts
 */
export function tableParts(table) {
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

export function dialectOf(driverOrDialect) {
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
    // Postgres, watch: who watches which key (a lease per watching store), the triggers that
    // report holder changes of watched keys, and the channel the reports go out on, apart from
    // the waiters' so that neither hears the other's traffic.
    watchers: inSchema(fitIdentifier(last, "_watchers")),
    watchChannel: fitIdentifier(parts.join("_"), "_watch"),
    watchTriggers: { update: fitIdentifier(last, "_watch_on_update"), delete: fitIdentifier(last, "_watch_on_delete") },
    // Shared holds (semaphore permits, read locks): one row per (key, owner) in <table>_shared,
    // its expiry index, and (SQLite) the triggers that keep the key's lock row in step with
    // them; (Postgres) the functions that run each shared operation.
    shared: inSchema(fitIdentifier(last, "_shared")),
    sharedBare: quote(fitIdentifier(last, "_shared")),
    sharedLast: fitIdentifier(last, "_shared"),
    sharedIndex: fitIdentifier(last, "_shared_expires_at_idx"),
    sharedIndexInSchema: inSchema(fitIdentifier(last, "_shared_expires_at_idx")),
    tableBare: quote(last),
    sharedTriggers: Object.fromEntries(
      ["fence_on_insert", "fence_on_update", "on_insert", "on_update", "on_delete"].map((t) => [
        t,
        inSchema(fitIdentifier(last, `_shared_${t}`)),
      ]),
    ),
    headerTrigger: inSchema(fitIdentifier(last, "_shared_header_gone")),
    functions: Object.fromEntries(
      ["take_shared", "release_shared", "extend_shared", "hand_over", "tick", "take_many", "keep_fence", "watch", "unwatch", "watch_report"].map((f) => [
        f,
        inSchema(fitIdentifier(last, `_${f}`)),
      ]),
    ),
  };
}

// The fence's range in SQL: MAX_FENCE = 2^53 − 1 exactly.
const MAX_FENCE_SQL = String(MAX_FENCE);

export function schemaStatements(dialect, table) {
  const n = objectNames(table);
  if (dialect === "postgres") {
    return [
      `CREATE TABLE IF NOT EXISTS ${n.table} (\n` +
        "  key          TEXT   PRIMARY KEY,\n" +
        "  owner        TEXT   NOT NULL,\n" +
        "  expires_at   BIGINT NOT NULL,\n" +
        "  queued_until BIGINT NOT NULL DEFAULT 0,\n" +
        "  fence        BIGINT,\n" + // the holder's fence (NULL: a header, or a hold from before this column)
        "  metadata     TEXT,\n" + // the holder's metadata, given at acquisition
        "  watched_until BIGINT NOT NULL DEFAULT 0\n" + // until when some store watches the key (0: nobody)
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
        "  weight      BIGINT,\n" + // a shared waiter's permits and limit; NULL: exclusive
        "  lim         BIGINT,\n" +
        "  metadata    TEXT,\n" + // what the grant's hold will carry
        "  PRIMARY KEY (key, owner)\n" +
        ")",
      `CREATE INDEX IF NOT EXISTS ${n.waitersIndex} ON ${n.waiters} (key, seq)`,
      // Shared holds, one row per holder. While any is live the key's lock row is their header:
      // owner '' (no caller's owner can be empty), expires_at the latest of their expiries — so
      // an exclusive acquire, isLocked and remainingTime read the lock row exactly as before.
      `CREATE TABLE IF NOT EXISTS ${n.shared} (\n` +
        "  key        TEXT   NOT NULL,\n" +
        "  owner      TEXT   NOT NULL,\n" +
        "  expires_at BIGINT NOT NULL,\n" +
        "  weight     BIGINT NOT NULL,\n" +
        "  lim        BIGINT NOT NULL,\n" +
        "  fence      BIGINT NOT NULL,\n" +
        "  metadata   TEXT,\n" +
        "  PRIMARY KEY (key, owner)\n" +
        ")",
      `CREATE INDEX IF NOT EXISTS ${quote(n.sharedIndex)} ON ${n.shared} (expires_at)`,
      // One row per (key, watching store): its lease, renewed while it watches. The lock row's
      // watched_until is the latest lease of its key's rows (see postgresFunctions, watch).
      `CREATE TABLE IF NOT EXISTS ${n.watchers} (\n` +
        "  key        TEXT   NOT NULL,\n" +
        "  watcher    TEXT   NOT NULL,\n" +
        "  expires_at BIGINT NOT NULL,\n" +
        "  PRIMARY KEY (key, watcher)\n" +
        ")",
      ...postgresFunctions(n),
      ...watchTriggers(n),
    ];
  }
  // SQLite: the index and triggers take the schema qualifier, the table in ON must not.
  const raise =
    `BEGIN UPDATE ${n.counterBare} SET value = NEW.fence WHERE id = 1 AND value < NEW.fence; END`;
  const now = SQLITE_NOW;
  const t = n.tableBare;
  const sh = n.sharedBare;
  const on = quote(n.sharedLast);
  // The key's lock row as the header of its shared holds (owner '', expires_at their latest
  // expiry), kept in step by triggers so that every shared operation is one statement.
  const liveShared = (ref) => `SELECT 1 FROM ${sh} WHERE key = ${ref}.key AND expires_at > ${now}`;
  return [
    `CREATE TABLE IF NOT EXISTS ${n.table} (\n` +
      "  key        TEXT    PRIMARY KEY NOT NULL,\n" +
      "  owner      TEXT    NOT NULL,\n" +
      "  expires_at INTEGER NOT NULL,\n" +
      `  fence      INTEGER CHECK (fence BETWEEN 1 AND ${MAX_FENCE_SQL}),\n` +
      "  metadata   TEXT\n" +
      ")",
    `CREATE INDEX IF NOT EXISTS ${n.indexInSchema} ON ${quote(n.last)} (expires_at)`,
    `CREATE TABLE IF NOT EXISTS ${n.shared} (\n` +
      "  key        TEXT    NOT NULL,\n" +
      "  owner      TEXT    NOT NULL,\n" +
      "  expires_at INTEGER NOT NULL,\n" +
      "  weight     INTEGER NOT NULL,\n" +
      "  lim        INTEGER NOT NULL,\n" +
      `  fence      INTEGER CHECK (fence BETWEEN 1 AND ${MAX_FENCE_SQL}),\n` +
      "  metadata   TEXT,\n" +
      "  PRIMARY KEY (key, owner)\n" +
      ") WITHOUT ROWID",
    `CREATE INDEX IF NOT EXISTS ${n.sharedIndexInSchema} ON ${on} (expires_at)`,
    `CREATE TABLE IF NOT EXISTS ${n.counter} (\n` +
      "  id    INTEGER PRIMARY KEY CHECK (id = 1),\n" +
      `  value INTEGER NOT NULL CHECK (value BETWEEN 0 AND ${MAX_FENCE_SQL})\n` +
      ")",
    // Seeded once; from the rows' fences if the counter is ever recreated next to them.
    `INSERT OR IGNORE INTO ${n.counter} (id, value) SELECT 1, ` +
      `max(COALESCE((SELECT MAX(fence) FROM ${n.table}), 0), COALESCE((SELECT MAX(fence) FROM ${n.shared}), 0))`,
    `CREATE TRIGGER IF NOT EXISTS ${n.insertTrigger} AFTER INSERT ON ${quote(n.last)} WHEN NEW.fence IS NOT NULL ${raise}`,
    `CREATE TRIGGER IF NOT EXISTS ${n.updateTrigger} AFTER UPDATE OF fence ON ${quote(n.last)} WHEN NEW.fence IS NOT NULL ${raise}`,
    `CREATE TRIGGER IF NOT EXISTS ${n.sharedTriggers.fence_on_insert} AFTER INSERT ON ${on} WHEN NEW.fence IS NOT NULL ${raise}`,
    `CREATE TRIGGER IF NOT EXISTS ${n.sharedTriggers.fence_on_update} AFTER UPDATE OF fence ON ${on} WHEN NEW.fence IS NOT NULL ${raise}`,
    // A grant: expired holds of the key go, and the header is raised to the new expiry (or
    // replaces an expired exclusive row; a live one was ruled out by the grant's statement).
    `CREATE TRIGGER IF NOT EXISTS ${n.sharedTriggers.on_insert} AFTER INSERT ON ${on} BEGIN ` +
      `DELETE FROM ${sh} WHERE key = NEW.key AND expires_at <= ${now}; ` +
      `INSERT INTO ${t} (key, owner, expires_at, fence) VALUES (NEW.key, '', NEW.expires_at, NULL) ` +
      "ON CONFLICT (key) DO UPDATE SET owner = '', fence = NULL, " +
      "expires_at = max(CASE WHEN owner = '' THEN expires_at ELSE 0 END, excluded.expires_at); END",
    // An extend (or a holder taking back its own expired row): the header is the latest expiry.
    `CREATE TRIGGER IF NOT EXISTS ${n.sharedTriggers.on_update} AFTER UPDATE OF expires_at ON ${on} BEGIN ` +
      `INSERT INTO ${t} (key, owner, expires_at, fence) VALUES (NEW.key, '', NEW.expires_at, NULL) ` +
      "ON CONFLICT (key) DO UPDATE SET owner = '', fence = NULL, " +
      `expires_at = (SELECT max(expires_at) FROM ${sh} WHERE key = NEW.key); END`,
    // A release: the header follows the holds still live, and goes with the last of them.
    `CREATE TRIGGER IF NOT EXISTS ${n.sharedTriggers.on_delete} AFTER DELETE ON ${on} BEGIN ` +
      `UPDATE ${t} SET expires_at = (SELECT max(expires_at) FROM ${sh} WHERE key = OLD.key AND expires_at > ${now}) ` +
      `WHERE key = OLD.key AND owner = '' AND EXISTS (${liveShared("OLD")}); ` +
      `DELETE FROM ${t} WHERE key = OLD.key AND owner = '' AND NOT EXISTS (${liveShared("OLD")}); END`,
    // A header deleted (forceRelease, purgeExpired) takes its holds with it.
    `CREATE TRIGGER IF NOT EXISTS ${n.headerTrigger} AFTER DELETE ON ${quote(n.last)} WHEN OLD.owner = '' BEGIN ` +
      `DELETE FROM ${sh} WHERE key = OLD.key; END`,
  ];
}

// Milliseconds since the epoch by SQLite's clock. julianday('now') has ms resolution and is
// fixed for the duration of one statement (its triggers included); this works on every SQLite
// version that has upsert (unixepoch('subsec') would need 3.42+).
const SQLITE_NOW = "CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)";

// What createTable() runs after the CREATE TABLE and before the rest of schemaStatements(), to
// bring a lock table from an earlier layout up to date: the fence column (SQLite) and the
// metadata column. SQLite has no ADD COLUMN IF NOT EXISTS: each statement fails with "duplicate
// column name" on a table that has the column, and createTable() ignores exactly that error.
// Postgres's fence migration was the CREATE SEQUENCE above; waiting added queued_until, hold
// metadata the holder's fence and metadata, and watch watched_until (ADD COLUMN IF NOT EXISTS,
// so no error to ignore; before the functions and triggers that name these columns are created).
export function upgradeStatements(dialect, table) {
  const n = objectNames(table);
  if (dialect === "postgres") {
    return [
      `ALTER TABLE ${n.table} ADD COLUMN IF NOT EXISTS queued_until BIGINT NOT NULL DEFAULT 0, ` +
        "ADD COLUMN IF NOT EXISTS fence BIGINT, ADD COLUMN IF NOT EXISTS metadata TEXT, " +
        "ADD COLUMN IF NOT EXISTS watched_until BIGINT NOT NULL DEFAULT 0",
    ];
  }
  return [
    `ALTER TABLE ${n.table} ADD COLUMN fence INTEGER CHECK (fence BETWEEN 1 AND ${MAX_FENCE_SQL})`,
    `ALTER TABLE ${n.table} ADD COLUMN metadata TEXT`,
  ];
}

// What createTable() runs after all of schemaStatements(): the tables made there, as an earlier
// release laid them out, get the columns that came since — the waiters' shared columns
// (Postgres; SQLite has no queue) and the metadata columns. Postgres: no-ops on a table that
// has them; SQLite: "duplicate column name", ignored as above.
export function lateUpgradeStatements(dialect, table) {
  const n = objectNames(table);
  if (dialect !== "postgres") return [`ALTER TABLE ${n.shared} ADD COLUMN metadata TEXT`];
  return [
    `ALTER TABLE ${n.waiters} ADD COLUMN IF NOT EXISTS weight BIGINT, ADD COLUMN IF NOT EXISTS lim BIGINT, ADD COLUMN IF NOT EXISTS metadata TEXT`,
    `ALTER TABLE ${n.shared} ADD COLUMN IF NOT EXISTS metadata TEXT`,
  ];
}

// The statements, per dialect. Parameters are listed in the order each statement binds them.
export function statements(dialect, table) {
  const n = objectNames(table);
  const t = n.table;
  if (dialect === "sqlite") {
    const now = SQLITE_NOW;
    const sh = n.shared;
    return {
      // The new fence is read from the counter inside the statement, which already holds
      // SQLite's write lock; the triggers raise the counter when the row is written.
      // The holder's metadata (NULL: none) is written with the grant, replacing an expired holder's.
      acquire:
        `INSERT INTO ${t} AS cur (key, owner, expires_at, fence, metadata) ` +
        `VALUES (?, ?, ${now} + CAST(? AS INTEGER), (SELECT value + 1 FROM ${n.counter} WHERE id = 1), ?) ` +
        "ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at, fence = excluded.fence, " +
        `metadata = excluded.metadata WHERE cur.expires_at <= ${now} RETURNING owner, fence`, // key, owner, ttl, metadata
      release: `DELETE FROM ${t} WHERE key = ? AND owner = ? RETURNING expires_at > ${now} AS live`, // key, owner
      forceRelease: `DELETE FROM ${t} WHERE key = ? RETURNING expires_at > ${now} AS live`, // key
      extend:
        `UPDATE ${t} SET expires_at = ${now} + CAST(? AS INTEGER) ` +
        `WHERE key = ? AND owner = ? AND expires_at > ${now} RETURNING 1 AS ok`, // ttl, key, owner
      isLocked: `SELECT 1 AS held FROM ${t} WHERE key = ? AND expires_at > ${now}`, // key
      remainingTime: `SELECT expires_at - ${now} AS remaining FROM ${t} WHERE key = ? AND expires_at > ${now}`, // key
      // Headers first (their holds go with them, by trigger), then expired holds of live keys.
      purge: [`DELETE FROM ${t} WHERE expires_at <= ${now}`, `DELETE FROM ${sh} WHERE expires_at <= ${now}`],
      now: `SELECT ${now} AS now`,
      // The key's live holds: its lock row unless it is a header (owner ''), and its live shared
      // holds. One statement, so one snapshot and one reading of the clock.
      inspect: {
        text:
          `SELECT fence, metadata, expires_at - ${now} AS remaining FROM ${t} WHERE key = ? AND owner <> '' AND expires_at > ${now} ` +
          `UNION ALL SELECT fence, metadata, expires_at - ${now} FROM ${sh} WHERE key = ? AND expires_at > ${now} ` +
          "ORDER BY fence",
        params: (key) => [key, key],
      },

      // Shared holds. A grant when no exclusive hold is live, the caller holds no live share of
      // the key, every live share is under this limit and the weights fit; else no row. The
      // conflict path takes back the caller's own expired row. The header follows by trigger.
      acquireShared: {
        text:
          `INSERT INTO ${sh} AS cur (key, owner, expires_at, weight, lim, fence, metadata) ` +
          `SELECT ?, ?, ${now} + CAST(? AS INTEGER), ?, ?, (SELECT value + 1 FROM ${n.counter} WHERE id = 1), ? ` +
          `WHERE NOT EXISTS (SELECT 1 FROM ${t} WHERE key = ? AND owner <> '' AND expires_at > ${now}) ` +
          `AND NOT EXISTS (SELECT 1 FROM ${sh} WHERE key = ? AND expires_at > ${now} AND (owner = ? OR lim <> ?)) ` +
          `AND (SELECT COALESCE(SUM(weight), 0) + ? <= ? FROM ${sh} WHERE key = ? AND expires_at > ${now}) ` +
          "ON CONFLICT (key, owner) DO UPDATE SET expires_at = excluded.expires_at, weight = excluded.weight, " +
          "lim = excluded.lim, fence = excluded.fence, metadata = excluded.metadata RETURNING fence",
        params: (key, owner, ttl, weight, limit, metadata) => [key, owner, ttl, weight, limit, metadata, key, key, owner, limit, weight, limit, key],
      },
      // After a refusal: the limit of live holds under another limit, if any.
      heldLimit: {
        text: `SELECT lim FROM ${sh} WHERE key = ? AND expires_at > ${now} AND lim <> ? LIMIT 1`,
        params: (key, limit) => [key, limit],
      },
      releaseShared: `DELETE FROM ${sh} WHERE key = ? AND owner = ? RETURNING expires_at > ${now} AS live`, // key, owner
      // Several keys in one statement: key i to owner i when no key of the set has a live row (a
      // lock, or the header of live shared holds), else no row at all. The keys and owners come
      // as two JSON arrays (D1 binds at most 100 parameters); row i draws counter + 1 + i, so
      // the set's fences are distinct and rise in key order, and the triggers raise the counter
      // past the last. One statement under SQLite's write lock: nothing changes between the
      // check and the writes, and the conflict path (the key's expired row) is the acquire's.
      // Metadata, when any key has some, is a third JSON array (element i, or null), else NULL.
      acquireMany: {
        text:
          `INSERT INTO ${t} AS cur (key, owner, expires_at, fence, metadata) ` +
          `SELECT k.value, o.value, ${now} + CAST(? AS INTEGER), (SELECT value FROM ${n.counter} WHERE id = 1) + k.key + 1, ` +
          "json_extract(?, '$[' || k.key || ']') " +
          "FROM json_each(?) AS k JOIN json_each(?) AS o ON o.key = k.key " +
          `WHERE NOT EXISTS (SELECT 1 FROM ${t} AS l WHERE l.key IN (SELECT value FROM json_each(?)) AND l.expires_at > ${now}) ` +
          "ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at, fence = excluded.fence, " +
          `metadata = excluded.metadata WHERE cur.expires_at <= ${now} RETURNING key, owner, fence`,
        params: (keys, owners, ttl, metadata) => [
          ttl,
          metadata === null ? null : JSON.stringify(metadata),
          JSON.stringify(keys),
          JSON.stringify(owners),
          JSON.stringify(keys),
        ],
      },
      extendShared:
        `UPDATE ${sh} SET expires_at = ${now} + CAST(? AS INTEGER) ` +
        `WHERE key = ? AND owner = ? AND expires_at > ${now} RETURNING 1 AS ok`, // ttl, key, owner
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
  const f = n.functions;
  // Waiters still in the running: not granted, deadline not passed.
  const live = "w.granted_at IS NULL AND w.deadline > c.now";
  const notify = notifier(n);
  const grantedPayload = "json_build_array(g.key, g.owner, g.fence, g.waited_ms, g.ttl_ms)::text";
  const freedPayload = "json_build_array($1::text, NULL)::text";
  const stale = staleAt("c.now");
  const grantReturning = "RETURNING w.key, w.owner, w.fence, w.granted_at - w.enqueued_at AS waited_ms, w.ttl_ms";
  // The fence of a grant that `row` (a CTE's RETURNING cur.owner, cur.fence) wrote, kept in the
  // lock row. A takeover drew it in its ON CONFLICT … DO UPDATE SET, which runs once the row is
  // locked and the WHERE has passed. A new row (the INSERT path) cannot draw it there — the
  // INSERT's values are computed before the row exists, so a nextval() there could be overtaken
  // (see stores/README.md, "Fencing tokens (SQL)") — so it is drawn here, after the insert, and
  // written into the row by <table>_keep_fence, whose UPDATE (a statement of its own) sees it.
  const fenceOf = (row, key) => `COALESCE(${row}.fence, ${f.keep_fence}(${key}, ${row}.owner, ${seq}))`;

  // Hands key $1 to its oldest live waiter if the lock is free or expired, when `guard` holds.
  // CTEs: l (the lock row, locked), head (the oldest live waiter, locked; rows that stopped
  // qualifying while it waited for the lock are skipped), hw (the lock row written for the head,
  // only if it is still free), g (the head marked granted, with a fence drawn after hw), swept.
  // A shared head is not granted here: its waiters' stores hand over (tick) at the expiry.
  const grantChain = (guard) =>
    `l AS (SELECT cur.expires_at FROM ${t} AS cur WHERE cur.key = $1 AND ${guard} FOR UPDATE OF cur), ` +
    `head AS (SELECT w.owner, w.ttl_ms, w.weight, w.metadata FROM ${w} AS w, c WHERE w.key = $1 AND ${live} AND ${guard} ` +
    "AND NOT EXISTS (SELECT 1 FROM l WHERE l.expires_at > c.now) ORDER BY w.seq LIMIT 1 FOR UPDATE OF w), " +
    `hw AS (INSERT INTO ${t} AS cur (key, owner, expires_at, metadata) SELECT $1, head.owner, c.now + head.ttl_ms, head.metadata FROM head, c WHERE head.weight IS NULL ` +
    `ON CONFLICT (key) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at, fence = ${seq}, metadata = EXCLUDED.metadata ` +
    `WHERE cur.expires_at <= ${nowSql} RETURNING cur.owner, cur.fence), ` +
    `g AS (UPDATE ${w} AS w SET granted_at = c.now, fence = ${fenceOf("hw", "$1")} FROM hw, c WHERE w.key = $1 AND w.owner = hw.owner ` +
    `${grantReturning}), ` +
    `swept AS (DELETE FROM ${w} AS w USING c WHERE w.key = $1 AND ${guard} AND ${stale})`;
  const notifyGrant = `(SELECT count(*) FROM g, LATERAL (SELECT ${notify(grantedPayload)}) AS sent)`;
  // Are there waiters (as this statement sees them)?
  const queued = `q AS (SELECT EXISTS (SELECT 1 FROM ${w} AS w, c WHERE w.key = $1 AND ${live}) AS queued)`;

  return {
    // nextval() is evaluated for the row `won` returns, after the upsert has written (and so
    // locked) the lock row — never for a failed attempt, never before the row lock is held (see
    // fenceOf). With waiters queued the caller does not take the key: if it is free or expired,
    // it goes to the oldest waiter in this same statement. $4: the holder's metadata, or NULL.
    acquire:
      `WITH ${clockCte}, ${queued}, ` +
      `won AS (INSERT INTO ${t} AS cur (key, owner, expires_at, metadata) SELECT $1, $2, c.now + $3::bigint, $4::text FROM c, q WHERE NOT q.queued ` +
      `ON CONFLICT (key) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at, fence = ${seq}, metadata = EXCLUDED.metadata ` +
      `WHERE cur.expires_at <= ${nowSql} RETURNING cur.owner, cur.fence), ` +
      `${grantChain("(SELECT queued FROM q)")} ` +
      `SELECT won.owner, ${fenceOf("won", "$1")} AS fence, ${notifyGrant} AS notified FROM won ` +
      `UNION ALL SELECT NULL, NULL, ${notifyGrant} WHERE NOT EXISTS (SELECT 1 FROM won)`,
    // Frees the key, or hands it to the oldest live waiter (other than the caller) in the same
    // statement; also deletes the caller's own waiter row (so this is withdraw too) and stale
    // rows of the key.
    release:
      `WITH ${clockCte}, ` +
      `mine AS (SELECT cur.expires_at > c.now AS live, cur.queued_until > c.now AS queued FROM ${t} AS cur, c ` +
      "WHERE cur.key = $1 AND cur.owner = $2 FOR UPDATE OF cur), " +
      `head AS (SELECT w.owner, w.ttl_ms, w.weight IS NULL AS exclusive, w.metadata FROM ${w} AS w, c WHERE w.key = $1 AND w.owner <> $2 AND ${live} ` +
      "AND EXISTS (SELECT 1 FROM mine) ORDER BY w.seq LIMIT 1 FOR UPDATE OF w), " +
      // A shared head: the row stays, expired (a header of no holds, queued_until kept), and
      // the caller runs `tick` next, which grants the front waiters that fit. An exclusive head
      // gets the row with a fence drawn under `mine`'s lock, and its own metadata.
      `moved AS (UPDATE ${t} AS cur SET owner = CASE WHEN head.exclusive THEN head.owner ELSE '' END, ` +
      "expires_at = CASE WHEN head.exclusive THEN c.now + head.ttl_ms ELSE 0 END, " +
      `fence = CASE WHEN head.exclusive THEN ${seq} END, metadata = CASE WHEN head.exclusive THEN head.metadata END FROM head, c ` +
      "WHERE cur.key = $1 AND cur.owner = $2 RETURNING cur.owner, cur.fence), " +
      `freed AS (DELETE FROM ${t} AS cur WHERE cur.key = $1 AND cur.owner = $2 AND NOT EXISTS (SELECT 1 FROM head) RETURNING 1), ` +
      `g AS (UPDATE ${w} AS w SET granted_at = c.now, fence = moved.fence FROM moved, c WHERE w.key = $1 AND w.owner = moved.owner ` +
      `${grantReturning}), ` +
      `gone AS (DELETE FROM ${w} AS w USING c WHERE w.key = $1 AND (w.owner = $2 OR ${stale})) ` +
      `SELECT mine.live, ${notifyGrant} AS notified, ` +
      `(SELECT count(*) FROM (SELECT ${notify(freedPayload)} WHERE mine.queued AND NOT EXISTS (SELECT 1 FROM head)) AS sent) AS freed_notified, ` +
      "EXISTS (SELECT 1 FROM head WHERE NOT head.exclusive) AS hand_over " +
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
    // Lock rows and shared holds expired by the database clock go (the count answered); so do
    // waiter rows nobody will ask for any more. Rows another statement has locked are left to
    // it: purging never waits for a row lock, so it cannot deadlock with the hand-over.
    purge:
      clock +
      `, swept AS (DELETE FROM ${w} AS w WHERE (w.key, w.owner) IN ` +
      `(SELECT w.key, w.owner FROM ${w} AS w, c WHERE ${stale} FOR UPDATE OF w SKIP LOCKED)), ` +
      `holds AS (DELETE FROM ${n.shared} AS s WHERE (s.key, s.owner) IN ` +
      `(SELECT s.key, s.owner FROM ${n.shared} AS s, c WHERE s.expires_at <= c.now FOR UPDATE OF s SKIP LOCKED) RETURNING 1), ` +
      `locks AS (DELETE FROM ${t} AS cur WHERE cur.key IN ` +
      `(SELECT cur.key FROM ${t} AS cur, c WHERE cur.expires_at <= c.now AND cur.watched_until <= c.now FOR UPDATE OF cur SKIP LOCKED) RETURNING 1), ` +
      `lapsed AS (DELETE FROM ${n.watchers} AS x USING c WHERE x.expires_at <= c.now) ` +
      "SELECT (SELECT count(*) FROM holds) + (SELECT count(*) FROM locks) AS purged",
    now: clock + "SELECT now FROM c",
    // The key's live holds as JSON [[fence, metadata, remaining ms], …] in fence order (numbers
    // as text), and how many live waiters are queued for it. One statement: one snapshot.
    inspect:
      `WITH ${clockCte}, ` +
      `h AS (SELECT cur.fence, cur.metadata, cur.expires_at - c.now AS remaining FROM ${t} AS cur, c ` +
      "WHERE cur.key = $1 AND cur.owner <> '' AND cur.expires_at > c.now " +
      `UNION ALL SELECT s.fence, s.metadata, s.expires_at - c.now FROM ${n.shared} AS s, c WHERE s.key = $1 AND s.expires_at > c.now) ` +
      "SELECT (SELECT COALESCE(json_agg(json_build_array(h.fence::text, h.metadata, h.remaining::text) ORDER BY h.fence NULLS FIRST), '[]') FROM h) AS holders, " +
      `(SELECT count(*) FROM ${w} AS w, c WHERE w.key = $1 AND ${live}) AS waiting`,

    // acquireOrWait's first statement ($1 key, $2 owner, $3 ttl, $4 wait): take the key if it is
    // free (or expired) and nobody is queued — answers fence; otherwise join the queue — answers
    // remaining, the holder's ms left as of now (null: no holder; ≤ 0: expired), read from the
    // lock row this statement wrote, so it is current. Either way the lock row's queued_until is
    // raised to the new waiter's deadline (see postgresStatements). $5: the caller's metadata, or
    // NULL — its hold's, now or when the key is handed to it.
    enqueue:
      `WITH ${clockCte}, ${queued}, ` +
      `won AS (INSERT INTO ${t} AS cur (key, owner, expires_at, queued_until, metadata) SELECT $1, $2, c.now + $3::bigint, 0, $5::text FROM c, q WHERE NOT q.queued ` +
      // The same owner already holding the key is not a new grant: no update, so no fence.
      "ON CONFLICT (key) DO UPDATE SET " +
      `owner = CASE WHEN cur.expires_at <= ${nowSql} THEN EXCLUDED.owner ELSE cur.owner END, ` +
      `queued_until = CASE WHEN cur.expires_at <= ${nowSql} THEN cur.queued_until ELSE GREATEST(cur.queued_until, ${nowSql} + $4::bigint) END, ` +
      `expires_at = CASE WHEN cur.expires_at <= ${nowSql} THEN EXCLUDED.expires_at ELSE cur.expires_at END, ` +
      `fence = CASE WHEN cur.expires_at <= ${nowSql} THEN ${seq} ELSE cur.fence END, ` +
      `metadata = CASE WHEN cur.expires_at <= ${nowSql} THEN EXCLUDED.metadata ELSE cur.metadata END ` +
      "WHERE cur.owner <> EXCLUDED.owner RETURNING cur.owner, cur.expires_at, cur.fence), " +
      `raised AS (UPDATE ${t} AS cur SET queued_until = GREATEST(cur.queued_until, c.now + $4::bigint) FROM c, q ` +
      "WHERE cur.key = $1 AND q.queued RETURNING cur.expires_at), " +
      `fenced AS (SELECT ${fenceOf("won", "$1")} AS fence FROM won WHERE won.owner = $2), ` +
      `joined AS (INSERT INTO ${w} AS w (key, owner, ttl_ms, enqueued_at, deadline, metadata) SELECT $1, $2, $3::bigint, c.now, c.now + $4::bigint, $5::text FROM c ` +
      "WHERE NOT EXISTS (SELECT 1 FROM fenced) ON CONFLICT (key, owner) DO NOTHING RETURNING 1) " +
      "SELECT (SELECT fence FROM fenced) AS fence, " +
      "(SELECT e.expires_at - c.now FROM (SELECT expires_at FROM won WHERE won.owner <> $2 UNION ALL SELECT expires_at FROM raised) AS e, c LIMIT 1) AS remaining, " +
      "(SELECT count(*) FROM joined) AS joined",
    // A waiter's look ($1 key, $2 owner or null): hand the key over to the front waiters that
    // fit; answers JSON { grants: [[owner, fence, waitedMs, ttlMs], …], me: the caller's waiter
    // row or null, remaining: ms until the next hold expires, or null }.
    tick: `SELECT ${f.tick}($1, $2::text) AS r`,
    // A waiter whose wait is spent leaves the queue ($1 key, $2 owner). If the key was handed to
    // it before it left (and the grant is still live), that grant is answered.
    leave:
      `WITH ${clockCte}, gone AS (DELETE FROM ${w} AS w WHERE w.key = $1 AND w.owner = $2 ` +
      "RETURNING w.fence, w.granted_at, w.enqueued_at, w.ttl_ms) " +
      "SELECT gone.fence, gone.granted_at - gone.enqueued_at AS waited_ms, " +
      "(gone.granted_at IS NOT NULL AND gone.granted_at + gone.ttl_ms > c.now) AS granted FROM gone, c",
    // The store's LISTEN connection: the waiters' channel, watch's (below), and the statements
    // that start and stop listening on one.
    wakeChannel: n.channel,
    listen: (channel) => `LISTEN ${quote(channel)}`,
    unlisten: (channel) => `UNLISTEN ${quote(channel)}`,
    // Watch: its channel, and a store's registration of its watches ($1 keys, $2 the store's
    // watcher id, $3 the lease in ms; answers the keys whose earlier lease had lapsed) and the
    // end of one ($1 key, $2 watcher id). See postgresFunctions, watch and unwatch.
    watchChannel: n.watchChannel,
    watch: `SELECT ${f.watch}($1::text[], $2::text, $3::bigint) AS lapsed`,
    unwatch: `SELECT ${f.unwatch}($1::text, $2::text) AS done`,

    // Shared holds, each one call of a function (postgresFunctions) that locks the key's lock
    // row first: the function's later statements then see every shared hold of the key as of now.
    // JSON { fence } | { held_limit } | { fence: null, queued, remaining } ($1 key, $2 owner,
    // $3 ttl, $4 weight, $5 limit, $6 metadata[, $7 wait]).
    acquireShared: {
      text: `SELECT ${f.take_shared}($1, $2, $3::bigint, $4::bigint, $5::bigint, NULL::bigint, $6::text) AS r`,
      params: (...a) => a,
    },
    acquireSharedWait: `SELECT ${f.take_shared}($1, $2, $3::bigint, $4::bigint, $5::bigint, $7::bigint, $6::text) AS r`,
    // JSON { live } ($1 key, $2 owner, or null: every hold of the key).
    releaseShared: `SELECT ${f.release_shared}($1, $2::text) AS r`,
    extendShared: `SELECT ${f.extend_shared}($2, $3, $1::bigint) AS ok`, // ttl, key, owner
    // Several keys in one step: the fences in key order, or NULL (nothing changed). See
    // postgresFunctions, take_many.
    acquireMany: {
      text: `SELECT ${f.take_many}($1::text[], $2::text[], $3::bigint, $4::text[]) AS fences`,
      params: (keys, owners, ttl, metadata) => [keys, owners, ttl, metadata],
    },
  };
}

// The PL/pgSQL functions behind the shared operations and the hand-over. Each locks the key's
// lock row before it reads anything else, creating an expired one (owner '', expires_at 0) when
// there is none, so every operation on a key — exclusive statements included, which write or
// lock that row — runs one at a time; in READ COMMITTED each statement of a function takes a
// fresh snapshot, so what it reads after the lock is current. Fences are drawn under that lock.
function postgresFunctions(n) {
  const t = n.table;
  const s = n.shared;
  const w = n.waiters;
  const f = n.functions;
  const seq = `nextval('${n.sequence}')`;
  const nowMs = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";
  const notify = notifier(n);
  const liveWaiters = `SELECT 1 FROM ${w} AS w WHERE w.key = p_key AND w.granted_at IS NULL AND w.deadline > now_ms`;
  // Lock the key's lock row into `cur`; with `create`, insert an expired one first if missing.
  const lockRow = (create = "true") =>
    "LOOP\n" +
    `  SELECT * INTO cur FROM ${t} AS l WHERE l.key = p_key FOR UPDATE;\n` +
    "  EXIT WHEN FOUND;\n" +
    `  EXIT WHEN NOT (${create});\n` +
    `  INSERT INTO ${t} AS l (key, owner, expires_at) VALUES (p_key, '', 0) ON CONFLICT (key) DO NOTHING;\n` +
    "  made := FOUND;\n" +
    "END LOOP;\n";
  // The shared holds' header takes a new expiry (or replaces an expired exclusive row).
  const raiseHeader = (expiry) =>
    `UPDATE ${t} AS l SET owner = '', expires_at = GREATEST(CASE WHEN l.owner = '' THEN l.expires_at ELSE 0 END, ${expiry}) WHERE l.key = p_key;\n`;
  // ms until the next live hold of the key expires, or null.
  const soonest =
    `SELECT * INTO cur FROM ${t} AS l WHERE l.key = p_key;\n` +
    "IF cur.owner <> '' AND cur.expires_at > now_ms THEN soonest := cur.expires_at;\n" +
    `ELSE SELECT min(s.expires_at) INTO soonest FROM ${s} AS s WHERE s.key = p_key AND s.expires_at > now_ms; END IF;\n`;
  const fn = (name, args, returns, declare, body) =>
    `CREATE OR REPLACE FUNCTION ${name}(${args}) RETURNS ${returns} LANGUAGE plpgsql AS $fn$\n` +
    `DECLARE\n${declare}BEGIN\n${body}END\n$fn$`;

  return [
    // Grants the front waiters of p_key in order while each fits beside the live holds and
    // those granted so far; stops at the first that does not. The caller holds the lock row.
    fn(
      f.hand_over,
      "p_key text, now_ms bigint",
      "json",
      `  cur ${t}%ROWTYPE;\n  wr record;\n  held bigint;\n  held_limit bigint;\n  next_fence bigint;\n  grants json[] := '{}';\n`,
      `SELECT * INTO cur FROM ${t} AS l WHERE l.key = p_key;\n` +
        "IF FOUND AND NOT (cur.owner <> '' AND cur.expires_at > now_ms) THEN\n" +
        `  SELECT COALESCE(sum(s.weight), 0), min(s.lim) INTO held, held_limit FROM ${s} AS s WHERE s.key = p_key AND s.expires_at > now_ms;\n` +
        `  FOR wr IN SELECT w.owner, w.ttl_ms, w.enqueued_at, w.weight, w.lim, w.metadata FROM ${w} AS w\n` +
        "      WHERE w.key = p_key AND w.granted_at IS NULL AND w.deadline > now_ms ORDER BY w.seq FOR UPDATE OF w LOOP\n" +
        "    IF wr.weight IS NULL THEN\n" +
        "      EXIT WHEN held > 0 OR cardinality(grants) > 0;\n" +
        `      DELETE FROM ${s} AS s WHERE s.key = p_key;\n` +
        `      next_fence := ${seq};\n` +
        `      UPDATE ${t} AS l SET owner = wr.owner, expires_at = now_ms + wr.ttl_ms, fence = next_fence, metadata = wr.metadata WHERE l.key = p_key;\n` +
        "    ELSE\n" +
        "      EXIT WHEN (held_limit IS NOT NULL AND wr.lim <> held_limit) OR held + wr.weight > wr.lim;\n" +
        `      next_fence := ${seq};\n` +
        `      INSERT INTO ${s} AS s (key, owner, expires_at, weight, lim, fence, metadata)\n` +
        "        VALUES (p_key, wr.owner, now_ms + wr.ttl_ms, wr.weight, wr.lim, next_fence, wr.metadata)\n" +
        "        ON CONFLICT (key, owner) DO UPDATE SET expires_at = EXCLUDED.expires_at, weight = EXCLUDED.weight,\n" +
        "        lim = EXCLUDED.lim, fence = EXCLUDED.fence, metadata = EXCLUDED.metadata;\n" +
        `      ${raiseHeader("now_ms + wr.ttl_ms")}` +
        "      held := held + wr.weight;\n" +
        "      held_limit := wr.lim;\n" +
        "    END IF;\n" +
        `    UPDATE ${w} AS w SET granted_at = now_ms, fence = next_fence WHERE w.key = p_key AND w.owner = wr.owner;\n` +
        `    PERFORM ${notify("json_build_array(p_key, wr.owner, next_fence, now_ms - wr.enqueued_at, wr.ttl_ms)::text")};\n` +
        "    grants := grants || json_build_array(wr.owner, next_fence, now_ms - wr.enqueued_at, wr.ttl_ms);\n" +
        "    EXIT WHEN wr.weight IS NULL;\n" +
        "  END LOOP;\n" +
        "END IF;\n" +
        `DELETE FROM ${w} AS w WHERE w.key = p_key AND ${staleAt("now_ms")};\n` +
        "RETURN array_to_json(grants);\n",
    ),
    // acquireShared (p_wait null) and acquireSharedOrWait; p_metadata is the hold's (or the
    // waiter's, for its grant). An earlier release's take_shared, without p_metadata, is another
    // function (an overload): createTable() leaves it to the processes still calling it.
    fn(
      f.take_shared,
      "p_key text, p_owner text, p_ttl bigint, p_weight bigint, p_limit bigint, p_wait bigint, p_metadata text",
      "json",
      `  cur ${t}%ROWTYPE;\n  made boolean := false;\n  now_ms bigint;\n  excl boolean;\n  held bigint;\n` +
        "  held_limit bigint;\n  mine boolean;\n  next_fence bigint;\n  joined boolean;\n  soonest bigint;\n",
      lockRow() +
        `now_ms := ${nowMs};\n` +
        // Waiters queued for a key that is free, or freed by an expiry, go first, as far as they fit.
        `IF EXISTS (${liveWaiters}) THEN\n` +
        `  PERFORM ${f.hand_over}(p_key, now_ms);\n` +
        `  SELECT * INTO cur FROM ${t} AS l WHERE l.key = p_key;\n` +
        "END IF;\n" +
        "excl := cur.owner <> '' AND cur.expires_at > now_ms;\n" +
        "SELECT COALESCE(sum(s.weight), 0), min(s.lim), COALESCE(bool_or(s.owner = p_owner), false) INTO held, held_limit, mine\n" +
        `  FROM ${s} AS s WHERE s.key = p_key AND s.expires_at > now_ms;\n` +
        "IF NOT excl AND held_limit IS NOT NULL AND held_limit <> p_limit THEN\n" +
        "  RETURN json_build_object('held_limit', held_limit);\n" +
        "END IF;\n" +
        `IF NOT excl AND NOT mine AND held + p_weight <= p_limit AND NOT EXISTS (${liveWaiters}) THEN\n` +
        `  DELETE FROM ${s} AS s WHERE s.key = p_key AND s.expires_at <= now_ms;\n` +
        `  next_fence := ${seq};\n` +
        `  INSERT INTO ${s} (key, owner, expires_at, weight, lim, fence, metadata) VALUES (p_key, p_owner, now_ms + p_ttl, p_weight, p_limit, next_fence, p_metadata);\n` +
        `  ${raiseHeader("now_ms + p_ttl")}` +
        "  RETURN json_build_object('fence', next_fence);\n" +
        "END IF;\n" +
        // Not queued: no wait asked, or the caller already holds the key (it would wait for itself).
        "IF p_wait IS NULL OR mine OR (excl AND cur.owner = p_owner) THEN\n" +
        `  IF made THEN DELETE FROM ${t} AS l WHERE l.key = p_key AND l.owner = '' AND l.expires_at <= now_ms; END IF;\n` +
        "  RETURN json_build_object('fence', NULL, 'queued', false);\n" +
        "END IF;\n" +
        `INSERT INTO ${w} (key, owner, ttl_ms, enqueued_at, deadline, weight, lim, metadata)\n` +
        "  VALUES (p_key, p_owner, p_ttl, now_ms, now_ms + p_wait, p_weight, p_limit, p_metadata) ON CONFLICT (key, owner) DO NOTHING;\n" +
        "joined := FOUND;\n" +
        `UPDATE ${t} AS l SET queued_until = GREATEST(l.queued_until, now_ms + p_wait) WHERE l.key = p_key;\n` +
        soonest +
        "RETURN json_build_object('fence', NULL, 'queued', joined, 'remaining', soonest - now_ms);\n",
    ),
    // release (p_owner) and forceRelease (p_owner null) of shared holds, then the hand-over.
    fn(
      f.release_shared,
      "p_key text, p_owner text",
      "json",
      `  cur ${t}%ROWTYPE;\n  now_ms bigint;\n  was_live boolean;\n  newest bigint;\n  grants json;\n`,
      `SELECT * INTO cur FROM ${t} AS l WHERE l.key = p_key FOR UPDATE;\n` +
        `now_ms := ${nowMs};\n` +
        `WITH gone AS (DELETE FROM ${s} AS s WHERE s.key = p_key AND (p_owner IS NULL OR s.owner = p_owner) RETURNING s.expires_at > now_ms AS live)\n` +
        "  SELECT COALESCE(bool_or(gone.live), false) INTO was_live FROM gone;\n" +
        // Afterwards the owner neither holds nor waits (what withdraw needs).
        `IF p_owner IS NOT NULL THEN DELETE FROM ${w} AS w WHERE w.key = p_key AND w.owner = p_owner; END IF;\n` +
        "IF cur.owner IS DISTINCT FROM '' THEN RETURN json_build_object('live', was_live); END IF;\n" +
        `SELECT max(s.expires_at) INTO newest FROM ${s} AS s WHERE s.key = p_key AND s.expires_at > now_ms;\n` +
        `UPDATE ${t} AS l SET expires_at = COALESCE(newest, 0) WHERE l.key = p_key;\n` +
        `grants := ${f.hand_over}(p_key, now_ms);\n` +
        // Nothing held and nobody to hand to: the row goes, as an exclusive release's does; a
        // waiter that joined unseen is told to look (see postgresStatements). Waiters left
        // waiting are told too: the next expiry they wait for may now be sooner.
        "IF json_array_length(grants) = 0 THEN\n" +
        `  IF newest IS NULL THEN DELETE FROM ${t} AS l WHERE l.key = p_key AND l.owner = '' AND l.expires_at <= now_ms AND l.watched_until <= now_ms; END IF;\n` +
        `  IF (newest IS NULL AND cur.queued_until > now_ms) OR EXISTS (${liveWaiters}) THEN\n` +
        `    PERFORM ${notify("json_build_array(p_key, NULL)::text")};\n` +
        "  END IF;\n" +
        "END IF;\n" +
        "RETURN json_build_object('live', was_live);\n",
    ),
    fn(
      f.extend_shared,
      "p_key text, p_owner text, p_ttl bigint",
      "boolean",
      `  cur ${t}%ROWTYPE;\n  now_ms bigint;\n`,
      `SELECT * INTO cur FROM ${t} AS l WHERE l.key = p_key FOR UPDATE;\n` +
        "IF cur.owner IS DISTINCT FROM '' THEN RETURN false; END IF;\n" +
        `now_ms := ${nowMs};\n` +
        `UPDATE ${s} AS s SET expires_at = now_ms + p_ttl WHERE s.key = p_key AND s.owner = p_owner AND s.expires_at > now_ms;\n` +
        "IF NOT FOUND THEN RETURN false; END IF;\n" +
        `UPDATE ${t} AS l SET expires_at = (SELECT max(s.expires_at) FROM ${s} AS s WHERE s.key = p_key AND s.expires_at > now_ms) WHERE l.key = p_key;\n` +
        "RETURN true;\n",
    ),
    // acquireMany: every key of the set to its owner, or nothing. The keys' lock rows are locked
    // one by one in one order for every caller (the keys' byte order, whatever order they came
    // in), so sets that overlap never wait on each other in a cycle; a missing row is inserted
    // expired first, as lockRow does. With every row locked nobody can take, queue for or hand
    // over any of the keys, and the checks that follow, each a statement of its own, see
    // everything committed before: a live row (a lock or a header of shared holds) or a live
    // waiter on any key refuses the set — the rows made for it go and NULL is answered. Else
    // each row is written as acquire writes it, its fence drawn under its lock, in the caller's
    // order; p_metadata[i] (NULL: none) is key i's. The earlier three-argument take_many is an
    // overload, left as take_shared's is.
    fn(
      f.take_many,
      "p_keys text[], p_owners text[], p_ttl bigint, p_metadata text[]",
      "bigint[]",
      `  cur ${t}%ROWTYPE;\n  one_key text;\n  made text[] := '{}';\n  now_ms bigint;\n  fences bigint[] := '{}';\n  next_fence bigint;\n`,
      'FOR one_key IN SELECT u.k FROM unnest(p_keys) AS u(k) ORDER BY u.k COLLATE "C" LOOP\n' +
        "  LOOP\n" +
        `    SELECT * INTO cur FROM ${t} AS l WHERE l.key = one_key FOR UPDATE;\n` +
        "    EXIT WHEN FOUND;\n" +
        `    INSERT INTO ${t} AS l (key, owner, expires_at) VALUES (one_key, '', 0) ON CONFLICT (key) DO NOTHING;\n` +
        "    IF FOUND THEN made := made || one_key; END IF;\n" +
        "  END LOOP;\n" +
        "END LOOP;\n" +
        `now_ms := ${nowMs};\n` +
        `IF EXISTS (SELECT 1 FROM ${t} AS l WHERE l.key = ANY (p_keys) AND l.expires_at > now_ms)\n` +
        `    OR EXISTS (SELECT 1 FROM ${w} AS w WHERE w.key = ANY (p_keys) AND w.granted_at IS NULL AND w.deadline > now_ms) THEN\n` +
        `  DELETE FROM ${t} AS l WHERE l.key = ANY (made) AND l.owner = '' AND l.expires_at <= now_ms;\n` +
        "  RETURN NULL;\n" +
        "END IF;\n" +
        "FOR i IN 1 .. cardinality(p_keys) LOOP\n" +
        `  next_fence := ${seq};\n` +
        `  UPDATE ${t} AS l SET owner = p_owners[i], expires_at = now_ms + p_ttl, fence = next_fence, metadata = p_metadata[i] WHERE l.key = p_keys[i];\n` +
        "  fences := fences || next_fence;\n" +
        "END LOOP;\n" +
        "RETURN fences;\n",
    ),
    // A waiting store's look (statements.tick).
    fn(
      f.tick,
      "p_key text, p_owner text",
      "json",
      `  cur ${t}%ROWTYPE;\n  made boolean := false;\n  now_ms bigint;\n  grants json;\n  soonest bigint;\n`,
      lockRow(`EXISTS (SELECT 1 FROM ${w} AS w WHERE w.key = p_key AND w.granted_at IS NULL)`) +
        `now_ms := ${nowMs};\n` +
        `grants := ${f.hand_over}(p_key, now_ms);\n` +
        `IF made AND json_array_length(grants) = 0 THEN DELETE FROM ${t} AS l WHERE l.key = p_key AND l.owner = '' AND l.expires_at <= now_ms; END IF;\n` +
        soonest +
        "RETURN json_build_object('grants', grants, 'remaining', soonest - now_ms, 'me',\n" +
        "  (SELECT json_build_object('fence', w.fence, 'waited_ms', w.granted_at - w.enqueued_at, 'granted', w.granted_at IS NOT NULL,\n" +
        `    'grant_live', w.granted_at + w.ttl_ms > now_ms) FROM ${w} AS w WHERE w.key = p_key AND w.owner = p_owner));\n`,
    ),
    // Writes the fence a statement drew for the row it inserted (postgresStatements, fenceOf)
    // and answers it. Volatile, so its UPDATE sees the row the calling statement inserted.
    `CREATE OR REPLACE FUNCTION ${f.keep_fence}(p_key text, p_owner text, p_fence bigint) RETURNS bigint LANGUAGE sql VOLATILE AS $fn$\n` +
      `UPDATE ${t} AS l SET fence = p_fence WHERE l.key = p_key AND l.owner = p_owner RETURNING l.fence\n$fn$`,
    // A store watches p_keys (or renews its watch) as p_watcher for p_lease ms: its row in the
    // watchers table, and the lock row's watched_until raised to its lease — the row made,
    // expired and ownerless, if the key has none. Each lock row is locked first, in one order
    // for every caller (as take_many), so a statement changing the key's holder either committed
    // before or writes a row that carries the new watched_until (see watchTriggers). Answers the
    // keys whose earlier lease of this watcher had lapsed, or whose lock row had lost it: changes
    // there may have gone unreported.
    fn(
      f.watch,
      "p_keys text[], p_watcher text, p_lease bigint",
      "text[]",
      `  cur ${t}%ROWTYPE;\n  one_key text;\n  now_ms bigint;\n  mine bigint;\n  lapsed text[] := '{}';\n`,
      'FOR one_key IN SELECT u.k FROM unnest(p_keys) AS u(k) ORDER BY u.k COLLATE "C" LOOP\n' +
        "  LOOP\n" +
        `    SELECT * INTO cur FROM ${t} AS l WHERE l.key = one_key FOR UPDATE;\n` +
        "    EXIT WHEN FOUND;\n" +
        `    INSERT INTO ${t} AS l (key, owner, expires_at) VALUES (one_key, '', 0) ON CONFLICT (key) DO NOTHING;\n` +
        "  END LOOP;\n" +
        `  now_ms := ${nowMs};\n` +
        `  SELECT x.expires_at INTO mine FROM ${n.watchers} AS x WHERE x.key = one_key AND x.watcher = p_watcher;\n` +
        "  IF mine IS NULL OR mine <= now_ms OR cur.watched_until < mine THEN lapsed := lapsed || one_key; END IF;\n" +
        `  INSERT INTO ${n.watchers} AS x (key, watcher, expires_at) VALUES (one_key, p_watcher, now_ms + p_lease)\n` +
        "    ON CONFLICT (key, watcher) DO UPDATE SET expires_at = EXCLUDED.expires_at;\n" +
        `  DELETE FROM ${n.watchers} AS x WHERE x.key = one_key AND x.expires_at <= now_ms;\n` +
        `  UPDATE ${t} AS l SET watched_until = GREATEST(l.watched_until, now_ms + p_lease) WHERE l.key = one_key;\n` +
        "END LOOP;\n" +
        "RETURN lapsed;\n",
    ),
    // p_watcher stops watching p_key: its row goes (with lapsed ones), and the lock row's
    // watched_until falls to the latest lease left, 0 when none — then an expired ownerless row
    // kept for the watch goes too. The lock row is locked first (made if missing, so that a
    // concurrent watch waits), so no lease is taken while the rest is computed.
    fn(
      f.unwatch,
      "p_key text, p_watcher text",
      "boolean",
      `  cur ${t}%ROWTYPE;\n  made boolean := false;\n  now_ms bigint;\n  latest bigint;\n`,
      lockRow() +
        `now_ms := ${nowMs};\n` +
        `DELETE FROM ${n.watchers} AS x WHERE x.key = p_key AND (x.watcher = p_watcher OR x.expires_at <= now_ms);\n` +
        `SELECT max(x.expires_at) INTO latest FROM ${n.watchers} AS x WHERE x.key = p_key;\n` +
        `UPDATE ${t} AS l SET watched_until = COALESCE(latest, 0) WHERE l.key = p_key;\n` +
        `DELETE FROM ${t} AS l WHERE l.key = p_key AND l.owner = '' AND l.expires_at <= now_ms AND l.watched_until <= now_ms;\n` +
        "RETURN true;\n",
    ),
    // The trigger function of watchTriggers: reports a change of a watched key's exclusive
    // holder, as judged at the start of the statement that made it (statement_timestamp(): a hold
    // the statement found live is live here too). One NOTIFY on the watch channel, JSON [key,
    // the fence of the live hold that ended or null, the fence granted or null, the grant's
    // metadata, its ms left]: a hand-over (the holder's row given to a waiter) is one report, end
    // first. A live hold without a fence (from before the fence column) that ended sends [key]
    // unless a grant follows it, and a payload over Postgres's limit (8000 bytes: a long key and
    // metadata full of escapes) [key] too, or [""] for a key too long even for that: that key's,
    // or every key's, watchers look again. A deleted row of a watched key comes back expired and
    // ownerless, so that the key's next statements still read that it is watched.
    fn(
      f.watch_report,
      "",
      "trigger",
      "  now_ms bigint := (extract(epoch FROM statement_timestamp()) * 1000)::bigint;\n  ended bigint;\n  granted bigint;\n" +
        "  payload text;\n",
      "IF OLD.watched_until <= now_ms THEN RETURN NULL; END IF;\n" +
        "IF TG_OP = 'UPDATE' AND NEW.owner = OLD.owner AND NEW.fence IS NOT DISTINCT FROM OLD.fence THEN RETURN NULL; END IF;\n" +
        "IF OLD.owner <> '' AND OLD.expires_at > now_ms THEN ended := COALESCE(OLD.fence, 0); END IF;\n" +
        "IF TG_OP = 'UPDATE' THEN\n" +
        "  IF NEW.owner <> '' AND NEW.expires_at > now_ms AND NEW.fence IS NOT NULL THEN granted := NEW.fence; END IF;\n" +
        "  IF ended = 0 AND granted IS NOT NULL THEN ended := NULL; END IF;\n" +
        "  IF granted IS NOT NULL THEN\n" +
        `    payload := json_build_array(OLD.key, ended, granted, NEW.metadata, NEW.expires_at - ${nowMs})::text;\n` +
        "  END IF;\n" +
        "ELSE\n" +
        `  INSERT INTO ${t} AS l (key, owner, expires_at, queued_until, watched_until)\n` +
        "    VALUES (OLD.key, '', 0, OLD.queued_until, OLD.watched_until) ON CONFLICT (key) DO NOTHING;\n" +
        "END IF;\n" +
        "IF ended IS NULL AND granted IS NULL THEN RETURN NULL; END IF;\n" +
        "IF payload IS NULL AND ended > 0 THEN payload := json_build_array(OLD.key, ended, NULL, NULL, NULL)::text; END IF;\n" +
        "IF payload IS NULL OR octet_length(payload) > 7900 THEN payload := json_build_array(OLD.key)::text; END IF;\n" +
        "IF octet_length(payload) > 7900 THEN payload := '[\"\"]'; END IF;\n" +
        `PERFORM pg_notify('${n.watchChannel}', payload);\n` +
        "RETURN NULL;\n",
    ),
  ];
}

// The triggers that report holder changes of watched keys (postgresFunctions, watch_report).
// The statements that acquire and release are the same as without watch (a statement that read
// watched_until itself measured slower to plan), and the triggers' WHEN clauses let every row of
// a key nobody watches (watched_until 0) through without a call, so an unwatched key costs the
// clause alone. The UPDATE trigger fires for statements that set the owner — every grant and
// hand-over does; an extend, the fence written into a new row and a watch's lease do not.
// Created only if missing, so createTable() stays idempotent.
function watchTriggers(n) {
  const create = (name, event, when) =>
    "DO $do$ BEGIN\n" +
    `  IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = '${n.table}'::regclass AND tgname = '${name}') THEN\n` +
    `    CREATE TRIGGER ${quote(name)} AFTER ${event} ON ${n.table} FOR EACH ROW WHEN (${when}) EXECUTE PROCEDURE ${n.functions.watch_report}();\n` +
    "  END IF;\n" +
    "END $do$";
  return [
    create(n.watchTriggers.update, "UPDATE OF owner", "NEW.watched_until > 0"),
    create(n.watchTriggers.delete, "DELETE", "OLD.watched_until > 0"),
  ];
}

// Waiter rows nobody needs any more, as of `now`: waiters whose deadline passed, grants older
// than their TTL.
const staleAt = (now) =>
  `((w.granted_at IS NULL AND w.deadline <= ${now}) OR (w.granted_at IS NOT NULL AND w.granted_at + w.ttl_ms <= ${now}))`;

// A NOTIFY on the table's channel. The payload is JSON: [key, owner, fence, waitedMs, ttlMs]
// for a grant, [key, null] for "the key was freed, look again". A payload over Postgres's
// 8000-byte limit (a very long key or owner) becomes ["", null]: every waiter looks again.
const notifier = (n) => (json) =>
  `pg_notify('${n.channel}', CASE WHEN octet_length(${json}) <= 7900 THEN ${json} ELSE '["",null]' END)`;
