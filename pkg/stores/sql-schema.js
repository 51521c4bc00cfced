// keel-lock/sql: the lock table and every statement the store runs, per dialect. The store
// (sql.js) takes them from here; the SQL itself is in sql/: names.js (the table name's checks and
// the names of the table's objects, for both dialects), sqlite.js (SQLite, for D1 and
// better-sqlite3), postgres.js (PostgreSQL, with its waiters table and the hand-over in SQL) and
// postgres-functions.js (its PL/pgSQL functions and triggers). How each operation maps onto a
// statement, and why it is atomic: stores/README.md, "keel-lock/sql".

import { DEFAULT_TABLE, dialectOf, objectNames, tableParts } from "./sql/names.js";
import { postgresLateUpgrades, postgresSchema, postgresStatements, postgresUpgrades } from "./sql/postgres.js";
import { sqliteLateUpgrades, sqliteSchema, sqliteStatements, sqliteUpgrades } from "./sql/sqlite.js";

export { DEFAULT_TABLE, dialectOf, tableParts };

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

// The DDL as a list of statements, in the order createTable() runs them.
export function schemaStatements(dialect, table) {
  const n = objectNames(table);
  return dialect === "postgres" ? postgresSchema(n) : sqliteSchema(n);
}

// What createTable() runs after the CREATE TABLE and before the rest of schemaStatements(), to
// bring a lock table from an earlier layout up to date: SQLite's statements fail with "duplicate
// column name" on a table that has the column, and createTable() ignores exactly that error;
// PostgreSQL's are ADD COLUMN IF NOT EXISTS.
export function upgradeStatements(dialect, table) {
  const n = objectNames(table);
  return dialect === "postgres" ? postgresUpgrades(n) : sqliteUpgrades(n);
}

// What createTable() runs after all of schemaStatements(): the tables made there, as an earlier
// release laid them out, get the columns that came since — the waiters' shared columns
// (Postgres; SQLite has no queue) and the metadata columns. Errors as for upgradeStatements().
export function lateUpgradeStatements(dialect, table) {
  const n = objectNames(table);
  return dialect === "postgres" ? postgresLateUpgrades(n) : sqliteLateUpgrades(n);
}

// The statements, per dialect. Parameters are listed in the order each statement binds them.
export function statements(dialect, table) {
  const n = objectNames(table);
  return dialect === "sqlite" ? sqliteStatements(n) : postgresStatements(n);
}
