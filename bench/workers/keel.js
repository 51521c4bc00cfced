// The bench's keel-lock Worker (bundled from the packed package by bench/lib/workerd.mjs, run in
// local workerd through Miniflare). keel-lock's own DurableObjectLockStore over the LOCKS
// namespace — but the namespace handed to it is wrapped so every RPC to a LockDurableObject stub
// is counted here, in the Worker (client side, like the Redis bench's counted ioredis client).
// The wrapper forwards every RPC method the store calls, the waiting pair (acquireOrWait,
// withdraw) included, so a waiting run() takes the object's hand-over path.
import { lock, setLockStore, DurableObjectLockStore, LockDurableObject } from "keel-lock";
import { contend, firstRun } from "./shared.js";

export { LockDurableObject };

const RPC_METHODS = ["acquire", "acquireOrWait", "withdraw", "release", "extend", "isLocked", "remainingTime", "forceRelease"];
const counts = Object.fromEntries(RPC_METHODS.map((m) => [m, 0]));

/** A namespace whose stubs count their RPC calls and forward them unchanged. */
function countingNamespace(ns) {
  return {
    idFromName: (name) => ns.idFromName(name),
    get(id) {
      const stub = ns.get(id);
      const wrapped = {};
      for (const m of RPC_METHODS) {
        wrapped[m] = (...args) => {
          counts[m] += 1;
          return stub[m](...args);
        };
      }
      return wrapped;
    },
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
  counts: () => ({ ...counts }),
};

export default {
  async fetch(request, env) {
    try {
      useStore(env);
      const url = new URL(request.url);
      const body = request.method === "POST" ? await request.json() : {};
      if (url.pathname === "/contend") return Response.json(await contend(impl, body));
      if (url.pathname === "/first") return Response.json(await firstRun(impl, body));
      return new Response("not found", { status: 404 });
    } catch (e) {
      return Response.json({ error: `${e?.name}: ${e?.message}` }, { status: 500 });
    }
  },
};
