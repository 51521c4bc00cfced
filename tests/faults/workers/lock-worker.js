// The Worker of the fault suite's Workers scenarios (tests/faults/workers.js). Every request is
// one lock operation of a client driven from Node; a hold is carried between requests (and
// between Worker scripts) as its `serialize()` string. Bundled by wrangler from the packed
// package, once; each Worker script of a run is a copy of it with its own isolate.
//
// Bindings (set per script by the runner):
//   STORE        "do": DurableObjectLockStore over LOCKS; "d1": keel-lock/sql over the D1 binding DB
//   VARIANT      "correct", or a deliberately broken store wrapper (broken.js):
//                  owner-blind    release frees the key whoever holds it (forceRelease)
//                  no-expiry      every lease is taken and extended for 2^31 - 1 ms
//                  fence-reuse    this isolate counts fences itself (other isolates reuse them)
//                  limit-blind    a semaphore's permits are taken under a limit one larger than
//                                 the caller's
//                  writer-shares  a writer's hold is taken as one more reader's
//                  partial-set    a set of keys taken in one step (acquireMany; on the Durable
//                                 Object store, which has none, the variant adds it) takes its
//                                 first key only, and answers a grant for every key
//                  two-leaders    a third of the acquires of a held key (refused, or about to
//                                 wait) are answered with a grant nobody took
//   ERROR_RATE   share of D1 calls (statements and batches) that fail at the binding: half before
//                they reach D1, half after they ran (the answer is lost)
//   SEED         seeds this script's failure rolls and the two-leaders variant's
//
// Routes (POST, JSON; 200 with the answer, 500 with { error } when a call threw):
//   /setup     { }                           creates the D1 table (through the binding as is)
//   /acquire   { primitive, key, keys, ttlMs, timeout, permits, limit, mode }
//              primitive "lock" (default): lock(key); "semaphore": semaphore(key, limit) taking
//              `permits`; "rw": readLock(key) (mode "read") or writeLock(key); "multi":
//              lock(keys)               → { ok, fence, fences (multi: l.fences), serialized }
//   /extend    { serialized, ttlMs }         → { ok, serialized (the hold as extended) }  (ok false: LockNotHeldError)
//   /release   { serialized }                → { ok }
//   /held      { key }                       → { held }  (the store's isLocked)
//   /stranger  { op, key, ttlMs }            a fresh owner's release/extend → { ok }
//   /write     { key, fence }                the fenced resource → { accepted }
//   /reset     { key }                       resets the key's lock object (in-memory state lost)
//   /observe   { key, windowMs, intervalMs } what observe(key) reports for `windowMs`, streamed as
//              it reports: one JSON line per report, { fence } (fence null while nobody leads),
//              then { end: true }, or { error } when the observation failed
// Every hold (a semaphore's permits, a read lock, a set of keys included) travels as its
// serialize() string: restoreLock gives back a semaphore, a read lock or a set.
import { DurableObject } from "cloudflare:workers";
import {
  lock,
  semaphore,
  readLock,
  writeLock,
  observe,
  restoreLock,
  setLockStore,
  DurableObjectLockStore,
  LockDurableObject as PackagedLockDurableObject,
  LockNotHeldError,
} from "keel-lock";
import { databaseLockStore } from "keel-lock/sql";
import { brokenStore } from "./broken.js";
import { generator } from "./random.js";

/** The package's lock object, plus a reset: in-memory state (the waiting queue) and open calls go, storage stays. */
export class LockDurableObject extends PackagedLockDurableObject {
  reset() {
    this.ctx.abort(new Error("reset by the fault suite"));
  }
}

/**
 * The protected resource, one object per key: keeps the highest fence written in its SQLite
 * storage (so it outlives a restart) and refuses a lower one.
 */
export class FencedResource extends DurableObject {
  write(fence) {
    const sql = this.ctx.storage.sql;
    sql.exec("CREATE TABLE IF NOT EXISTS last_fence (id INTEGER PRIMARY KEY, fence INTEGER NOT NULL)");
    const row = sql.exec("SELECT fence FROM last_fence WHERE id = 1").toArray()[0];
    if (row && fence < row.fence) return false;
    sql.exec("INSERT INTO last_fence (id, fence) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET fence = excluded.fence", fence);
    return true;
  }
}

/** A D1 binding whose statements and batches fail at `rate`: half before reaching D1, half after running. */
function failingD1(db, rate, random) {
  const attempt = async (what, run) => {
    const roll = random();
    if (roll < rate / 2) throw new Error(`injected: D1 ${what} failed before reaching the database`);
    const answer = await run();
    if (roll < rate) throw new Error(`injected: D1 ${what} ran, and the answer was lost`);
    return answer;
  };
  // The binding's own statement behind each wrapper, for batch.
  const inner = new WeakMap();
  const statement = (stmt) => {
    const wrapped = {
      bind: (...params) => statement(stmt.bind(...params)),
      first: (...args) => attempt("first", () => stmt.first(...args)),
      run: () => attempt("run", () => stmt.run()),
      all: () => attempt("all", () => stmt.all()),
      raw: (...args) => attempt("raw", () => stmt.raw(...args)),
    };
    inner.set(wrapped, stmt);
    return wrapped;
  };
  return {
    prepare: (sql) => statement(db.prepare(sql)),
    // One batch is one call (one round trip, one transaction): it fails whole, like a statement.
    batch: (statements) => attempt("batch", () => db.batch(statements.map((s) => inner.get(s)))),
  };
}

let store = null;
/** This isolate's store, made on its first request (never at module load). */
function storeFor(env) {
  if (store) return store;
  let inner;
  if (env.STORE === "do") {
    inner = new DurableObjectLockStore(env.LOCKS);
  } else if (env.STORE === "d1") {
    const rate = Number(env.ERROR_RATE ?? 0);
    const db = rate > 0 ? failingD1(env.DB, rate, generator(Number(env.SEED ?? 1))) : env.DB;
    inner = databaseLockStore(db, { driver: "d1" });
  } else {
    throw new Error(`unknown STORE ${env.STORE}`);
  }
  store = brokenStore(inner, env.VARIANT ?? "correct", { random: generator(Number(env.SEED ?? 1) * 7919 + 1) });
  setLockStore(store);
  return store;
}

const token = () => Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, "0")).join("");

async function route(path, body, env) {
  switch (path) {
    case "/setup":
      if (env.STORE === "d1") await databaseLockStore(env.DB, { driver: "d1" }).createTable();
      return { ok: true };
    case "/acquire": {
      storeFor(env);
      const l = handleOf(body);
      const options = body.timeout > 0 ? { timeout: body.timeout, retryDelay: 10 } : { timeout: 0 };
      if (body.permits !== undefined) options.permits = body.permits;
      const ok = await l.acquire(options);
      return {
        ok,
        fence: ok ? l.fence : null,
        fences: ok && body.primitive === "multi" ? l.fences : null,
        serialized: ok ? l.serialize() : null,
      };
    }
    case "/extend": {
      storeFor(env);
      try {
        const l = restoreLock(body.serialized);
        await l.extend(body.ttlMs);
        return { ok: true, serialized: l.serialize() };
      } catch (error) {
        if (error instanceof LockNotHeldError) return { ok: false };
        throw error;
      }
    }
    case "/release":
      storeFor(env);
      return { ok: await restoreLock(body.serialized).release() };
    case "/held":
      return { held: (await storeFor(env).isLocked(body.key)) === true };
    case "/stranger": {
      const s = storeFor(env);
      const owner = token();
      const answer = body.op === "release" ? await s.release(body.key, owner) : await s.extend(body.key, owner, body.ttlMs);
      return { ok: answer === true };
    }
    case "/write":
      return { accepted: await env.RESOURCE.get(env.RESOURCE.idFromName(body.key)).write(body.fence) };
    case "/reset":
      await env.LOCKS.get(env.LOCKS.idFromName(body.key)).reset().catch(() => {});
      return { ok: true };
    case "/observe":
      storeFor(env);
      return observed(body);
  }
  return null;
}

/** The handle an /acquire asks for. */
function handleOf({ primitive = "lock", key, keys, ttlMs, limit, mode }) {
  switch (primitive) {
    case "lock":
      return lock(key, ttlMs);
    case "semaphore":
      return semaphore(key, limit, ttlMs);
    case "rw":
      return mode === "read" ? readLock(key, ttlMs) : writeLock(key, ttlMs);
    case "multi":
      return lock(keys, ttlMs);
  }
  throw new Error(`unknown primitive ${primitive}`);
}

/**
 * A streamed response of what observe(key) reports for `windowMs`: each report written as one
 * JSON line the moment observe yields it, then the end (or the error that ended the observation).
 */
function observed({ key, windowMs, intervalMs = 20 }) {
  const { readable, writable } = new TransformStream();
  const writer = writable.getWriter();
  const encoder = new TextEncoder();
  const line = (value) => writer.write(encoder.encode(JSON.stringify(value) + "\n"));
  const controller = new AbortController();
  const stop = setTimeout(() => controller.abort(), windowMs);
  (async () => {
    try {
      for await (const leader of observe(key, { intervalMs, signal: controller.signal })) {
        await line({ fence: leader === null ? null : leader.fence });
      }
      await line({ end: true });
    } catch (e) {
      await line({ error: `${e?.name}: ${e?.message}` }).catch(() => {});
    } finally {
      clearTimeout(stop);
      controller.abort();
      await writer.close().catch(() => {});
    }
  })();
  return new Response(readable, { headers: { "content-type": "application/x-ndjson" } });
}

export default {
  async fetch(request, env) {
    try {
      const body = request.method === "POST" ? await request.json() : {};
      const out = await route(new URL(request.url).pathname, body, env);
      if (out === null) return new Response("not found", { status: 404 });
      return out instanceof Response ? out : Response.json(out);
    } catch (e) {
      return Response.json({ error: `${e?.name}: ${e?.message}` }, { status: 500 });
    }
  },
};
