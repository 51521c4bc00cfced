import type { Grant, LockStore } from "../index.js";

/** The database drivers `databaseLockStore` adapts to. */
export type DatabaseDriver = "d1" | "sqlite" | "pg";
/** SQL dialects the schema is written in. */
export type SqlDialect = "sqlite" | "postgres";

export interface DatabaseLockStoreOptions {
  /** Lock table: an identifier or `schema.table` (letters, digits, `_`). Default "keel_locks". */
  table?: string;
  /** Skip driver detection: "d1" (Cloudflare D1), "sqlite" (better-sqlite3, node:sqlite, bun:sqlite), "pg". */
  driver?: DatabaseDriver;
}

export interface SchemaOptions {
  /** Default "sqlite". "d1" is an alias of "sqlite", "pg" of "postgres". */
  dialect?: SqlDialect | DatabaseDriver | "postgresql";
  /** Default "keel_locks". */
  table?: string;
}

/** A LockStore in a SQL table; every method answers a promise and runs one statement. */
export type DatabaseLockStore = Omit<LockStore, "acquire"> & {
  /**
   * Atomic set-if-absent judged by the database's clock: `{ fence }` if this call took the lock,
   * `false` if someone holds it. The fence (1..2^53 − 1) is greater than every fence this table
   * handed out before — across holders, processes, expiry, release, `purgeExpired()` and
   * database restarts; one counter serves all of a table's keys, so a key's fences have gaps.
   * Rejects (and leaves no lock) if the fence counter is missing (run `createTable()`) or
   * exhausted.
   */
  acquire(key: string, owner: string, ttlMs: number): Promise<false | Grant>;
  readonly table: string;
  readonly driver: DatabaseDriver;
  readonly dialect: SqlDialect;
  /**
   * CREATE TABLE / INDEX / fence counter IF NOT EXISTS, and the upgrade of a table laid out
   * without fences (idempotent; held locks stay held).
   */
  createTable(): Promise<void>;
  /** Delete rows expired by the database's clock; resolves to how many went. */
  purgeExpired(): Promise<number>;
  /** The database's clock in ms since the Unix epoch (what expiry is judged by). */
  now(): Promise<number>;
};

/**
 * A LockStore over a Cloudflare D1 binding, a better-sqlite3 Database or a pg Pool/Client.
 * Throws TypeError for an invalid table name or an unrecognised handle.
 */
export declare function databaseLockStore(db: object, options?: DatabaseLockStoreOptions): DatabaseLockStore;
export default databaseLockStore;

/**
 * The lock table's DDL for a dialect, as `;`-terminated statements: the table, its expiry index
 * and the fence counter (SQLite: a `<table>_fence` table and two triggers; PostgreSQL: a
 * `<table>_fence_seq` sequence). For a fresh database; `createTable()` also upgrades.
 */
export declare function schema(options?: SchemaOptions): string;

/** Which driver `db` is, or null. */
export declare function detectDriver(db: unknown): DatabaseDriver | null;
