import type { Grant, HeldLimit, HolderInfo, InspectAnswer, LockStore, WaitedGrant, WatchReport } from "../index.js";

/** The database drivers `databaseLockStore` adapts to. */
export type DatabaseDriver = "d1" | "sqlite" | "pg";
/** SQL dialects the schema is written in. */
export type SqlDialect = "sqlite" | "postgres";

export interface DatabaseLockStoreOptions {
  /** Lock table: an identifier or `schema.table` (letters, digits, `_`). Default "keel_locks". */
  table?: string;
  /** Skip driver detection: "d1" (Cloudflare D1), "sqlite" (better-sqlite3, node:sqlite, bun:sqlite), "pg". */
  driver?: DatabaseDriver;
  /**
   * PostgreSQL only: answers the connected client that `acquireOrWait` LISTENs on (the store
   * takes it over and ends it on `close()`: `release(true)` for a pool client, else `end()`).
   * Default: `db.connect()` when `db` is a `pg.Pool`, or the `pg.Client` itself. A connection
   * the store took (from the pool or `listen`) is given back a moment after its last wait ends.
   */
  listen?: () => PgListenClient | Promise<PgListenClient>;
  /**
   * PostgreSQL only: a queued wait looks again no more often than this, nor than the caller's
   * `pollMs`, in case its notification was lost (whole ms, default 1000).
   */
  safetyNetMs?: number;
}

/** The part of a pg client the store LISTENs through (a `pg.Client` or a `pg.PoolClient`). */
export interface PgListenClient {
  query(text: string): Promise<unknown>;
  on(event: "notification", listener: (message: { channel: string; payload?: string }) => void): unknown;
  on(event: "error" | "end", listener: (...args: unknown[]) => void): unknown;
  removeListener?(event: string, listener: (...args: unknown[]) => void): unknown;
  release?(destroy?: boolean): void;
  end?(): Promise<void>;
}

export interface SchemaOptions {
  /** Default "sqlite". "d1" is an alias of "sqlite", "pg" of "postgres". */
  dialect?: SqlDialect | DatabaseDriver | "postgresql";
  /** Default "keel_locks". */
  table?: string;
}

/** One live hold of a key, as `inspect` answers it: never its owner token. */
export type DatabaseHolderInfo = HolderInfo;

/** `inspect`'s answer: `waiting` counted on PostgreSQL, `null` on SQLite and D1 (no queue). */
export type DatabaseLockInfo = InspectAnswer;

/** A LockStore in a SQL table; every method answers a promise and runs one statement. */
export type DatabaseLockStore = Omit<
  LockStore,
  "acquire" | "acquireOrWait" | "acquireShared" | "acquireSharedOrWait" | "acquireMany" | "inspect" | "withdraw" | "forceRelease" | "watch"
> & {
  /**
   * Atomic set-if-absent judged by the database's clock: `{ fence }` if this call took the lock,
   * `false` if someone holds it. The fence (1..2^53 − 1) is greater than every fence this table
   * handed out before — across holders, processes, expiry, release, `purgeExpired()` and
   * database restarts; one counter serves all of a table's keys, so a key's fences have gaps.
   * Rejects (and leaves no lock) if the fence counter is missing (run `createTable()`) or
   * exhausted. `metadata`: a string of at most 1024 bytes of UTF-8 (longer: RangeError; not a
   * string: TypeError), kept with the hold until it ends and shown by `inspect`.
   */
  acquire(key: string, owner: string, ttlMs: number, metadata?: string): Promise<false | Grant>;
  /**
   * A shared hold of `weight` permits under `limit` (semaphores; a read lock is weight 1 under
   * 2^32 − 1), for `ttlMs`, one row per owner: `{ fence }` (from the same counter as `acquire`),
   * `false` (an exclusive hold is live, the weights would not fit, the owner already holds the
   * key, or — Postgres — callers are queued), or `{ heldLimit }` when the live holds are under
   * another limit. `acquire` is refused while any shared hold is live; `release` and `extend`
   * act on the owner's own hold. Rejects with RangeError unless `1 <= weight <= limit <= 2^32 − 1`.
   */
  acquireShared(
    key: string,
    owner: string,
    ttlMs: number,
    weight: number,
    limit: number,
    metadata?: string,
  ): Promise<false | Grant | HeldLimit>;
  /**
   * Several keys in one step: if `acquire(keys[i], owners[i], ttlMs)` would grant every key now,
   * each is granted to its owner as `acquire` grants it and the answer is each key's `{ fence }`
   * in key order; otherwise nothing changes and the answer is `false`. `null` (nothing changed):
   * a PostgreSQL table `createTable()` has not upgraded since this method came. Keys: 1..64,
   * distinct, sorted by code point; owners distinct, one per key (else TypeError / RangeError).
   * `metadata`: one string (as `acquire` takes it) or undefined per key.
   */
  acquireMany(
    keys: readonly string[],
    owners: readonly string[],
    ttlMs: number,
    metadata?: readonly (string | undefined)[],
  ): Promise<false | null | Grant[]>;
  /**
   * Free `key` whoever holds it (operators clearing a stuck lock, every shared hold included);
   * `true` if someone did. On Postgres queued waiters are handed the key, as on any release.
   */
  forceRelease(key: string): Promise<boolean>;
  /**
   * Who holds `key` now, read in one statement: its live holds (metadata, fence, ms left) and
   * its live waiters. Never shows an owner. Rejects with an error naming `createTable()` on a
   * table that has not been upgraded for hold metadata.
   */
  inspect(key: string): Promise<DatabaseLockInfo>;
  readonly table: string;
  readonly driver: DatabaseDriver;
  readonly dialect: SqlDialect;
  /**
   * CREATE TABLE / INDEX / fence counter IF NOT EXISTS, and the upgrade of a table laid out
   * without fences (idempotent; held locks stay held).
   */
  createTable(): Promise<void>;
  /** Delete rows (locks and shared holds) expired by the database's clock; resolves to how many went. */
  purgeExpired(): Promise<number>;
  /** The database's clock in ms since the Unix epoch (what expiry is judged by). */
  now(): Promise<number>;
};

/** A grant after waiting: the fence and the whole ms the caller waited in the queue (≥ 0). */
export type SqlWaitedGrant = Grant & WaitedGrant & { fence: number };

/**
 * The PostgreSQL store also waits without polling: `setLockStore(store)` and
 * `lock(k).run(fn, { timeout })` queue in the database instead of retrying.
 */
export type PostgresLockStore = DatabaseLockStore & {
  /**
   * Takes the key if it is free and nobody is queued; otherwise joins the key's FIFO queue and
   * waits up to `waitMs` for the database to hand it over (on release, or at the holder's
   * expiry), looking again every max(`pollMs`, `safetyNetMs`) in case a notification was lost.
   * Answers `{ fence, waitedMs }` (the TTL runs from the grant) or `false` (the wait is spent; no
   * longer queued). The first call opens the store's LISTEN connection. When the pool or client is
   * ended, a wait still queued rejects with `LockStoreClosedError`. `metadata` (as `acquire`
   * takes it) waits with the caller and is its hold's once granted.
   */
  acquireOrWait(
    key: string,
    owner: string,
    ttlMs: number,
    waitMs: number,
    pollMs: number,
    metadata?: string,
  ): Promise<false | SqlWaitedGrant>;
  /**
   * `acquireShared`, or the back of the same FIFO queue as `acquireOrWait` (shared and exclusive
   * waiters alike; a hand-over grants the front waiters while each fits) for up to `waitMs`.
   * Answers `{ fence, waitedMs }`, `false` (the wait is spent; no longer queued), or at once
   * `{ heldLimit }` (never queued).
   */
  acquireSharedOrWait(
    key: string,
    owner: string,
    ttlMs: number,
    weight: number,
    limit: number,
    waitMs: number,
    pollMs: number,
    metadata?: string,
  ): Promise<false | SqlWaitedGrant | HeldLimit>;
  /**
   * Afterwards `owner` neither holds nor waits for `key`: leaves the queue, releases a grant it
   * got (handing the key to the next waiter); a pending `acquireOrWait` of `owner` answers false.
   */
  withdraw(key: string, owner: string): Promise<void>;
  /**
   * Pending `acquireOrWait` calls leave their queues (answering a grant they already got, else
   * false); the LISTEN connection is closed. A later `acquireOrWait` listens again. Not needed
   * for a process to exit: an idle store gives its connection back by itself.
   */
  close(): Promise<void>;
  /** The same as `close()`. */
  end(): Promise<void>;
  /**
   * Pushes every change of `key`'s exclusive holder that a store operation makes — this
   * process's or any other's on the same table — once, in the order the changes committed:
   * `{ fence, held: true, metadata, remainingMs }` when the hold `fence` is granted (acquire,
   * acquireMany, acquireOrWait taking the key, a hand-over to a waiter), `{ fence, held: false }`
   * when an operation ends a live hold (release, forceRelease, withdraw of a handed key; a
   * hand-over is the end, then the grant). Expiry, `extend` and shared holds are not reported.
   * `null`: reports may have been missed (the LISTEN connection was lost and is back; a payload
   * too long for a NOTIFY): look again. No report carries an owner. Resolves, once the store
   * LISTENs and the key is registered in `<table>_watchers`, to `stop()`: from its call
   * `onChange` is not called again, and it resolves once the key is unregistered (idempotent).
   * Rejects with TypeError for a bad key or an `onChange` that is not a function, and for a
   * handle the store cannot LISTEN through. `close()` stops every watch; ending the pool or
   * client tells each watch `null` once and ends it. SQLite and D1 stores have no `watch`.
   */
  watch(key: string, onChange: (change: WatchReport | null) => void): Promise<() => Promise<void>>;
  /** How many `acquireOrWait` calls of this store are waiting. */
  readonly waitingCount: number;
  /** Whether the store's LISTEN connection is open. */
  readonly listening: boolean;
  /** The client the store LISTENs on, or null. */
  readonly listenClient: PgListenClient | null;
};

/**
 * A LockStore over a Cloudflare D1 binding, a better-sqlite3 Database or a pg Pool/Client.
 * Throws TypeError for an invalid table name or an unrecognised handle. With pg (detected, or
 * `driver: "pg"`) the store is a `PostgresLockStore`; SQLite and D1 stores have no
 * `acquireOrWait` / `acquireSharedOrWait`, so callers waiting on them poll `acquire` /
 * `acquireShared`, and no `watch` (nothing to push with), so `observe` polls `inspect` there.
 */
export declare function databaseLockStore(db: object, options: DatabaseLockStoreOptions & { driver: "d1" | "sqlite" }): DatabaseLockStore;
export declare function databaseLockStore(db: object, options: DatabaseLockStoreOptions & { driver: "pg" }): PostgresLockStore;
/** A handle with `query` and no `prepare` is detected as pg. */
export declare function databaseLockStore(
  db: { query(...args: any[]): unknown },
  options?: DatabaseLockStoreOptions,
): PostgresLockStore;
export declare function databaseLockStore(db: object, options?: DatabaseLockStoreOptions): DatabaseLockStore;
export default databaseLockStore;

/**
 * The lock table's DDL for a dialect, as `;`-terminated statements: the table, its expiry index
 * and the fence counter (SQLite: a `<table>_fence` table and two triggers; PostgreSQL: a
 * `<table>_fence_seq` sequence, and the `<table>_waiters` queue with its index), the shared
 * holds' `<table>_shared` table (SQLite: with triggers; PostgreSQL: with PL/pgSQL functions), and
 * (PostgreSQL) watch's `<table>_watchers` table and the triggers on the lock table that report
 * to it. For a fresh database; `createTable()` also upgrades.
 */
export declare function schema(options?: SchemaOptions): string;

/** A store's wait was cut short because the pool or client it was given was ended. */
export declare class LockStoreClosedError extends Error {
  readonly name: "LockStoreClosedError";
}

/** Which driver `db` is, or null. */
export declare function detectDriver(db: unknown): DatabaseDriver | null;
