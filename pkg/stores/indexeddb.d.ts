import type { Grant, HolderInfo, InspectAnswer, LockStore } from "../index.js";

export interface IndexedDbLockStoreOptions {
  /** The database's name (default "keel-lock"): stores with different names never share a lock. */
  name?: string;
  /** The IDBFactory to use (default: the global `indexedDB`). */
  indexedDB?: { open(name: string, version?: number): unknown };
}

/**
 * The database cannot be used: no IndexedDB, it could not be opened (blocked by an older version
 * open elsewhere, a newer version, refused), it was deleted, upgraded or closed under the store,
 * `close()` was called, or a transaction failed (quota, I/O). `cause` holds the browser's error.
 */
export declare class IndexedDbStoreError extends Error {
  readonly name: "IndexedDbStoreError";
}

/** A LockStore on IndexedDB; every method answers a promise. */
export type IndexedDbLockStore = Omit<LockStore, "acquire" | "inspect" | "forceRelease" | "acquireOrWait" | "withdraw" | "acquireShared" | "acquireSharedOrWait" | "acquireMany" | "watch"> & {
  /**
   * One readwrite transaction: when no live hold is on `key`, draws its next fence (strictly
   * increasing per key) and records the hold until `Date.now() + ttlMs` → `{ fence }`; else `false`.
   */
  acquire(key: string, owner: string, ttlMs: number, metadata?: string): Promise<false | Grant>;
  release(key: string, owner: string): Promise<boolean>;
  extend(key: string, owner: string, ttlMs: number): Promise<boolean>;
  isLocked(key: string): Promise<boolean>;
  remainingTime(key: string): Promise<number | null>;
  /** The hold (metadata, fence, ms left), never its owner; `waiting` is null (waiters poll). */
  inspect(key: string): Promise<InspectAnswer & { holders: HolderInfo[]; waiting: null }>;
  /** Ends the hold on `key`, whoever holds it; true when a live hold was ended. */
  forceRelease(key: string): Promise<boolean>;
  /** Closes the connection once its transactions finish; every call rejects with IndexedDbStoreError after. */
  close(): void;
  readonly name: string;
};

/**
 * A LockStore shared by every window, iframe and worker of one origin, in one IndexedDB database.
 * Throws IndexedDbStoreError at once when there is no IndexedDB.
 */
export declare function indexedDbLockStore(options?: IndexedDbLockStoreOptions): IndexedDbLockStore;

export declare const DEFAULT_NAME: "keel-lock";
export declare const DATABASE_VERSION: 1;
