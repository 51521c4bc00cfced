// The memory store's JS face: its `LockStore` methods (each one call into the core's memory
// store, which checks the arguments), the hold metadata its wasm does not keep, and its `watch`.

import { OP_ACQUIRE, OP_ACQUIRE_SHARED, OP_EXTEND, OP_FORCE_RELEASE, OP_INSPECT, OP_IS_LOCKED, OP_RELEASE, OP_REMAINING_TIME } from "./protocol.js";
import { core } from "./core.js";
import { checkMetadata } from "./options.js";
import { handingOver, resolved, waitingFor } from "./waiters.js";

// The memory store's wasm keeps no metadata (the no-std builds leave it out: docs/wasm-size.md),
// so its JS face keeps it here: per store, `fence → [key, metadata]`. One counter per store
// draws every fence, so a fence names one hold of one key for good. An entry is filed in the
// turn its grant reaches the handle (a waiter's in the microtask its hand-over queues, which
// `inspect` waits behind) and swept as the store's rows are: when the map reaches twice the
// size its last sweep left (at least 64), the entries of holds no longer live go.
const memoryMetadata = new WeakMap();
const METADATA_SWEEP_FLOOR = 64;

/** Files `metadata` (if any) under `fence`, the grant of a hold of `key` on `store`. */
export function keepMemoryMetadata(store, key, fence, metadata) {
  if (metadata === undefined || !(fence >= 1)) return;
  let kept = memoryMetadata.get(store);
  if (kept === undefined) {
    kept = { said: new Map(), sweepAt: METADATA_SWEEP_FLOOR };
    memoryMetadata.set(store, kept);
  }
  kept.said.set(fence, [key, metadata]);
  if (kept.said.size < kept.sweepAt) return;
  const live = new Set();
  for (const k of new Set(Array.from(kept.said.values(), ([k]) => k))) {
    const flat = core.memoryCall(store, OP_INSPECT, k);
    for (let i = 0; i < flat.length; i += 2) live.add(flat[i]);
  }
  for (const f of kept.said.keys()) if (!live.has(f)) kept.said.delete(f);
  kept.sweepAt = Math.max(METADATA_SWEEP_FLOOR, 2 * kept.said.size);
}

// Every change to a memory store's holders is made by a call from the JS face, in this isolate,
// so the store reports to its subscribers as each happens: no timer, no polling. A grant of an
// exclusive hold is reported where it is made (its fence and metadata known there); an end is
// found by comparing the holds a subscriber heard of with the live ones after a call that may
// end one. An end that hands the key to a queued waiter is reported just before that waiter's
// grant, in the same turn, so `observe` reads the two as a hand-over. Expiry, `extend` and
// shared holds are not reported (the `LockStore.watch` contract).

// store → key → the subscribers of that key: { report, known: Set of reported held fences }.
const subscribers = new WeakMap();
// Subscribers on every memory store: while none, a grant or an end costs one comparison.
export const subscriptions = { count: 0 };

/** Calls a subscriber; one that throws is reported on the console and changes nothing. */
function report(subscriber, change) {
  try {
    subscriber.report(change);
  } catch (error) {
    console.error("keel-lock: a MemoryLockStore watch callback threw", error);
  }
}

/**
 * After a call that may have ended a hold of `key`: each hold a subscriber heard of that is no
 * longer live is reported ended — unless (`whenHandedOver`) a waiter of the key was woken and
 * not yet stepped, whose grant will report it. Answers the live holds (`inspect`'s flat list).
 */
function reportEnds(store, key, whenHandedOver) {
  const subscribed = subscribers.get(store)?.get(key);
  if (subscribed === undefined) return null;
  if (whenHandedOver && handingOver(store, key)) return null;
  const flat = core.memoryCall(store, OP_INSPECT, key);
  const live = new Set();
  for (let i = 0; i < flat.length; i += 2) live.add(flat[i]);
  for (const subscriber of subscribed) {
    for (const fence of Array.from(subscriber.known).sort((a, b) => a - b)) {
      if (live.has(fence)) continue;
      subscriber.known.delete(fence);
      if (!subscriber.stopped) report(subscriber, { fence, held: false });
    }
  }
  return flat;
}

/** `store` (a memory store) may have ended a hold of `key`: its subscribers hear of it. */
export function memoryEnded(store, key) {
  if (subscriptions.count !== 0) reportEnds(store, key, true);
}

/** `store` granted an exclusive hold of `key` under `fence`: its subscribers hear of it (ends first). */
export function memoryGranted(store, key, fence) {
  if (subscriptions.count !== 0 && fence >= 1) reportGrant(store, key, fence);
}

function reportGrant(store, key, fence) {
  const flat = reportEnds(store, key, false);
  if (flat === null) return;
  let remainingMs = -1;
  for (let i = 0; i < flat.length; i += 2) if (flat[i] === fence) remainingMs = flat[i + 1];
  if (remainingMs < 0) return; // already gone again
  const metadata = memoryMetadata.get(store)?.said.get(fence)?.[1] ?? null;
  for (const subscriber of subscribers.get(store).get(key)) {
    if (subscriber.known.has(fence)) continue;
    subscriber.known.add(fence);
    if (!subscriber.stopped) report(subscriber, { fence, held: true, metadata, remainingMs });
  }
}

/** `MemoryLockStore.watch(key, onChange)`: see `LockStore.watch`. Answers the function that stops. */
function subscribe(store, key, onChange) {
  // The core checks the key as every method's.
  const flat = core.memoryCall(store, OP_INSPECT, key);
  if (typeof onChange !== "function") {
    throw new TypeError(`MemoryLockStore.watch: onChange must be a function, got ${typeof onChange}`);
  }
  // A lone live hold is taken as the exclusive holder to report the end of.
  const subscriber = { report: onChange, known: new Set(flat.length === 2 && flat[0] >= 1 ? [flat[0]] : []), stopped: false };
  let byKey = subscribers.get(store);
  if (byKey === undefined) subscribers.set(store, (byKey = new Map()));
  let subscribed = byKey.get(key);
  if (subscribed === undefined) byKey.set(key, (subscribed = new Set()));
  subscribed.add(subscriber);
  subscriptions.count++;
  return () => {
    if (subscriber.stopped) return;
    subscriber.stopped = true;
    subscriptions.count--;
    subscribed.delete(subscriber);
    if (subscribed.size === 0 && byKey.get(key) === subscribed) byKey.delete(key);
  };
}

/**
 * Puts the `LockStore` methods on `MemoryLockStore`'s prototype, as class methods would be:
 * each is one call into the core's memory store (`core.memoryCall`), which checks the arguments.
 */
export function installMemoryStore(proto) {
  const methods = {
    // `metadata` defaulted: `length` stays the documented arguments', as a class would have it.
    acquire(key, owner, ttlMs, metadata = undefined) {
      if (metadata !== undefined) checkMetadata(metadata);
      const grant = core.memoryCall(this, OP_ACQUIRE, key, owner, ttlMs);
      if (grant !== false) {
        keepMemoryMetadata(this, key, grant.fence, metadata);
        memoryGranted(this, key, grant.fence);
      }
      return grant;
    },
    release(key, owner) {
      const released = core.memoryCall(this, OP_RELEASE, key, owner);
      memoryEnded(this, key);
      return released;
    },
    extend(key, owner, ttlMs) {
      return core.memoryCall(this, OP_EXTEND, key, owner, ttlMs);
    },
    isLocked(key) {
      return core.memoryCall(this, OP_IS_LOCKED, key);
    },
    remainingTime(key) {
      return core.memoryCall(this, OP_REMAINING_TIME, key);
    },
    forceRelease(key) {
      const released = core.memoryCall(this, OP_FORCE_RELEASE, key);
      memoryEnded(this, key);
      return released;
    },
    acquireShared(key, owner, ttlMs, weight, limit, metadata = undefined) {
      if (metadata !== undefined) checkMetadata(metadata);
      const answer = core.memoryCall(this, OP_ACQUIRE_SHARED, key, owner, ttlMs, weight, limit);
      if (typeof answer === "number") return { heldLimit: answer };
      if (answer !== false) keepMemoryMetadata(this, key, answer.fence, metadata);
      return answer;
    },
    acquireMany(keys, owners, ttlMs, metadata = undefined) {
      if (!Array.isArray(keys) || !Array.isArray(owners) || keys.length !== owners.length) {
        throw new TypeError("MemoryLockStore.acquireMany: keys and owners must be arrays of one length");
      }
      if (metadata !== undefined && (!Array.isArray(metadata) || metadata.length !== keys.length)) {
        throw new TypeError("MemoryLockStore.acquireMany: metadata must be an array as long as keys");
      }
      // Synchronous, so within one turn of the isolate: nothing runs between the takes and
      // (a key refused, or bad) the release of those taken, so nobody sees part of the set —
      // subscribers neither: they hear of the set's grants once all are taken.
      const grants = [];
      try {
        for (let i = 0; i < keys.length; i++) {
          if (metadata?.[i] !== undefined) checkMetadata(metadata[i]);
          const grant = core.memoryCall(this, OP_ACQUIRE, keys[i], owners[i], ttlMs);
          if (grant === false) break;
          keepMemoryMetadata(this, keys[i], grant.fence, metadata?.[i]);
          grants.push(grant);
        }
      } finally {
        if (grants.length < keys.length) for (let i = grants.length - 1; i >= 0; i--) core.memoryCall(this, OP_RELEASE, keys[i], owners[i]);
      }
      if (grants.length < keys.length) return false;
      for (let i = 0; i < keys.length; i++) memoryGranted(this, keys[i], grants[i].fence);
      return grants;
    },
    // A promise, read after the hand-overs already queued have reached their handles (and
    // filed their metadata).
    inspect(key) {
      return resolved.then(() => {
        const flat = core.memoryCall(this, OP_INSPECT, key);
        const said = memoryMetadata.get(this)?.said;
        const holders = [];
        for (let i = 0; i < flat.length; i += 2) {
          const fence = flat[i] || null;
          holders.push({ metadata: said?.get(fence)?.[1] ?? null, fence, remainingMs: flat[i + 1] });
        }
        holders.sort((a, b) => (a.fence ?? 0) - (b.fence ?? 0));
        // The store's queue is joined only by this layer's handles, and each waiter is known.
        return { holders, waiting: waitingFor(this, key) };
      });
    },
    // Resolves once subscribed, as a store across the network does.
    watch(key, onChange) {
      try {
        return Promise.resolve(subscribe(this, key, onChange));
      } catch (error) {
        return Promise.reject(error);
      }
    },
  };
  for (const name of Object.keys(methods)) {
    Object.defineProperty(proto, name, { value: methods[name], writable: true, configurable: true });
  }
}
