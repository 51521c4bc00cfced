// Worker C: keel-lock/etcd inside workerd, calling an etcd cluster's JSON gateway through the
// Worker's own fetch. Every request makes its own store (a Worker may not carry one request's
// open streams and timers into another), counts the store's requests by gateway path, and reports
// each of its critical sections to a ledger (an HTTP server the test runs) that sees every
// contender's enter and exit, from this Worker and from Node alike.
import { lock, onLockEvent, setLockStore } from "keel-lock";
import { etcdLockStore } from "keel-lock/etcd";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** How this isolate's grants came (`via`), per key, over every request: key -> { via: count }. */
const grants = new Map();
let listening = false;
function countGrants() {
  if (listening) return;
  listening = true;
  onLockEvent((event) => {
    if (event.type !== "granted") return;
    const counts = grants.get(event.key) ?? {};
    counts[event.via] = (counts[event.via] ?? 0) + 1;
    grants.set(event.key, counts);
  });
}

/** A store over `endpoints` whose requests are counted by path (`/v3/kv/txn`, `/v3/watch`, …). */
function countedStore(endpoints, options) {
  const requests = {};
  const fetchCounted = (url, init) => {
    const path = new URL(url).pathname;
    requests[path] = (requests[path] ?? 0) + 1;
    return fetch(url, init);
  };
  return { store: etcdLockStore({ ...options, endpoints, fetch: fetchCounted }), requests };
}

async function ledger(url, what, body) {
  const res = await fetch(`${url}/${what}`, { method: "POST", body: JSON.stringify(body) });
  if (!res.ok) throw new Error(`ledger ${what}: HTTP ${res.status}`);
  return res.json();
}

/**
 * `runs` contenders for `key` at once, each `lock(key, ttl).run(fn, { timeout })`; inside, `fn`
 * tells the ledger it entered (with its fence), stays `holdMs`, and tells it it left. Answers
 * how many ran and the store's requests by path (`/grants` tells how the grants came).
 */
async function contend({ endpoints, key, runs, ledgerUrl, label, ttl = 30_000, holdMs = 5, timeout = 120_000, safetyNetMs }) {
  const { store, requests } = countedStore(endpoints, { safetyNetMs });
  setLockStore(store);
  countGrants();
  const pending = [];
  for (let i = 0; i < runs; i++) {
    pending.push(
      lock(key, ttl).run(
        async ({ fence }) => {
          await ledger(ledgerUrl, "enter", { fence, who: `${label}:${i}` });
          await sleep(holdMs);
          await ledger(ledgerUrl, "exit", { who: `${label}:${i}` });
        },
        { timeout },
      ),
    );
  }
  const results = await Promise.all(pending);
  return { ran: results.filter(([ran]) => ran).length, requests };
}

/**
 * The store's own wait: `acquireOrWait` on a key the test holds from Node; the test releases it
 * once `inspect` shows this waiter queued. Answers the grant and the requests the wait cost.
 */
async function wait({ endpoints, key, owner, ttl = 30_000, waitMs = 60_000, safetyNetMs }) {
  const { store, requests } = countedStore(endpoints, { safetyNetMs });
  const grant = await store.acquireOrWait(key, owner, ttl, waitMs, 50);
  const released = grant ? await store.release(key, owner) : null;
  return { grant, released, requests };
}

export default {
  async fetch(request) {
    const url = new URL(request.url);
    try {
      if (url.pathname === "/contend") return Response.json(await contend(await request.json()));
      if (url.pathname === "/grants") return Response.json(grants.get((await request.json()).key) ?? {});
      if (url.pathname === "/wait") return Response.json(await wait(await request.json()));
      return Response.json({ error: "not found" }, { status: 404 });
    } catch (error) {
      return Response.json({ error: `${error?.name}: ${error?.message}` }, { status: 500 });
    }
  },
};
