// The Keel lock API as the package exports it, built once per wasm instance over the
// wasm-bindgen glue's exports. Each file of the JS face imports only files below it in
// ARCHITECTURE.md's map ("JS bindings").

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
