// A JS Worker on the packed npm package (its `workerd` build), speaking the Rust example's
// protocol: `POST /charge` takes keel-lock's lock through the LOCKS namespace and books into
// the Rust example's Ledger Durable Object (LEDGER, over fetch). Bound to the same namespaces as
// the Rust Worker, it contends with it for the same keys.
//
// It also exports keel-lock's LockDurableObject, so a test can make this script the one that
// serves the lock class, with the Rust Worker bound to it.
import { inspect, lock, setLockStore, DurableObjectLockStore, LockDurableObject } from "keel-lock";

export { LockDurableObject };

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let storeReady = false;
function useStore(env) {
  if (!storeReady) {
    setLockStore(new DurableObjectLockStore(env.LOCKS));
    storeReady = true;
  }
}

async function book(env, what, run, fence) {
  const stub = env.LEDGER.get(env.LEDGER.idFromName("ledger"));
  const query = new URLSearchParams({ run, ...(fence == null ? {} : { fence: String(fence) }) });
  const res = await stub.fetch(`https://ledger/${what}?${query}`, { method: "POST" });
  if (res.status !== 200) throw new Error(`ledger ${what}: HTTP ${res.status}`);
  return res.json();
}

async function charge(env, { run = "curl", mode = "immediate", key = "invoice:42", payMs = 25, expected = 1, metadata }) {
  useStore(env);
  const started = Date.now();
  let enteredAt = null;
  const [charged, fence] = await lock(key, 30_000).run(
    async ({ fence }) => {
      enteredAt = Date.now();
      await book(env, "enter", run, fence);
      if (mode === "wait") {
        await sleep(payMs);
      } else {
        const until = Date.now() + 5_000;
        do await sleep(Math.min(payMs, 20));
        while ((await book(env, "stats", run)).refused + 1 < expected && Date.now() < until);
      }
      await book(env, "exit", run);
      return fence;
    },
    { ...(mode === "wait" ? { timeout: 60_000, retryDelay: 5 } : {}), ...(metadata === undefined ? {} : { metadata }) },
  );
  if (!charged) await book(env, "refuse", run);
  return { charged, fence: charged ? fence : null, waitedMs: enteredAt === null ? null : enteredAt - started, totalMs: Date.now() - started, worker: "js" };
}

async function route(request, env) {
  const url = new URL(request.url);
  const body = request.method === "POST" ? await request.json() : {};
  switch (url.pathname) {
    case "/charge":
      return charge(env, body);
    case "/inspect": {
      useStore(env);
      const { holders, waiting } = await inspect(body.key);
      return { holders, waiting };
    }
    case "/hold": {
      // Takes the key and keeps it (no release): for the row-format test across restarts.
      useStore(env);
      return { acquired: await lock(body.key, body.ttl).acquire() };
    }
    case "/state": {
      useStore(env);
      const l = lock(body.key);
      const snapshot = await env.LOCKS.get(env.LOCKS.idFromName(body.key)).snapshot();
      return { isLocked: await l.isLocked(), remaining: await l.getRemainingTime(), rows: snapshot.rows, waiting: snapshot.waiting };
    }
  }
  return null;
}

export default {
  async fetch(request, env) {
    try {
      const out = await route(request, env);
      if (out === null) return new Response("not found", { status: 404 });
      return Response.json(out);
    } catch (e) {
      return Response.json({ error: `${e?.name}: ${e?.message}` }, { status: 500 });
    }
  },
};
