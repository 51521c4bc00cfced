// keel-lock/sql on PostgreSQL: the lock table, the waiters, shared holds and watchers beside it,
// the fence sequence, and every statement the store runs. The functions and triggers those
// statements call are in postgres-functions.js; the names come from names.js (objectNames).
// How each operation maps onto a statement: stores/README.md, "keel-lock/sql".

import { MAX_FENCE_SQL, quote } from "./names.js";
import { liveWaiter, nextFence, notifier, PG_NOW_MS, staleAt } from "./postgres-fragments.js";
import { postgresFunctions, watchTriggers } from "./postgres-functions.js";

// The DDL, in order, for the lock table named `n` (objectNames).
//
// The lock table: the holder's fence (NULL: a header of shared holds, or a hold from before the
// column) and metadata, given at acquisition; queued_until, the latest deadline of the waiters
// that joined (see postgresStatements); watched_until, until when some store watches the key (0:
// nobody).
//
// The waiters: callers of acquireOrWait queued for a key, oldest first by seq. A row lives from
// the enqueue until its owner leaves (timeout, withdraw, release); fence and granted_at are set
// when the store hands the key over. weight and lim are a shared waiter's permits and limit
// (NULL: exclusive); metadata is what the grant's hold will carry.
//
// Shared holds, one row per holder. While any is live the key's lock row is their header: owner
// '' (no caller's owner can be empty), expires_at the latest of their expiries — so an exclusive
// acquire, isLocked and remainingTime read the lock row alone.
//
// The watchers: one row per (key, watching store), its lease, renewed while it watches. The lock
// row's watched_until is the latest lease of its key's rows (postgres-functions.js, watch).
export function postgresSchema(n) {
  return [
    `CREATE TABLE IF NOT EXISTS ${n.table} (
  key          TEXT   PRIMARY KEY,
  owner        TEXT   NOT NULL,
  expires_at   BIGINT NOT NULL,
  queued_until BIGINT NOT NULL DEFAULT 0,
  fence        BIGINT,
  metadata     TEXT,
  watched_until BIGINT NOT NULL DEFAULT 0
)`,
    // An index name is never schema-qualified in Postgres: it lives in its table's schema.
    `CREATE INDEX IF NOT EXISTS ${quote(n.index)} ON ${n.table} (expires_at)`,
    // CACHE 1: with a per-session cache, two sessions would hand out values out of order.
    `CREATE SEQUENCE IF NOT EXISTS ${n.sequence} AS BIGINT MINVALUE 1 MAXVALUE ${MAX_FENCE_SQL} START 1 CACHE 1 NO CYCLE`,
    `CREATE TABLE IF NOT EXISTS ${n.waiters} (
  key         TEXT   NOT NULL,
  owner       TEXT   NOT NULL,
  seq         BIGINT GENERATED ALWAYS AS IDENTITY,
  ttl_ms      BIGINT NOT NULL,
  enqueued_at BIGINT NOT NULL,
  deadline    BIGINT NOT NULL,
  granted_at  BIGINT,
  fence       BIGINT,
  weight      BIGINT,
  lim         BIGINT,
  metadata    TEXT,
  PRIMARY KEY (key, owner)
)`,
    `CREATE INDEX IF NOT EXISTS ${n.waitersIndex} ON ${n.waiters} (key, seq)`,
    `CREATE TABLE IF NOT EXISTS ${n.shared} (
  key        TEXT   NOT NULL,
  owner      TEXT   NOT NULL,
  expires_at BIGINT NOT NULL,
  weight     BIGINT NOT NULL,
  lim        BIGINT NOT NULL,
  fence      BIGINT NOT NULL,
  metadata   TEXT,
  PRIMARY KEY (key, owner)
)`,
    `CREATE INDEX IF NOT EXISTS ${quote(n.sharedIndex)} ON ${n.shared} (expires_at)`,
    `CREATE TABLE IF NOT EXISTS ${n.watchers} (
  key        TEXT   NOT NULL,
  watcher    TEXT   NOT NULL,
  expires_at BIGINT NOT NULL,
  PRIMARY KEY (key, watcher)
)`,
    ...postgresFunctions(n),
    ...watchTriggers(n),
  ];
}

// Run after the CREATE TABLE and before the rest of postgresSchema(): the lock table's columns
// that came after its first layout (queued_until, fence, metadata, watched_until), before the
// functions and triggers that name them are created. ADD COLUMN IF NOT EXISTS: a no-op on a
// table that has them. The fence sequence needs no upgrade: CREATE SEQUENCE IF NOT EXISTS.
export function postgresUpgrades(n) {
  return [
    `ALTER TABLE ${n.table} ADD COLUMN IF NOT EXISTS queued_until BIGINT NOT NULL DEFAULT 0, ` +
      "ADD COLUMN IF NOT EXISTS fence BIGINT, ADD COLUMN IF NOT EXISTS metadata TEXT, " +
      "ADD COLUMN IF NOT EXISTS watched_until BIGINT NOT NULL DEFAULT 0",
  ];
}

// Run after all of postgresSchema(): the waiters' shared columns and the metadata columns, for
// tables made before them (no-ops on tables that have them).
export function postgresLateUpgrades(n) {
  return [
    `ALTER TABLE ${n.waiters} ADD COLUMN IF NOT EXISTS weight BIGINT, ADD COLUMN IF NOT EXISTS lim BIGINT, ADD COLUMN IF NOT EXISTS metadata TEXT`,
    `ALTER TABLE ${n.shared} ADD COLUMN IF NOT EXISTS metadata TEXT`,
  ];
}

// The statements. One that reads the clock reads it once, in the CTE c (PG_NOW_MS), and uses that
// one value throughout; the others call a function of postgres-functions.js. Parameters are
// $1… in each statement's own order.
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
export function postgresStatements(n) {
  const t = n.table;
  const w = n.waiters;
  const seq = nextFence(n);
  const clockCte = `c AS (SELECT ${PG_NOW_MS} AS now)`;
  const clock = `WITH ${clockCte} `;
  const nowSql = "(SELECT now FROM c)";
  const f = n.functions;
  const live = liveWaiter("c.now");
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
    // end of one ($1 key, $2 watcher id). See postgres-functions.js, watch and unwatch.
    watchChannel: n.watchChannel,
    watch: `SELECT ${f.watch}($1::text[], $2::text, $3::bigint) AS lapsed`,
    unwatch: `SELECT ${f.unwatch}($1::text, $2::text) AS done`,

    // Shared holds, each one call of a function (postgres-functions.js) that locks the key's lock
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
    // postgres-functions.js, take_many.
    acquireMany: {
      text: `SELECT ${f.take_many}($1::text[], $2::text[], $3::bigint, $4::text[]) AS fences`,
      params: (keys, owners, ttl, metadata) => [keys, owners, ttl, metadata],
    },
  };
}
