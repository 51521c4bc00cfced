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
export function upgradeStatements(dialect, table) {
  const n = objectNames(table);
  if (dialect === "postgres") {
    return [`ALTER TABLE ${n.table} ADD COLUMN IF NOT EXISTS queued_until BIGINT NOT NULL DEFAULT 0`];
  }
  return [`ALTER TABLE ${n.table} ADD COLUMN fence INTEGER CHECK (fence BETWEEN 1 AND ${MAX_FENCE_SQL})`];
}

// The statements, per dialect. Parameters are listed in the order each statement binds them.
export function statements(dialect, table) {
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
