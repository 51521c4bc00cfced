// keel-lock on Cloudflare Workers: "charge invoice 42" exactly once, however many requests ask.
//
//   POST /charge            {"mode": "immediate"}  try once; answers {"charged": true|false}
//   POST /charge            {"mode": "wait"}       wait for the lock, then charge
//   GET  /ledger?run=ID     how many charges ran, and the most that were ever inside at once
//
// Run locally with `wrangler dev` (top-level wrangler.toml) or `make demo`.
import { DurableObject } from "cloudflare:workers";
import { lock, setLockStore, DurableObjectLockStore, LockDurableObject } from "keel-lock";

// The lock rows live in this Durable Object class; the Worker must export it.
export { LockDurableObject };

/** Books charges per demo run and watches for overlap (a second Durable Object). */
export class Ledger extends DurableObject {
  runs = new Map();
  #run(id) {
    if (!this.runs.has(id)) this.runs.set(id, { charges: 0, refused: 0, inside: 0, maxInside: 0 });
    return this.runs.get(id);
  }
  enter(id) {
    const r = this.#run(id);
    r.charges += 1;
    r.inside += 1;
    r.maxInside = Math.max(r.maxInside, r.inside);
  }
  exit(id) {
    this.#run(id).inside -= 1;
  }
  refuse(id) {
    this.#run(id).refused += 1;
  }
  stats(id) {
    return this.#run(id);
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let storeReady = false;

async function charge(env, { run = "curl", mode = "immediate", expected = 1, payMs = 25 }) {
  if (!storeReady) {
    // Once per isolate, inside a handler (Workers forbid I/O objects and randomness at load).
    setLockStore(new DurableObjectLockStore(env.LOCKS));
    storeReady = true;
  }
  const ledger = env.LEDGER.get(env.LEDGER.idFromName("ledger"));
  const started = Date.now();
  let enteredAt = null;
  const [charged] = await lock("invoice:42", 30_000).run(
    async () => {
      enteredAt = Date.now();
      await ledger.enter(run);
      if (mode === "wait") {
        await sleep(payMs); // the payment provider call
      } else {
        // Hold the lock for the "payment call" until every other request has been turned
        // away (at most 5 s), so the demo's outcome never depends on scheduling luck.
        const until = Date.now() + 5_000;
        do await sleep(Math.min(payMs, 20));
        while ((await ledger.stats(run)).refused < expected - 1 && Date.now() < until);
      }
      await ledger.exit(run);
    },
    mode === "wait" ? { timeout: 60_000, retryDelay: 5 } : undefined,
  );
  if (!charged) await ledger.refuse(run);
  return {
    charged,
    waitedMs: enteredAt === null ? null : enteredAt - started,
    totalMs: Date.now() - started,
  };
}

export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    try {
      if (url.pathname === "/charge" && request.method === "POST") {
        const body = await request.text();
        return Response.json(await charge(env, body ? JSON.parse(body) : {}));
      }
      if (url.pathname === "/ledger") {
        const ledger = env.LEDGER.get(env.LEDGER.idFromName("ledger"));
        return Response.json(await ledger.stats(url.searchParams.get("run") ?? "curl"));
      }
      return new Response(
        "keel-lock demo. Try:\n  curl -X POST localhost:8787/charge\n  curl -X POST localhost:8787/charge -d '{\"mode\":\"wait\"}'\n  curl localhost:8787/ledger\n",
      );
    } catch (e) {
      return Response.json({ error: `${e?.name}: ${e?.message}` }, { status: 500 });
    }
  },
};
