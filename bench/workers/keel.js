// The bench's keel-lock Worker (bundled from the packed package by bench/lib/workerd.mjs, run in
// local workerd through Miniflare). keel-lock's own DurableObjectLockStore over the LOCKS
// namespace — but the namespace handed to it is wrapped so every RPC to a LockDurableObject stub
// is counted and timed here, in the Worker (client side, like the Redis bench's counted ioredis
// client).
// The wrapper forwards every RPC method the store calls, the waiting pair (acquireOrWait,
// withdraw) included, so a waiting run() takes the object's hand-over path, and the shared pair
// (acquireShared, acquireSharedOrWait) that semaphore() handles call.
import { lock, semaphore, setLockStore, DurableObjectLockStore, LockDurableObject } from "keel-lock";
import { contend, firstRun, rpcMeter, uncontended } from "./shared.js";

export { LockDurableObject };

const rpc = rpcMeter([
  "acquire",
  "acquireOrWait",
  "acquireShared",
  "acquireSharedOrWait",
  "withdraw",
  "release",
  "extend",
  "isLocked",
  "remainingTime",
  "forceRelease",
]);

/** A namespace whose stubs count and time their RPC calls and forward them unchanged. */
function countingNamespace(ns) {
  return {
    idFromName: (name) => ns.idFromName(name),
    get: (id) => rpc.wrap(ns.get(id)),
  };
}

let ready = false;
function useStore(env) {
  if (!ready) {
    setLockStore(new DurableObjectLockStore(countingNamespace(env.LOCKS)));
    ready = true;
  }
}

const impl = {
  run: (key, fn, timeout) => lock(key, 30_000).run(fn, timeout ? { timeout } : undefined).then(([ran]) => ran),
  counts: rpc.counts,
  awaitingMs: rpc.awaitingMs,
};

/** semaphore(key, limit, 30000).run(fn): a fresh handle per run, as lock() above. */
const semaphoreImpl = (limit) => ({
  run: (key, fn, timeout) => semaphore(key, limit, 30_000).run(fn, timeout ? { timeout } : undefined).then(([ran]) => ran),
  counts: rpc.counts,
  awaitingMs: rpc.awaitingMs,
});

/**
 * keel-lock's LockDurableObject driven without keel-lock in the Worker: acquire RPC, fn, release
 * RPC on the stub, as the floor's client does. Set against keel-lock's run() (same objects, same
 * RPCs), it separates the client's share of a run() from the object's.
 */
const plainClient = (env) => ({
  async run(key, fn) {
    const stub = rpc.wrap(env.LOCKS.get(env.LOCKS.idFromName(key)));
    const owner = crypto.randomUUID();
    if (!(await stub.acquire(key, owner, 30_000))) return false;
    try {
      await fn();
    } finally {
      await stub.release(key, owner);
    }
    return true;
  },
  counts: rpc.counts,
  awaitingMs: rpc.awaitingMs,
});

export default {
  async fetch(request, env) {
    try {
      useStore(env);
      const url = new URL(request.url);
      const body = request.method === "POST" ? await request.json() : {};
      if (url.pathname === "/contend") return Response.json(await contend(impl, body));
      if (url.pathname === "/first") return Response.json(await firstRun(impl, body));
      if (url.pathname === "/uncontended") return Response.json(await uncontended(impl, body));
      if (url.pathname === "/semaphore-contend") return Response.json(await contend(semaphoreImpl(body.limit), body));
      if (url.pathname === "/semaphore-uncontended") return Response.json(await uncontended(semaphoreImpl(body.limit), body));
      if (url.pathname === "/uncontended-plain-client") return Response.json(await uncontended(plainClient(env), body));
      return new Response("not found", { status: 404 });
    } catch (e) {
      return Response.json({ error: `${e?.name}: ${e?.message}` }, { status: 500 });
    }
  },
};
