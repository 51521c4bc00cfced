// keel-lock/sql on PostgreSQL: the pieces of SQL that both the statements (postgres.js) and the
// PL/pgSQL functions (postgres-functions.js) are written with.

// A timestamp as milliseconds since the epoch, a bigint.
export const epochMs = (timestamp) => `(extract(epoch FROM ${timestamp}) * 1000)::bigint`;

// The current time in ms. clock_timestamp() is the real current time (now() is frozen at
// transaction start, which matters when the caller passes a client inside a transaction). It is
// volatile: a statement reads it once (a CTE, a variable) and uses that one value throughout.
export const PG_NOW_MS = epochMs("clock_timestamp()");

// The next fence, from the table's sequence.
export const nextFence = (n) => `nextval('${n.sequence}')`;

// A waiter row `w` still in the running as of `now`: not granted, deadline not passed.
export const liveWaiter = (now) => `w.granted_at IS NULL AND w.deadline > ${now}`;

// Waiter rows nobody needs any more, as of `now`: waiters whose deadline passed, grants older
// than their TTL.
export const staleAt = (now) =>
  `((w.granted_at IS NULL AND w.deadline <= ${now}) OR (w.granted_at IS NOT NULL AND w.granted_at + w.ttl_ms <= ${now}))`;

// A NOTIFY on the table's channel. The payload is JSON: [key, owner, fence, waitedMs, ttlMs]
// for a grant, [key, null] for "the key was freed, look again". A payload over Postgres's
// 8000-byte limit (a very long key or owner) becomes ["", null]: every waiter looks again.
export const notifier = (n) => (json) =>
  `pg_notify('${n.channel}', CASE WHEN octet_length(${json}) <= 7900 THEN ${json} ELSE '["",null]' END)`;
