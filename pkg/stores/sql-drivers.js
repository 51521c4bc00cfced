// keel-lock/sql: the database handles the store adapts to (a D1 binding, better-sqlite3 and
// other synchronous SQLite drivers, a pg Pool or Client), the two primitives it reaches each
// through, and how their answers read.

import { MAX_FENCE } from "./args.js";

export const DRIVERS = ["d1", "sqlite", "pg"];

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

// Each driver answers three primitives: `row(sql, params)` → the first row or null,
// `all(sql, params)` → every row, and `count(sql, params)` → rows changed; and
// `rows([[sql, params], …], more)` → each statement's first row, the later ones run only when
// `more(first row)` says so (null when not run). D1 sends them all in one batch (one round trip,
// one transaction); the others one by one.
export function driverFor(db, driver) {
  const oneByOne = (io) => async (list, more) => {
    const first = await io.row(...list[0]);
    if (!more(first)) return [first, ...list.slice(1).map(() => null)];
    const answers = [first];
    for (const [sql, params] of list.slice(1)) answers.push(await io.row(sql, params));
    return answers;
  };
  const withRows = (io) => Object.assign(io, { rows: io.rows ?? oneByOne(io) });
  switch (driver) {
    case "d1":
      return withRows({
        async row(sql, params) {
          return (await db.prepare(sql).bind(...params).first()) ?? null;
        },
        async all(sql, params) {
          return (await db.prepare(sql).bind(...params).all())?.results ?? [];
        },
        async count(sql, params) {
          const result = await db.prepare(sql).bind(...params).run();
          return Number(result?.meta?.changes ?? 0);
        },
        async rows(list) {
          const results = await db.batch(list.map(([sql, params]) => db.prepare(sql).bind(...params)));
          return results.map((result) => result?.results?.[0] ?? null);
        },
      });
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
      return withRows({
        async row(sql, params) {
          return prepared(sql).get(...params) ?? null;
        },
        async all(sql, params) {
          return prepared(sql).all(...params);
        },
        async count(sql, params) {
          return Number(prepared(sql).run(...params)?.changes ?? 0);
        },
      });
    }
    case "pg":
      return withRows({
        async row(sql, params) {
          const result = await db.query(sql, params);
          return result?.rows?.[0] ?? null;
        },
        async all(sql, params) {
          return (await db.query(sql, params))?.rows ?? [];
        },
        async count(sql, params) {
          const result = await db.query(sql, params);
          return Number(result?.rowCount ?? 0);
        },
      });
    default:
      throw new TypeError(`keel-lock sql store: driver must be one of ${DRIVERS.join(", ")}`);
  }
}

// SQLite answers 1/0 (or 1n/0n with safeIntegers), Postgres true/false.
export const truthy = (value) => value === true || Number(value) === 1;

/**
 * A fence as the database returned it — a number (SQLite), a bigint (better-sqlite3 with
 * safeIntegers, pg with a BigInt type parser) or a decimal string (pg's default for BIGINT) — as
 * a JS number, exactly. Anything that is not an integer in 1..MAX_FENCE is refused: a rounded or
 * missing fence would defeat the check it exists for.
 */
export function toFence(value) {
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
