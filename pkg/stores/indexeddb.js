// keel-lock/indexeddb — a LockStore on the browser's IndexedDB, shared by every window, iframe
// and worker of one origin (one browser profile, one device). No runtime dependencies.
//
// One database (default name "keel-lock", version 1) with two object stores, keyed by lock key:
//   holds    { owner, expiresAt, fence, metadata }: the key's hold (a row past expiresAt is absent)
//   fences   the last fence drawn for the key; never deleted, so fences keep rising per key
// Every operation is one IndexedDB transaction over both object stores. IndexedDB runs readwrite
// transactions with overlapping scopes one after another, across every connection of the origin,
// so each acquire / release / extend / forceRelease reads and decides and writes with nobody in
// between; nothing but IndexedDB requests happens inside one (their callbacks decide; the answer
// is given only once the transaction has committed). isLocked / remainingTime / inspect are one
// readonly transaction each: a consistent snapshot.
//
// Expiry is by Date.now(), the wall clock, the one clock every context of the origin shares
// (performance.now() counts from each context's own start). Setting the clock forward ends holds
// early — another context can then take the key while the old holder runs on, which its fence
// shows — and setting it back keeps holds longer by as much.

import { argumentChecks, MAX_FENCE } from "./args.js";
import { checkMetadata } from "./metadata.js";

const WHO = "indexedDbLockStore";
const check = argumentChecks(WHO);

/** Default database name. */
export const DEFAULT_NAME = "keel-lock";
/** The database version this store creates and expects. */
export const DATABASE_VERSION = 1;
const HOLDS = "holds";
const FENCES = "fences";

/**
 * The database cannot be used: no IndexedDB here, it could not be opened (blocked, a newer
 * version, refused), it was deleted, upgraded or closed under the store, or a transaction failed
 * (quota, I/O). `cause` carries the browser's error, if any.
 */
export class IndexedDbStoreError extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = "IndexedDbStoreError";
  }
}

function checkOptions(options) {
  if (options === undefined) options = {};
  if (options === null || typeof options !== "object" || Array.isArray(options)) {
    throw new TypeError(`${WHO}: options must be an object ({ name?, indexedDB? })`);
  }
  const name = options.name === undefined ? DEFAULT_NAME : options.name;
  if (typeof name !== "string") throw new TypeError(`${WHO}: name must be a string, got ${typeof name}`);
  if (name.length === 0) throw new RangeError(`${WHO}: name must not be empty`);
  const factory = options.indexedDB === undefined ? globalThis.indexedDB : options.indexedDB;
  if (factory === undefined || factory === null) {
    throw new IndexedDbStoreError(
      `${WHO}: IndexedDB is not available here (not a browser context, an opaque origin, or a mode that disables it)`,
    );
  }
  if (typeof factory.open !== "function") {
    throw new TypeError(`${WHO}: indexedDB must be an IDBFactory (with open()), got ${typeof factory}`);
  }
  return { name, factory };
}

/**
 * A keel-lock LockStore on IndexedDB, for the windows, iframes and workers of one origin.
 *
 * @param {{ name?: string, indexedDB?: IDBFactory }} [options]
 */
export function indexedDbLockStore(options) {
  const { name, factory } = checkOptions(options);
  let opening = null; // the connection's promise, once asked for
  let broken = null; // an IndexedDbStoreError every call answers from now on

  function fail(message, cause) {
    broken ??= new IndexedDbStoreError(`${WHO}: database "${name}": ${message}`, cause === undefined ? undefined : { cause });
    return broken;
  }

  function connect() {
    if (broken !== null) return Promise.reject(broken);
    opening ??= new Promise((resolve, reject) => {
      let request;
      try {
        request = factory.open(name, DATABASE_VERSION);
      } catch (error) {
        // SecurityError: an opaque origin, or storage refused for this document.
        reject(fail("IndexedDB refused to open it", error));
        return;
      }
      let settled = false;
      request.onupgradeneeded = () => {
        const db = request.result;
        if (!db.objectStoreNames.contains(HOLDS)) db.createObjectStore(HOLDS);
        if (!db.objectStoreNames.contains(FENCES)) db.createObjectStore(FENCES);
      };
      request.onblocked = () => {
        // Another context keeps an older version open and does not close it: say so rather than
        // wait for it. A connection that opens later is closed (the store is not used again).
        settled = true;
        reject(fail("opening it is blocked by a connection of an older version in another tab or worker; close or reload that one"));
      };
      request.onerror = (event) => {
        event.preventDefault?.();
        if (settled) return;
        settled = true;
        const error = request.error;
        const why = error?.name === "VersionError"
          ? `it exists at a newer version than ${DATABASE_VERSION} (a newer keel-lock, or another app using this name: pick another name)`
          : `it could not be opened (${error?.name ?? "unknown error"}: ${error?.message ?? ""})`;
        reject(fail(why, error));
      };
      request.onsuccess = () => {
        const db = request.result;
        if (settled) {
          db.close();
          return;
        }
        if (!db.objectStoreNames.contains(HOLDS) || !db.objectStoreNames.contains(FENCES)) {
          db.close();
          settled = true;
          reject(fail(`it has no "${HOLDS}" and "${FENCES}" object stores: another app uses this name; pick another name`));
          return;
        }
        db.onversionchange = (event) => {
          // Deleted (newVersion null) or upgraded elsewhere: close so that goes ahead. Reopening
          // would start fences again from 1 under a deleted database, so the store stays failed.
          db.close();
          fail(event.newVersion === null
            ? "it was deleted (fences would start again from 1: make a new store once you are sure no hold of the old one is in use)"
            : `another context upgraded it to version ${event.newVersion}; this one runs an older keel-lock: reload`);
        };
        db.onclose = () => fail("the browser closed it (site data cleared, or storage failure)");
        settled = true;
        resolve(db);
      };
    });
    return opening;
  }

  // Runs one transaction over both object stores: `body(holds, fences, answer)` issues requests
  // whose callbacks decide, calling answer(value) (a later call wins) or throwing to abort. The
  // promise resolves with the last answer once the transaction has committed.
  async function transact(mode, body, durability) {
    const db = await connect();
    if (broken !== null) throw broken;
    return new Promise((resolve, reject) => {
      let tx;
      try {
        tx = db.transaction([HOLDS, FENCES], mode, durability === undefined ? undefined : { durability });
      } catch (error) {
        // InvalidStateError: closed meanwhile (deleted, upgraded, closed by close()).
        reject(broken ?? fail("the connection is closed", error));
        return;
      }
      let value;
      let thrown = null;
      const answer = (v) => {
        value = v;
      };
      const guard = (fn) => (event) => {
        try {
          fn(event.target.result);
        } catch (error) {
          thrown = error;
          try {
            tx.abort();
          } catch {
            // already finishing
          }
        }
      };
      tx.oncomplete = () => resolve(value);
      tx.onabort = () => {
        if (thrown !== null) reject(thrown);
        else reject(broken ?? new IndexedDbStoreError(`${WHO}: database "${name}": a transaction failed (${tx.error?.name ?? "aborted"}: ${tx.error?.message ?? ""})`, { cause: tx.error }));
      };
      try {
        body(tx.objectStore(HOLDS), tx.objectStore(FENCES), answer, guard);
      } catch (error) {
        thrown = error;
        tx.abort();
      }
    });
  }

  const live = (hold, now) => hold !== undefined && hold.expiresAt > now;

  function acquire(key, owner, ttlMs, metadata) {
    check.key(key);
    check.owner(owner);
    check.ttl(ttlMs);
    const meta = checkMetadata(WHO, metadata);
    return transact("readwrite", (holds, fences, answer, guard) => {
      answer(false);
      holds.get(key).onsuccess = guard((hold) => {
        const now = Date.now();
        if (live(hold, now)) return;
        fences.get(key).onsuccess = guard((last) => {
          const fence = (last ?? 0) + 1;
          if (!Number.isSafeInteger(fence) || fence > MAX_FENCE) {
            throw new IndexedDbStoreError(`${WHO}: the fence counter of ${JSON.stringify(key)} is spent or corrupt (${last})`);
          }
          fences.put(fence, key);
          holds.put({ owner, expiresAt: now + ttlMs, fence, metadata: meta }, key);
          answer({ fence });
        });
      });
    }, "strict");
  }

  function release(key, owner) {
    check.key(key);
    check.owner(owner);
    return transact("readwrite", (holds, _fences, answer, guard) => {
      answer(false);
      holds.get(key).onsuccess = guard((hold) => {
        if (hold === undefined || hold.owner !== owner) return;
        // The owner's own row goes, live or not; only a live one was still a hold.
        holds.delete(key);
        answer(live(hold, Date.now()));
      });
    });
  }

  function extend(key, owner, ttlMs) {
    check.key(key);
    check.owner(owner);
    check.ttl(ttlMs);
    return transact("readwrite", (holds, _fences, answer, guard) => {
      answer(false);
      holds.get(key).onsuccess = guard((hold) => {
        const now = Date.now();
        if (!live(hold, now) || hold.owner !== owner) return;
        holds.put({ ...hold, expiresAt: now + ttlMs }, key);
        answer(true);
      });
    });
  }

  function forceRelease(key) {
    check.key(key);
    return transact("readwrite", (holds, _fences, answer, guard) => {
      answer(false);
      holds.get(key).onsuccess = guard((hold) => {
        if (hold === undefined) return;
        holds.delete(key);
        answer(live(hold, Date.now()));
      });
    });
  }

  // One readonly look at the key's hold: `read(hold, now)` when live, else `absent`.
  function look(key, read, absent) {
    check.key(key);
    return transact("readonly", (holds, _fences, answer, guard) => {
      answer(absent);
      holds.get(key).onsuccess = guard((hold) => {
        const now = Date.now();
        if (live(hold, now)) answer(read(hold, now));
      });
    });
  }

  return {
    acquire,
    release,
    extend,
    isLocked: (key) => look(key, () => true, false),
    remainingTime: (key) => look(key, (hold, now) => hold.expiresAt - now, null),
    inspect: (key) =>
      look(
        key,
        (hold, now) => ({ holders: [{ metadata: hold.metadata, fence: hold.fence, remainingMs: hold.expiresAt - now }], waiting: null }),
        { holders: [], waiting: null },
      ),
    forceRelease,
    /** Closes the store's connection (once its transactions finish); every call rejects after. */
    close() {
      fail("the store was closed");
      opening?.then((db) => db.close(), () => {});
    },
    name,
    [Symbol.toStringTag]: "IndexedDbLockStore",
  };
}
