// The Durable Object floor: the same lock semantics as keel-lock's LockDurableObject written in
// plain JS for this bench (no wasm, no keel-lock import): one object per key (idFromName(key)),
// a SQLite row key → (owner, expiresAt), expired = absent, owner-checked release; the client
// polls like keel-lock (try, sleep retryDelay = 50 ms, try again until the timeout). It takes no
// fence and sets no alarm (keel-lock's object keeps one at or before the earliest expiry, to
// delete expired rows), so it is a floor.
import { DurableObject } from "cloudflare:workers";
import { contend, firstRun, rpcMeter, uncontended } from "./shared.js";

export class FloorLockObject extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.sql.exec("CREATE TABLE IF NOT EXISTS locks (key TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_at INTEGER NOT NULL)");
  }
  acquire(key, owner, ttlMs) {
    const now = Date.now();
    const row = this.sql.exec("SELECT expires_at FROM locks WHERE key = ?", key).toArray()[0];
    if (row !== undefined && row.expires_at > now) return false;
    this.sql.exec("INSERT OR REPLACE INTO locks (key, owner, expires_at) VALUES (?, ?, ?)", key, owner, now + ttlMs);
    return true;
  }
  release(key, owner) {
    const now = Date.now();
    return this.sql.exec("DELETE FROM locks WHERE key = ? AND owner = ? AND expires_at > ? RETURNING key", key, owner, now).toArray().length > 0;
  }
}

// Every RPC to a floor object is counted and timed, as keel.js does for keel-lock's objects.
const rpc = rpcMeter(["acquire", "release"]);
const stubFor = (env, key) => rpc.wrap(env.FLOOR_LOCKS.get(env.FLOOR_LOCKS.idFromName(key)));

async function run(env, key, fn, timeout = 0, retryDelay = 50) {
  const stub = stubFor(env, key);
  const owner = crypto.randomUUID();
  const giveUpAt = Date.now() + timeout;
  for (;;) {
    if (await stub.acquire(key, owner, 30_000)) break;
    const now = Date.now();
    if (now >= giveUpAt) return false;
    await new Promise((r) => setTimeout(r, Math.min(retryDelay, giveUpAt - now)));
  }
  try {
    await fn();
  } finally {
    await stub.release(key, owner);
  }
  return true;
}

export default {
  async fetch(request, env) {
    try {
      const impl = { run: (key, fn, timeout) => run(env, key, fn, timeout), counts: rpc.counts, awaitingMs: rpc.awaitingMs };
      const url = new URL(request.url);
      const body = request.method === "POST" ? await request.json() : {};
      if (url.pathname === "/contend") return Response.json(await contend(impl, body));
      if (url.pathname === "/first") return Response.json(await firstRun(impl, body));
      if (url.pathname === "/uncontended") return Response.json(await uncontended(impl, body));
      return new Response("not found", { status: 404 });
    } catch (e) {
      return Response.json({ error: `${e?.name}: ${e?.message}` }, { status: 500 });
    }
  },
};
