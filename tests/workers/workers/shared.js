// Shared by both test Workers (each bundles its own copy: two scripts, two isolates).
import { DurableObject } from "cloudflare:workers";
import { campaign, inspect, lock, observe, setLockStore, DurableObjectLockStore } from "keel-lock";

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** RPC calls this isolate's store made to lock objects: key -> { method: count }. */
const rpcs = new Map();
export const rpcCounts = (key) => rpcs.get(key) ?? {};
/** The arguments of the last RPC call of each method per key: key -> { method: [...args] }. */
const lastArgs = new Map();
export const rpcArgs = (key) => lastArgs.get(key) ?? {};

/**
 * The LOCKS namespace as the store sees it, counting every RPC call per key and method and
 * keeping the last one's arguments. The store passes `idFromName`'s answer to `get` untouched,
 * so the id can carry the key along.
 */
function countingNamespace(namespace) {
  return {
    idFromName: (name) => ({ name, id: namespace.idFromName(name) }),
    get: ({ name, id }) => {
      const stub = namespace.get(id);
      return new Proxy({}, {
        get: (_, method) => (...args) => {
          const counts = rpcs.get(name) ?? {};
          counts[method] = (counts[method] ?? 0) + 1;
          rpcs.set(name, counts);
          lastArgs.set(name, { ...lastArgs.get(name), [method]: args });
          return stub[method](...args);
        },
      });
    },
  };
}

let store;
/** The isolate's store, made on first use (never at module load). */
export function useStore(env) {
  if (!store) {
    store = new DurableObjectLockStore(countingNamespace(env.LOCKS));
    setLockStore(store);
  }
  return store;
}

/**
 * Overlap counter: a second Durable Object that sees every critical section enter and exit.
 * `weight` counts a section as that many (a semaphore's permits); `writer` marks an exclusive
 * section, which must find nobody inside and keep everyone out (`clashes` counts breaches).
 */
export class Counter extends DurableObject {
  inside = 0;
  maxInside = 0;
  entered = 0;
  refused = 0;
  writers = 0;
  clashes = 0;
  fences = [];
  order = [];
  enter(fence = null, label = null, weight = 1, writer = false) {
    if (this.writers > 0 || (writer && this.inside > 0)) this.clashes += 1;
    if (writer) this.writers += 1;
    this.fences.push(fence);
    if (label !== null) this.order.push(label);
    this.inside += weight;
    this.entered += 1;
    this.maxInside = Math.max(this.maxInside, this.inside);
  }
  exit(weight = 1, writer = false) {
    if (writer) this.writers -= 1;
    this.inside -= weight;
  }
  refuse() {
    this.refused += 1;
  }
  stats() {
    const { inside, maxInside, entered, refused, fences, order, clashes } = this;
    return { inside, maxInside, entered, refused, fences, order, clashes };
  }
}

/**
 * A protected resource that checks fences: it remembers the highest fence it accepted and
 * refuses a write carrying a lower one (a holder that paused past its TTL); an equal fence is
 * the same hold writing again.
 */
export class Ledger extends DurableObject {
  lastFence = 0;
  value = null;
  write(value, fence) {
    if (!(fence >= this.lastFence)) return { accepted: false, lastFence: this.lastFence };
    this.lastFence = fence;
    this.value = value;
    return { accepted: true, lastFence: fence };
  }
  read() {
    return { value: this.value, lastFence: this.lastFence };
  }
}

/**
 * One contender. `immediate`: the holder stays inside until every other contender has been
 * refused (so the result does not depend on timing); `wait`: everyone waits its turn.
 */
export async function contend(env, { key, mode, n, runId, holdMs = 5, label = null, timeout = 120_000 }) {
  useStore(env);
  const counter = env.COUNTER.get(env.COUNTER.idFromName(runId));
  const l = lock(key, 30_000);
  const started = Date.now();
  let entered = null;
  let fence = null;
  const task = async (context) => {
    entered = Date.now();
    fence = context.fence;
    await counter.enter(fence, label);
    if (mode === "immediate") {
      const deadline = Date.now() + 20_000;
      while ((await counter.stats()).refused < n - 1 && Date.now() < deadline) await sleep(10);
    } else {
      await sleep(holdMs);
    }
    await counter.exit();
  };
  const options = mode === "wait" ? { timeout, retryDelay: 5 } : undefined;
  const [ran] = await l.run(task, options);
  if (!ran) await counter.refuse();
  return { ran, fence, entered, waitedMs: entered === null ? null : entered - started, totalMs: Date.now() - started };
}

export async function stats(env, runId) {
  return env.COUNTER.get(env.COUNTER.idFromName(runId)).stats();
}

/** The limit of read locks: 2^32 - 1, "no limit". */
export const READ_LIMIT = 4294967295;

/**
 * One contender for shared holds, through the store's own methods (the JS lock API has no
 * semaphore yet): `kind` "permit" takes `weight` of `limit`, "read" a read lock, "write" the key
 * alone. It waits in the key's queue, enters the Counter weighted, holds `holdMs`, releases.
 */
export async function contendShared(env, { key, runId, kind = "permit", weight = 1, limit = 1, holdMs = 20, label = null, timeout = 60_000 }) {
  const store = useStore(env);
  const counter = env.COUNTER.get(env.COUNTER.idFromName(runId));
  const owner = `o-${crypto.randomUUID()}`;
  const started = Date.now();
  const writer = kind === "write";
  const [w, l] = kind === "read" ? [1, READ_LIMIT] : [weight, limit];
  const grant = writer
    ? await store.acquireOrWait(key, owner, 30_000, timeout, 10)
    : await store.acquireSharedOrWait(key, owner, 30_000, w, l, timeout, 10);
  if (!grant || grant.fence === undefined) {
    await counter.refuse();
    return { ran: false, grant };
  }
  const inside = writer ? 1 : w;
  await counter.enter(grant.fence, label, inside, writer);
  await sleep(holdMs);
  await counter.exit(inside, writer);
  const released = await store.release(key, owner);
  return { ran: true, fence: grant.fence, released, waitedMs: Date.now() - started };
}

/**
 * One contender for several keys at once, `lock(keys).run(fn)` on this isolate's store: inside,
 * it enters each key's own Counter (`runId:key`) as a writer, so two holders of one key at once
 * show up as that key's clashes. Answers whether it ran, and the fence of each key.
 */
export async function contendMulti(env, { keys, runId, holdMs = 5, timeout = 60_000 }) {
  useStore(env);
  const counters = keys.map((key) => env.COUNTER.get(env.COUNTER.idFromName(`${runId}:${key}`)));
  const [ran, fences] = await lock(keys, 30_000).run(
    async ({ fences }) => {
      for (const counter of counters) await counter.enter(null, null, 1, true);
      await sleep(holdMs);
      for (const counter of counters) await counter.exit(1, true);
      return fences;
    },
    { timeout, retryDelay: 10 },
  );
  return { ran, fences };
}

/**
 * A campaign for `key` from this isolate, with `metadata`: once leading, it enters the run's
 * Counter as an exclusive holder labelled with its metadata, waits until `inspect` shows
 * `waitFor` callers queued behind it, stays `holdMs` more, leaves the Counter, and returns,
 * which ends its leadership. Answers its fence.
 */
export async function campaignFor(env, { key, runId, metadata, waitFor = 0, holdMs = 0, ttlMs = 10_000 }) {
  useStore(env);
  const counter = env.COUNTER.get(env.COUNTER.idFromName(runId));
  const fence = await campaign(
    key,
    async ({ fence }) => {
      await counter.enter(fence, metadata, 1, true);
      const deadline = Date.now() + 20_000;
      while ((await inspect(key)).waiting < waitFor && Date.now() < deadline) await sleep(10);
      await sleep(holdMs);
      await counter.exit(1, true);
      return fence;
    },
    { ttlMs, metadata },
  );
  return { fence };
}

/**
 * `observe(key)` from this isolate, every `intervalMs`, until the leader's metadata is `until`
 * (or `limitMs` passes): answers every leadership change it saw, in order.
 */
export async function observeLeaders(env, { key, until, count = Infinity, ready, intervalMs = 20, limitMs = 30_000 }) {
  useStore(env);
  const seen = [];
  const stop = new AbortController();
  const timer = setTimeout(() => stop.abort(), limitMs);
  try {
    for await (const leader of observe(key, { intervalMs, signal: stop.signal })) {
      seen.push(leader);
      // Subscribed and looked: say so by holding `ready`, for a test to wait on.
      if (seen.length === 1 && ready !== undefined) await lock(ready, limitMs).acquire();
      if ((until !== undefined && leader?.metadata === until) || seen.length >= count) break;
    }
  } finally {
    clearTimeout(timer);
  }
  return { seen };
}
