// keel-lock/sql on PostgreSQL: the PL/pgSQL functions behind the shared operations, the
// hand-over, acquireMany and watch, and the triggers that report holder changes of watched keys.
// Each is one CREATE statement of postgresSchema() (postgres.js), written below as the SQL it
// sends, with the table's names (names.js, objectNames) and the shared fragments
// (postgres-fragments.js) put in.
//
// Each function locks the key's lock row before it reads anything else, creating an expired one
// (owner '', expires_at 0) when there is none, so every operation on a key — exclusive statements
// included, which write or lock that row — runs one at a time; in READ COMMITTED each statement
// of a function takes a fresh snapshot, so what it reads after the lock is current. Fences are
// drawn under that lock.

import { quote } from "./names.js";
import { epochMs, liveWaiter, nextFence, notifier, PG_NOW_MS, staleAt } from "./postgres-fragments.js";

export function postgresFunctions(n) {
  const t = n.table;
  const s = n.shared;
  const w = n.waiters;
  const f = n.functions;
  const seq = nextFence(n);
  const nowMs = PG_NOW_MS;
  const notify = notifier(n);
  const liveWaiters = `SELECT 1 FROM ${w} AS w WHERE w.key = p_key AND ${liveWaiter("now_ms")}`;
  // Lock the key's lock row into `cur`; with `create`, insert an expired one first if missing.
  const lockRow = (create = "true") => `LOOP
  SELECT * INTO cur FROM ${t} AS l WHERE l.key = p_key FOR UPDATE;
  EXIT WHEN FOUND;
  EXIT WHEN NOT (${create});
  INSERT INTO ${t} AS l (key, owner, expires_at) VALUES (p_key, '', 0) ON CONFLICT (key) DO NOTHING;
  made := FOUND;
END LOOP;`;
  // The shared holds' header takes a new expiry (or replaces an expired exclusive row).
  const raiseHeader = (expiry) =>
    `UPDATE ${t} AS l SET owner = '', expires_at = GREATEST(CASE WHEN l.owner = '' THEN l.expires_at ELSE 0 END, ${expiry}) WHERE l.key = p_key;`;
  // ms until the next live hold of the key expires, or null.
  const soonest = `SELECT * INTO cur FROM ${t} AS l WHERE l.key = p_key;
IF cur.owner <> '' AND cur.expires_at > now_ms THEN soonest := cur.expires_at;
ELSE SELECT min(s.expires_at) INTO soonest FROM ${s} AS s WHERE s.key = p_key AND s.expires_at > now_ms; END IF;`;

  return [
    // hand_over: grants the front waiters of p_key in order while each fits beside the live
    // holds and those granted so far; stops at the first that does not. The caller holds the
    // lock row.
    `CREATE OR REPLACE FUNCTION ${f.hand_over}(p_key text, now_ms bigint) RETURNS json LANGUAGE plpgsql AS $fn$
DECLARE
  cur ${t}%ROWTYPE;
  wr record;
  held bigint;
  held_limit bigint;
  next_fence bigint;
  grants json[] := '{}';
BEGIN
SELECT * INTO cur FROM ${t} AS l WHERE l.key = p_key;
IF FOUND AND NOT (cur.owner <> '' AND cur.expires_at > now_ms) THEN
  SELECT COALESCE(sum(s.weight), 0), min(s.lim) INTO held, held_limit FROM ${s} AS s WHERE s.key = p_key AND s.expires_at > now_ms;
  FOR wr IN SELECT w.owner, w.ttl_ms, w.enqueued_at, w.weight, w.lim, w.metadata FROM ${w} AS w
      WHERE w.key = p_key AND ${liveWaiter("now_ms")} ORDER BY w.seq FOR UPDATE OF w LOOP
    IF wr.weight IS NULL THEN
      EXIT WHEN held > 0 OR cardinality(grants) > 0;
      DELETE FROM ${s} AS s WHERE s.key = p_key;
      next_fence := ${seq};
      UPDATE ${t} AS l SET owner = wr.owner, expires_at = now_ms + wr.ttl_ms, fence = next_fence, metadata = wr.metadata WHERE l.key = p_key;
    ELSE
      EXIT WHEN (held_limit IS NOT NULL AND wr.lim <> held_limit) OR held + wr.weight > wr.lim;
      next_fence := ${seq};
      INSERT INTO ${s} AS s (key, owner, expires_at, weight, lim, fence, metadata)
        VALUES (p_key, wr.owner, now_ms + wr.ttl_ms, wr.weight, wr.lim, next_fence, wr.metadata)
        ON CONFLICT (key, owner) DO UPDATE SET expires_at = EXCLUDED.expires_at, weight = EXCLUDED.weight,
        lim = EXCLUDED.lim, fence = EXCLUDED.fence, metadata = EXCLUDED.metadata;
      ${raiseHeader("now_ms + wr.ttl_ms")}
      held := held + wr.weight;
      held_limit := wr.lim;
    END IF;
    UPDATE ${w} AS w SET granted_at = now_ms, fence = next_fence WHERE w.key = p_key AND w.owner = wr.owner;
    PERFORM ${notify("json_build_array(p_key, wr.owner, next_fence, now_ms - wr.enqueued_at, wr.ttl_ms)::text")};
    grants := grants || json_build_array(wr.owner, next_fence, now_ms - wr.enqueued_at, wr.ttl_ms);
    EXIT WHEN wr.weight IS NULL;
  END LOOP;
END IF;
DELETE FROM ${w} AS w WHERE w.key = p_key AND ${staleAt("now_ms")};
RETURN array_to_json(grants);
END
$fn$`,
    // take_shared: acquireShared (p_wait null) and acquireSharedOrWait; p_metadata is the hold's
    // (or the waiter's, for its grant). An earlier release's take_shared, without p_metadata, is
    // another function (an overload): createTable() leaves it to the processes still calling it.
    // Waiters queued for a key that is free, or freed by an expiry, go first, as far as they fit.
    // The caller is not queued when it asked no wait, or already holds the key (it would wait
    // for itself).
    `CREATE OR REPLACE FUNCTION ${f.take_shared}(p_key text, p_owner text, p_ttl bigint, p_weight bigint, p_limit bigint, p_wait bigint, p_metadata text) RETURNS json LANGUAGE plpgsql AS $fn$
DECLARE
  cur ${t}%ROWTYPE;
  made boolean := false;
  now_ms bigint;
  excl boolean;
  held bigint;
  held_limit bigint;
  mine boolean;
  next_fence bigint;
  joined boolean;
  soonest bigint;
BEGIN
${lockRow()}
now_ms := ${nowMs};
IF EXISTS (${liveWaiters}) THEN
  PERFORM ${f.hand_over}(p_key, now_ms);
  SELECT * INTO cur FROM ${t} AS l WHERE l.key = p_key;
END IF;
excl := cur.owner <> '' AND cur.expires_at > now_ms;
SELECT COALESCE(sum(s.weight), 0), min(s.lim), COALESCE(bool_or(s.owner = p_owner), false) INTO held, held_limit, mine
  FROM ${s} AS s WHERE s.key = p_key AND s.expires_at > now_ms;
IF NOT excl AND held_limit IS NOT NULL AND held_limit <> p_limit THEN
  RETURN json_build_object('held_limit', held_limit);
END IF;
IF NOT excl AND NOT mine AND held + p_weight <= p_limit AND NOT EXISTS (${liveWaiters}) THEN
  DELETE FROM ${s} AS s WHERE s.key = p_key AND s.expires_at <= now_ms;
  next_fence := ${seq};
  INSERT INTO ${s} (key, owner, expires_at, weight, lim, fence, metadata) VALUES (p_key, p_owner, now_ms + p_ttl, p_weight, p_limit, next_fence, p_metadata);
  ${raiseHeader("now_ms + p_ttl")}
  RETURN json_build_object('fence', next_fence);
END IF;
IF p_wait IS NULL OR mine OR (excl AND cur.owner = p_owner) THEN
  IF made THEN DELETE FROM ${t} AS l WHERE l.key = p_key AND l.owner = '' AND l.expires_at <= now_ms; END IF;
  RETURN json_build_object('fence', NULL, 'queued', false);
END IF;
INSERT INTO ${w} (key, owner, ttl_ms, enqueued_at, deadline, weight, lim, metadata)
  VALUES (p_key, p_owner, p_ttl, now_ms, now_ms + p_wait, p_weight, p_limit, p_metadata) ON CONFLICT (key, owner) DO NOTHING;
joined := FOUND;
UPDATE ${t} AS l SET queued_until = GREATEST(l.queued_until, now_ms + p_wait) WHERE l.key = p_key;
${soonest}
RETURN json_build_object('fence', NULL, 'queued', joined, 'remaining', soonest - now_ms);
END
$fn$`,
    // release_shared: release (p_owner) and forceRelease (p_owner null) of shared holds, then
    // the hand-over. Afterwards the owner neither holds nor waits (what withdraw needs). With
    // nothing held and nobody to hand to, the row goes, as an exclusive release's does; a waiter
    // that joined unseen is told to look (postgres.js, postgresStatements). Waiters left waiting are told
    // too: the next expiry they wait for may now be sooner.
    `CREATE OR REPLACE FUNCTION ${f.release_shared}(p_key text, p_owner text) RETURNS json LANGUAGE plpgsql AS $fn$
DECLARE
  cur ${t}%ROWTYPE;
  now_ms bigint;
  was_live boolean;
  newest bigint;
  grants json;
BEGIN
SELECT * INTO cur FROM ${t} AS l WHERE l.key = p_key FOR UPDATE;
now_ms := ${nowMs};
WITH gone AS (DELETE FROM ${s} AS s WHERE s.key = p_key AND (p_owner IS NULL OR s.owner = p_owner) RETURNING s.expires_at > now_ms AS live)
  SELECT COALESCE(bool_or(gone.live), false) INTO was_live FROM gone;
IF p_owner IS NOT NULL THEN DELETE FROM ${w} AS w WHERE w.key = p_key AND w.owner = p_owner; END IF;
IF cur.owner IS DISTINCT FROM '' THEN RETURN json_build_object('live', was_live); END IF;
SELECT max(s.expires_at) INTO newest FROM ${s} AS s WHERE s.key = p_key AND s.expires_at > now_ms;
UPDATE ${t} AS l SET expires_at = COALESCE(newest, 0) WHERE l.key = p_key;
grants := ${f.hand_over}(p_key, now_ms);
IF json_array_length(grants) = 0 THEN
  IF newest IS NULL THEN DELETE FROM ${t} AS l WHERE l.key = p_key AND l.owner = '' AND l.expires_at <= now_ms AND l.watched_until <= now_ms; END IF;
  IF (newest IS NULL AND cur.queued_until > now_ms) OR EXISTS (${liveWaiters}) THEN
    PERFORM ${notify("json_build_array(p_key, NULL)::text")};
  END IF;
END IF;
RETURN json_build_object('live', was_live);
END
$fn$`,
    // extend_shared: a live shared hold of p_owner gets p_ttl from now, and the header the
    // latest expiry.
    `CREATE OR REPLACE FUNCTION ${f.extend_shared}(p_key text, p_owner text, p_ttl bigint) RETURNS boolean LANGUAGE plpgsql AS $fn$
DECLARE
  cur ${t}%ROWTYPE;
  now_ms bigint;
BEGIN
SELECT * INTO cur FROM ${t} AS l WHERE l.key = p_key FOR UPDATE;
IF cur.owner IS DISTINCT FROM '' THEN RETURN false; END IF;
now_ms := ${nowMs};
UPDATE ${s} AS s SET expires_at = now_ms + p_ttl WHERE s.key = p_key AND s.owner = p_owner AND s.expires_at > now_ms;
IF NOT FOUND THEN RETURN false; END IF;
UPDATE ${t} AS l SET expires_at = (SELECT max(s.expires_at) FROM ${s} AS s WHERE s.key = p_key AND s.expires_at > now_ms) WHERE l.key = p_key;
RETURN true;
END
$fn$`,
    // take_many, acquireMany: every key of the set to its owner, or nothing. The keys' lock rows
    // are locked one by one in one order for every caller (the keys' byte order, whatever order
    // they came in), so sets that overlap never wait on each other in a cycle; a missing row is
    // inserted expired first, as lockRow does. With every row locked nobody can take, queue for
    // or hand over any of the keys, and the checks that follow, each a statement of its own, see
    // everything committed before: a live row (a lock or a header of shared holds) or a live
    // waiter on any key refuses the set — the rows made for it go and NULL is answered. Else
    // each row is written as acquire writes it, its fence drawn under its lock, in the caller's
    // order; p_metadata[i] (NULL: none) is key i's. The earlier three-argument take_many is an
    // overload, left as take_shared's is.
    `CREATE OR REPLACE FUNCTION ${f.take_many}(p_keys text[], p_owners text[], p_ttl bigint, p_metadata text[]) RETURNS bigint[] LANGUAGE plpgsql AS $fn$
DECLARE
  cur ${t}%ROWTYPE;
  one_key text;
  made text[] := '{}';
  now_ms bigint;
  fences bigint[] := '{}';
  next_fence bigint;
BEGIN
FOR one_key IN SELECT u.k FROM unnest(p_keys) AS u(k) ORDER BY u.k COLLATE "C" LOOP
  LOOP
    SELECT * INTO cur FROM ${t} AS l WHERE l.key = one_key FOR UPDATE;
    EXIT WHEN FOUND;
    INSERT INTO ${t} AS l (key, owner, expires_at) VALUES (one_key, '', 0) ON CONFLICT (key) DO NOTHING;
    IF FOUND THEN made := made || one_key; END IF;
  END LOOP;
END LOOP;
now_ms := ${nowMs};
IF EXISTS (SELECT 1 FROM ${t} AS l WHERE l.key = ANY (p_keys) AND l.expires_at > now_ms)
    OR EXISTS (SELECT 1 FROM ${w} AS w WHERE w.key = ANY (p_keys) AND ${liveWaiter("now_ms")}) THEN
  DELETE FROM ${t} AS l WHERE l.key = ANY (made) AND l.owner = '' AND l.expires_at <= now_ms;
  RETURN NULL;
END IF;
FOR i IN 1 .. cardinality(p_keys) LOOP
  next_fence := ${seq};
  UPDATE ${t} AS l SET owner = p_owners[i], expires_at = now_ms + p_ttl, fence = next_fence, metadata = p_metadata[i] WHERE l.key = p_keys[i];
  fences := fences || next_fence;
END LOOP;
RETURN fences;
END
$fn$`,
    // tick: a waiting store's look (statements.tick).
    `CREATE OR REPLACE FUNCTION ${f.tick}(p_key text, p_owner text) RETURNS json LANGUAGE plpgsql AS $fn$
DECLARE
  cur ${t}%ROWTYPE;
  made boolean := false;
  now_ms bigint;
  grants json;
  soonest bigint;
BEGIN
${lockRow(`EXISTS (SELECT 1 FROM ${w} AS w WHERE w.key = p_key AND w.granted_at IS NULL)`)}
now_ms := ${nowMs};
grants := ${f.hand_over}(p_key, now_ms);
IF made AND json_array_length(grants) = 0 THEN DELETE FROM ${t} AS l WHERE l.key = p_key AND l.owner = '' AND l.expires_at <= now_ms; END IF;
${soonest}
RETURN json_build_object('grants', grants, 'remaining', soonest - now_ms, 'me',
  (SELECT json_build_object('fence', w.fence, 'waited_ms', w.granted_at - w.enqueued_at, 'granted', w.granted_at IS NOT NULL,
    'grant_live', w.granted_at + w.ttl_ms > now_ms) FROM ${w} AS w WHERE w.key = p_key AND w.owner = p_owner));
END
$fn$`,
    // keep_fence: writes the fence a statement drew for the row it inserted (postgres.js,
    // postgresStatements, fenceOf) and answers it. Volatile, so its UPDATE sees the row the
    // calling statement inserted.
    `CREATE OR REPLACE FUNCTION ${f.keep_fence}(p_key text, p_owner text, p_fence bigint) RETURNS bigint LANGUAGE sql VOLATILE AS $fn$
UPDATE ${t} AS l SET fence = p_fence WHERE l.key = p_key AND l.owner = p_owner RETURNING l.fence
$fn$`,
    // watch: a store watches p_keys (or renews its watch) as p_watcher for p_lease ms: its row
    // in the watchers table, and the lock row's watched_until raised to its lease — the row
    // made, expired and ownerless, if the key has none. Each lock row is locked first, in one
    // order for every caller (as take_many), so a statement changing the key's holder either
    // committed before or writes a row that carries the new watched_until (see watchTriggers).
    // Answers the keys whose earlier lease of this watcher had lapsed, or whose lock row had lost
    // it: changes there may have gone unreported.
    `CREATE OR REPLACE FUNCTION ${f.watch}(p_keys text[], p_watcher text, p_lease bigint) RETURNS text[] LANGUAGE plpgsql AS $fn$
DECLARE
  cur ${t}%ROWTYPE;
  one_key text;
  now_ms bigint;
  mine bigint;
  lapsed text[] := '{}';
BEGIN
FOR one_key IN SELECT u.k FROM unnest(p_keys) AS u(k) ORDER BY u.k COLLATE "C" LOOP
  LOOP
    SELECT * INTO cur FROM ${t} AS l WHERE l.key = one_key FOR UPDATE;
    EXIT WHEN FOUND;
    INSERT INTO ${t} AS l (key, owner, expires_at) VALUES (one_key, '', 0) ON CONFLICT (key) DO NOTHING;
  END LOOP;
  now_ms := ${nowMs};
  SELECT x.expires_at INTO mine FROM ${n.watchers} AS x WHERE x.key = one_key AND x.watcher = p_watcher;
  IF mine IS NULL OR mine <= now_ms OR cur.watched_until < mine THEN lapsed := lapsed || one_key; END IF;
  INSERT INTO ${n.watchers} AS x (key, watcher, expires_at) VALUES (one_key, p_watcher, now_ms + p_lease)
    ON CONFLICT (key, watcher) DO UPDATE SET expires_at = EXCLUDED.expires_at;
  DELETE FROM ${n.watchers} AS x WHERE x.key = one_key AND x.expires_at <= now_ms;
  UPDATE ${t} AS l SET watched_until = GREATEST(l.watched_until, now_ms + p_lease) WHERE l.key = one_key;
END LOOP;
RETURN lapsed;
END
$fn$`,
    // unwatch: p_watcher stops watching p_key: its row goes (with lapsed ones), and the lock
    // row's watched_until falls to the latest lease left, 0 when none — then an expired
    // ownerless row kept for the watch goes too. The lock row is locked first (made if missing,
    // so that a concurrent watch waits), so no lease is taken while the rest is computed.
    `CREATE OR REPLACE FUNCTION ${f.unwatch}(p_key text, p_watcher text) RETURNS boolean LANGUAGE plpgsql AS $fn$
DECLARE
  cur ${t}%ROWTYPE;
  made boolean := false;
  now_ms bigint;
  latest bigint;
BEGIN
${lockRow()}
now_ms := ${nowMs};
DELETE FROM ${n.watchers} AS x WHERE x.key = p_key AND (x.watcher = p_watcher OR x.expires_at <= now_ms);
SELECT max(x.expires_at) INTO latest FROM ${n.watchers} AS x WHERE x.key = p_key;
UPDATE ${t} AS l SET watched_until = COALESCE(latest, 0) WHERE l.key = p_key;
DELETE FROM ${t} AS l WHERE l.key = p_key AND l.owner = '' AND l.expires_at <= now_ms AND l.watched_until <= now_ms;
RETURN true;
END
$fn$`,
    // watch_report, the trigger function of watchTriggers: reports a change of a watched key's
    // exclusive holder, as judged at the start of the statement that made it
    // (statement_timestamp(): a hold the statement found live is live here too). One NOTIFY on
    // the watch channel, JSON [key, the fence of the live hold that ended or null, the fence
    // granted or null, the grant's metadata, its ms left]: a hand-over (the holder's row given to
    // a waiter) is one report, end first. A live hold without a fence (from before the fence
    // column) that ended sends [key] unless a grant follows it, and a payload over Postgres's
    // limit (8000 bytes: a long key and metadata full of escapes) [key] too, or [""] for a key
    // too long even for that: that key's, or every key's, watchers look again. A deleted row of a
    // watched key comes back expired and ownerless, so that the key's next statements still read
    // that it is watched.
    `CREATE OR REPLACE FUNCTION ${f.watch_report}() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
  now_ms bigint := ${epochMs("statement_timestamp()")};
  ended bigint;
  granted bigint;
  payload text;
BEGIN
IF OLD.watched_until <= now_ms THEN RETURN NULL; END IF;
IF TG_OP = 'UPDATE' AND NEW.owner = OLD.owner AND NEW.fence IS NOT DISTINCT FROM OLD.fence THEN RETURN NULL; END IF;
IF OLD.owner <> '' AND OLD.expires_at > now_ms THEN ended := COALESCE(OLD.fence, 0); END IF;
IF TG_OP = 'UPDATE' THEN
  IF NEW.owner <> '' AND NEW.expires_at > now_ms AND NEW.fence IS NOT NULL THEN granted := NEW.fence; END IF;
  IF ended = 0 AND granted IS NOT NULL THEN ended := NULL; END IF;
  IF granted IS NOT NULL THEN
    payload := json_build_array(OLD.key, ended, granted, NEW.metadata, NEW.expires_at - ${nowMs})::text;
  END IF;
ELSE
  INSERT INTO ${t} AS l (key, owner, expires_at, queued_until, watched_until)
    VALUES (OLD.key, '', 0, OLD.queued_until, OLD.watched_until) ON CONFLICT (key) DO NOTHING;
END IF;
IF ended IS NULL AND granted IS NULL THEN RETURN NULL; END IF;
IF payload IS NULL AND ended > 0 THEN payload := json_build_array(OLD.key, ended, NULL, NULL, NULL)::text; END IF;
IF payload IS NULL OR octet_length(payload) > 7900 THEN payload := json_build_array(OLD.key)::text; END IF;
IF octet_length(payload) > 7900 THEN payload := '[""]'; END IF;
PERFORM pg_notify('${n.watchChannel}', payload);
RETURN NULL;
END
$fn$`,
  ];
}

// The triggers that report holder changes of watched keys (watch_report above). The statements
// that acquire and release are the same as without watch (a statement that read watched_until
// itself measured slower to plan), and the triggers' WHEN clauses let every row of a key nobody
// watches (watched_until 0) through without a call, so an unwatched key costs the clause alone.
// The UPDATE trigger fires for statements that set the owner — every grant and hand-over does;
// an extend, the fence written into a new row and a watch's lease do not. Created only if
// missing, so createTable() stays idempotent.
export function watchTriggers(n) {
  const create = (name, event, when) => `DO $do$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = '${n.table}'::regclass AND tgname = '${name}') THEN
    CREATE TRIGGER ${quote(name)} AFTER ${event} ON ${n.table} FOR EACH ROW WHEN (${when}) EXECUTE PROCEDURE ${n.functions.watch_report}();
  END IF;
END $do$`;
  return [
    create(n.watchTriggers.update, "UPDATE OF owner", "NEW.watched_until > 0"),
    create(n.watchTriggers.delete, "DELETE", "OLD.watched_until > 0"),
  ];
}
