// The Keel lock API as the package exports it, built once per wasm instance over the
// wasm-bindgen glue's exports. The files of the JS face, each importing only files below it:
//
//   api.js           this entry
//   leaders.js       campaign, observe
//   handles.js       lock, semaphore, readLock, writeLock, restoreLock, inspect
//   multi.js         MultiKeyLock: several keys at once
//   one-step.js      a store's acquireMany, reached through the keys' handles
//   lock.js          Lock: a handle on one key
//   watcher.js       a hold's watcher, driven from JS timers
//   memory-store.js  the memory store's JS face: its methods, metadata and watch
//   inspect.js       who holds a key, as a store answers it
//   calls.js         calls to a JS store, each bounded; the timer-or-abort race
//   waiters.js       callers waiting in the memory store's queue
//   binding.js       the store lock() binds to, the spare slot
//   core.js          the wasm's numeric face
//   options.js, events.js, holding.js, errors.js, promises.js, protocol.js

import { connect, core } from "./core.js";
import { getLockStore, setLockStore } from "./binding.js";
import { installMemoryStore } from "./memory-store.js";
import { Lock } from "./lock.js";
import { inspect, lock, readLock, restoreLock, semaphore, writeLock } from "./handles.js";
import { campaign, observe } from "./leaders.js";
import { onLockEvent } from "./events.js";
import { LockUnavailableError } from "./holding.js";
import { LimitMismatchError, LockNotHeldError, LockStoreTimeoutError } from "./errors.js";

// What `api` answered: every entry of one instance gets the same objects.
let exported = null;

/**
 * The package's exports over the wasm module's exports `glue`, built on the first call; later
 * calls (the Node entries for `import` and `require` share one instance) answer the same.
 */
export function api(glue) {
  if (exported !== null) return exported;
  connect(glue);
  installMemoryStore(core.MemoryLockStore.prototype);
  exported = {
    lock,
    semaphore,
    readLock,
    writeLock,
    restoreLock,
    inspect,
    campaign,
    observe,
    setLockStore,
    getLockStore,
    onLockEvent,
    Lock,
    MemoryLockStore: core.MemoryLockStore,
    LockNotHeldError,
    LockUnavailableError,
    LockStoreTimeoutError,
    LimitMismatchError,
  };
  return exported;
}
