// keel-lock/sql: what both dialects share — the table name's checks, the dialect's name, and the
// names of every object that belongs to a lock table (its index, fence counter or sequence,
// triggers, side tables, functions and channels). The DDL and statements that use these names
// are per dialect: sqlite.js (SQLite, D1) and postgres.js (PostgreSQL).

import { MAX_FENCE } from "../args.js";

export const DEFAULT_TABLE = "keel_locks";

// The fence's range in SQL: MAX_FENCE = 2^53 − 1 exactly.
export const MAX_FENCE_SQL = String(MAX_FENCE);

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

export const quote = (identifier) => `"${identifier}"`;

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
export function objectNames(table) {
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
