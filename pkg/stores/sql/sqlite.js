// keel-lock/sql on SQLite (D1, better-sqlite3): the lock table, the shared holds beside it, the
// fence counter and the triggers that keep both in step, and every statement the store runs.
// Each operation is one statement, atomic under SQLite's write lock. The names come from
// names.js (objectNames); how each operation maps onto a statement: stores/README.md,
// "keel-lock/sql".

import { MAX_FENCE_SQL, quote } from "./names.js";

// Milliseconds since the epoch by SQLite's clock. julianday('now') has ms resolution and is
// fixed for the duration of one statement (its triggers included); this works on every SQLite
// version that has upsert (unixepoch('subsec') would need 3.42+).
const SQLITE_NOW = "CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)";

// The DDL, in order, for the lock table named `n` (objectNames). The index and triggers take the
// schema qualifier, the table in ON must not.
export function sqliteSchema(n) {
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
    `CREATE TABLE IF NOT EXISTS ${n.table} (
  key        TEXT    PRIMARY KEY NOT NULL,
  owner      TEXT    NOT NULL,
  expires_at INTEGER NOT NULL,
  fence      INTEGER CHECK (fence BETWEEN 1 AND ${MAX_FENCE_SQL}),
  metadata   TEXT
)`,
    `CREATE INDEX IF NOT EXISTS ${n.indexInSchema} ON ${quote(n.last)} (expires_at)`,
    `CREATE TABLE IF NOT EXISTS ${n.shared} (
  key        TEXT    NOT NULL,
  owner      TEXT    NOT NULL,
  expires_at INTEGER NOT NULL,
  weight     INTEGER NOT NULL,
  lim        INTEGER NOT NULL,
  fence      INTEGER CHECK (fence BETWEEN 1 AND ${MAX_FENCE_SQL}),
  metadata   TEXT,
  PRIMARY KEY (key, owner)
) WITHOUT ROWID`,
    `CREATE INDEX IF NOT EXISTS ${n.sharedIndexInSchema} ON ${on} (expires_at)`,
    `CREATE TABLE IF NOT EXISTS ${n.counter} (
  id    INTEGER PRIMARY KEY CHECK (id = 1),
  value INTEGER NOT NULL CHECK (value BETWEEN 0 AND ${MAX_FENCE_SQL})
)`,
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

// Run after the CREATE TABLE and before the rest of sqliteSchema(): the fence and metadata
// columns, for a lock table laid out before them. SQLite has no ADD COLUMN IF NOT EXISTS: each
// statement fails with "duplicate column name" on a table that has the column, and
// createTable() ignores exactly that error.
export function sqliteUpgrades(n) {
  return [
    `ALTER TABLE ${n.table} ADD COLUMN fence INTEGER CHECK (fence BETWEEN 1 AND ${MAX_FENCE_SQL})`,
    `ALTER TABLE ${n.table} ADD COLUMN metadata TEXT`,
  ];
}

// Run after all of sqliteSchema(): the shared holds' metadata column, for a table made before it
// ("duplicate column name" otherwise, ignored as above).
export function sqliteLateUpgrades(n) {
  return [`ALTER TABLE ${n.shared} ADD COLUMN metadata TEXT`];
}

// The statements. Parameters are listed in the order each statement binds them.
export function sqliteStatements(n) {
  const t = n.table;
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
