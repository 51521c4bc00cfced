// The store `lock()` binds its handles to, the spare slot, and the slots of dropped handles.

import { OP_FORCE_RELEASE, OP_IS_LOCKED, OP_REMAINING_TIME } from "./protocol.js";
import { core } from "./core.js";

/** What only the package's factories pass to the handles' constructors. */
export const BY_FACTORY = Symbol("keel-lock internal");

// The store lock() binds to: { object, binding, memory } for the memory store; for a JS store
// also the object's methods, read once. null: not read since the store was set.
let bound = null;

/** The store `lock()` binds to now. */
export function boundStore() {
  return bound ?? bind();
}

function bind() {
  const object = core.getLockStore();
  const binding = core.currentBinding();
  bound = binding.memory
    ? { object, binding, memory: true }
    : {
        object,
        binding,
        memory: false,
        acquire: object.acquire,
        acquireOrWait: object.acquireOrWait,
        acquireShared: object.acquireShared,
        acquireSharedOrWait: object.acquireSharedOrWait,
        withdraw: object.withdraw,
        release: object.release,
        extend: object.extend,
        [OP_IS_LOCKED]: object.isLocked,
        [OP_REMAINING_TIME]: object.remainingTime,
        [OP_FORCE_RELEASE]: object.forceRelease,
      };
  return bound;
}

export function setLockStore(store) {
  core.setLockStore(store);
  bound = null;
}

export function getLockStore() {
  return core.getLockStore();
}

// The spare: the last slot a handle let go of idle, which the core keeps open (`id`; 0: none),
// and the key, TTL, store and limit of that handle, with the permits its core lock was last
// given (undefined: not known). The next handle on the same takes that slot as it is, without a
// call into the wasm or passing the key again; the core closes a spare not taken when the next
// slot goes idle, so only the last one is ever named here.
export const spare = { id: 0, key: undefined, ttl: 0, store: null, limit: 0, permits: undefined };

/** A handle dropped while its slot lives (it holds, or knows its hold lost) frees the slot. */
export const closeOnDrop =
  typeof FinalizationRegistry === "function"
    ? new FinalizationRegistry((id) => core.closeSlot(id, true))
    : { register() {}, unregister() {} };
