// The Worker of the fault suite's Workers scenarios (tests/faults/workers.js). Every request is
// one lock operation of a client driven from Node; a hold is carried between requests (and
// between Worker scripts) as its `serialize()` string. Bundled by wrangler from the packed
// package, once; each Worker script of a run is a copy of it with its own isolate.
//
// Bindings (set per script by the runner):
//   STORE        "do": DurableObjectLockStore over LOCKS; "d1": keel-lock/sql over the D1 binding DB
//   VARIANT      "correct", or a deliberately broken store wrapper:
//                  owner-blind  release frees the key whoever holds it (forceRelease)
//                  no-expiry    every lease is taken and extended for 2^31 - 1 ms
//                  fence-reuse  this isolate counts fences itself (other isolates reuse them)
//   ERROR_RATE   share of D1 calls that fail at the binding: half before the statement reaches
//                D1, half after it ran (the answer is lost)
//   SEED         seeds this script's failure rolls
//
// Routes (POST, JSON; 200 with the answer, 500 with { error } when a call threw):
//   /setup     { }                           creates the D1 table (through the binding as is)
//   /acquire   { key, ttlMs, timeout }       → { ok, fence, serialized }
//   /extend    { serialized, ttlMs }         → { ok }  (false: LockNotHeldError)
//   /release   { serialized }                → { ok }
//   /stranger  { op, key, ttlMs }            a fresh owner's release/extend → { ok }
//   /write     { key, fence }                the fenced resource → { accepted }
//   /reset     { key }                       resets the key's lock object (in-memory state lost)
import { DurableObject } from "cloudflare:workers";
import {
  lock,
  restoreLock,
  setLockStore,
  DurableObjectLockStore,
  LockDurableObject as PackagedLockDurableObject,
  LockNotHeldError,
} from "keel-lock";
import { databaseLockStore } from "keel-lock/sql";
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

const FOREVER = 2 ** 31 - 1;
const METHODS = ["acquire", "release", "extend", "isLocked", "remainingTime", "acquireOrWait", "withdraw", "forceRelease"];


/** A D1 binding whose statements fail at `rate`: half before reaching D1, half after running. */
function failingD1(db, rate, random) {
  const attempt = async (what, run) => {
    const roll = random();
    if (roll < rate / 2) throw new Error(`injected: D1 ${what} failed before reaching the database`);
    const answer = await run();
    if (roll < rate) throw new Error(`injected: D1 ${what} ran, and the answer was lost`);
    return answer;
  };
  const statement = (stmt) => ({
    bind: (...params) => statement(stmt.bind(...params)),
    first: (...args) => attempt("first", () => stmt.first(...args)),
    run: () => attempt("run", () => stmt.run()),
    all: () => attempt("all", () => stmt.all()),
    raw: (...args) => attempt("raw", () => stmt.raw(...args)),
  });
  return {
    prepare: (sql) => statement(db.prepare(sql)),
    batch: () => Promise.reject(new Error("batch is not used by the lock store")),
  };
}

/** The store's methods as a JS store, or a broken variant of them. */
function variantOf(store, variant) {
  const m = {};
  for (const name of METHODS) if (typeof store[name] === "function") m[name] = store[name].bind(store);
  switch (variant) {
    case "correct":
      return m;
    case "owner-blind":
      return { ...m, release: (key) => m.forceRelease(key) };
    case "no-expiry":
      return {
        ...m,
        acquire: (key, owner) => m.acquire(key, owner, FOREVER),
        extend: (key, owner) => m.extend(key, owner, FOREVER),
        ...(m.acquireOrWait && {
          acquireOrWait: (key, owner, _ttl, wait, poll) => m.acquireOrWait(key, owner, FOREVER, wait, poll),
        }),
      };
    case "fence-reuse": {
      let last = 0;
      const { acquireOrWait: _waits, withdraw: _withdraw, ...plain } = m;
      return {
        ...plain,
        async acquire(key, owner, ttl) {
          const granted = await m.acquire(key, owner, ttl);
          return granted ? { fence: ++last } : granted;
        },
      };
    }
    default:
      throw new Error(`unknown variant ${variant}`);
  }
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
  store = variantOf(inner, env.VARIANT ?? "correct");
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
      const l = lock(body.key, body.ttlMs);
      const ok = await l.acquire(body.timeout > 0 ? { timeout: body.timeout, retryDelay: 10 } : { timeout: 0 });
      return { ok, fence: ok ? l.fence : null, serialized: ok ? l.serialize() : null };
    }
    case "/extend": {
      storeFor(env);
      try {
        await restoreLock(body.serialized).extend(body.ttlMs);
        return { ok: true };
      } catch (error) {
        if (error instanceof LockNotHeldError) return { ok: false };
        throw error;
      }
    }
    case "/release":
      storeFor(env);
      return { ok: await restoreLock(body.serialized).release() };
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
  }
  return null;
}

export default {
  async fetch(request, env) {
    try {
      const body = request.method === "POST" ? await request.json() : {};
      const out = await route(new URL(request.url).pathname, body, env);
      if (out === null) return new Response("not found", { status: 404 });
      return Response.json(out);
    } catch (e) {
      return Response.json({ error: `${e?.name}: ${e?.message}` }, { status: 500 });
    }
  },
};
