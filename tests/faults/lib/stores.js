// The stores a fault-suite client locks with, a fenced resource next to each, and the broken
// variants every scenario must catch (made by ../workers/broken.js, which the Worker shares):
//   correct       the store as shipped
//   owner-blind   release deletes the key whoever holds it
//   no-expiry     every lease is taken (and extended) for 2^31 - 1 ms, whatever the TTL asked
//   fence-reuse   each process counts fences for itself, so two processes hand out the same ones;
//                 the memory store lives in one process, where that is one counter, so there the
//                 count is kept with the key's entry and forgotten when the key is released (the
//                 next holder is handed fence 1 again)
//   limit-blind   a semaphore's permits are taken under a limit one larger than the caller's
//   writer-shares a writer's hold is taken as one more reader's (it shares the key with them)
//   partial-set   a set of keys taken in one step takes its first key only, and answers a grant
//                 for every key
//   two-leaders   a third of the acquires of a held key are answered with a grant nobody took
//   no-wait       (a store with waitForReplicas) the same store without the option
//   no-compare    (etcd) acquire reads the key, takes a lease and puts the key with it when the read
//                 found it free: the transaction without its create_revision compare, so two
//                 acquires that read at once both win
// `errorRate` makes that share of store calls throw: half before the call reaches the store, half
// after it took effect with the answer lost.
import IORedis from "ioredis";
import Database from "better-sqlite3";
import pg from "pg";
import { brokenStore } from "../workers/broken.js";

// The resource side of fencing (pkg/stores/README.md): keep the highest fence, refuse lower ones.
const FENCED_WRITE = `local last = tonumber(redis.call("HGET", KEYS[1], "fence"))
local fence = tonumber(ARGV[1])
if last ~= nil and fence < last then return 0 end
redis.call("HSET", KEYS[1], "fence", ARGV[1])
return 1`;
const RESOURCE_TABLE = "fault_resource";
const resourceDdl = `CREATE TABLE IF NOT EXISTS ${RESOURCE_TABLE} (key TEXT PRIMARY KEY, fence BIGINT NOT NULL)`;
const resourceUpsert = (p) =>
  `INSERT INTO ${RESOURCE_TABLE} (key, fence) VALUES (${p(1)}, ${p(2)}) ON CONFLICT (key) DO UPDATE ` +
  `SET fence = excluded.fence WHERE ${RESOURCE_TABLE}.fence <= excluded.fence`;

/** A Redis client (standalone or Cluster) as a fault-suite backend: the store, force-release and the fenced resource. */
function redisBackend(client, lib, options) {
  return {
    store: lib.redisLockStore(client, options),
    forceRelease: async (key) => (await client.del(lib.redisLockKeys(key).lock)) === 1,
    resource: {
      async write(key, fence) {
        return Number(await client.eval(FENCED_WRITE, 1, `resource:{${key}}`, String(fence))) === 1;
      },
    },
    close: async () => client.disconnect(),
  };
}

// etcd's gateway, as the broken store and the fenced resource call it: each endpoint in turn, each
// request bounded.
async function etcdRequest(endpoints, path, body) {
  let last = null;
  for (const url of endpoints) {
    try {
      const response = await fetch(url + path, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(2_000),
      });
      const text = await response.text();
      if (response.ok) return JSON.parse(text);
      last = new Error(`${path}: HTTP ${response.status} ${text.slice(0, 200)}`);
    } catch (error) {
      last = error;
    }
  }
  throw last;
}
const b64 = (text) => Buffer.from(text, "utf8").toString("base64");
// A fence as an etcd value that sorts as the number does (etcd compares values as bytes).
const FENCE_DIGITS = 20;
const fenceValue = (fence) => b64(String(fence).padStart(FENCE_DIGITS, "0"));

/** The etcd store's acquire without its create_revision compare: read, then put (no-compare). */
function etcdNoCompare(store, endpoints, lib) {
  return {
    ...store,
    async acquire(key, owner, ttlMs) {
      const { lock } = lib.etcdLockKeys(key);
      const read = await etcdRequest(endpoints, "/v3/kv/range", { key: b64(lock), count_only: true });
      if (Number(read.count ?? 0) > 0) return false;
      const lease = await etcdRequest(endpoints, "/v3/lease/grant", { TTL: Math.max(1, Math.ceil(ttlMs / 1000)) });
      const put = await etcdRequest(endpoints, "/v3/kv/put", { key: b64(lock), value: b64(owner), lease: lease.ID });
      return { fence: Number(put.header.revision) };
    },
  };
}

async function backend(spec, lib) {
  switch (spec.kind) {
    case "etcd": {
      // The store as shipped, over every member; the resource is a key of its own in the same
      // cluster, written in one transaction only while it holds no higher fence.
      const store = lib.etcdLockStore({ endpoints: spec.endpoints });
      return {
        store: spec.noCompare ? etcdNoCompare(store, spec.endpoints, lib) : store,
        forceRelease: (key) => store.forceRelease(key),
        resource: {
          async write(key, fence) {
            const name = b64(`fault-resource/${key}`);
            const reply = await etcdRequest(spec.endpoints, "/v3/kv/txn", {
              // A missing key fails the compare too: written.
              compare: [{ key: name, target: "VALUE", result: "GREATER", value: fenceValue(fence) }],
              failure: [{ request_put: { key: name, value: fenceValue(fence) } }],
            });
            return reply.succeeded !== true;
          },
        },
        close: async () => {},
      };
    }
    case "memory": {
      const store = new lib.MemoryLockStore();
      const fences = new Map();
      return {
        store,
        forceRelease: async (key) => store.forceRelease(key),
        resource: {
          async write(key, fence) {
            if (fence < (fences.get(key) ?? 0)) return false;
            fences.set(key, fence);
            return true;
          },
        },
        close: async () => {},
      };
    }
    case "redis": {
      // Fail fast while the server is down: no offline queue, no retries of a command.
      const client = new IORedis({
        host: "127.0.0.1",
        port: spec.port,
        maxRetriesPerRequest: 0,
        enableOfflineQueue: false,
        commandTimeout: 2000,
        retryStrategy: () => 50,
      });
      client.on("error", () => {});
      await new Promise((resolve, reject) => {
        client.once("ready", resolve);
        setTimeout(() => reject(new Error("redis did not become ready")), 10_000);
      });
      return redisBackend(client, lib);
    }
    case "redis-cluster": {
      // An ioredis Cluster that fails fast like the plain client above; MOVED after a failover is
      // followed (the slot map is refreshed), a slot without a master for a while fails the call.
      const client = new IORedis.Cluster(spec.nodes, {
        enableOfflineQueue: false,
        clusterRetryStrategy: () => 50,
        retryDelayOnFailover: 50,
        retryDelayOnClusterDown: 50,
        retryDelayOnTryAgain: 50,
        slotsRefreshTimeout: 2000,
        redisOptions: { maxRetriesPerRequest: 0, commandTimeout: 2000 },
      });
      client.on("error", () => {});
      await new Promise((resolve, reject) => {
        client.once("ready", resolve);
        setTimeout(() => reject(new Error("the Redis Cluster did not become ready")), 10_000);
      });
      return redisBackend(client, lib, spec.waitForReplicas ? { waitForReplicas: spec.waitForReplicas } : {});
    }
    case "upstash": {
      // @upstash/redis over the REST fixture: one HTTP request per command, no retries.
      const { Redis } = await import("@upstash/redis");
      const client = new Redis({ url: spec.url, token: spec.token, retry: false });
      return {
        store: lib.redisLockStore(client),
        forceRelease: async (key) => Number(await client.del(lib.redisLockKeys(key).lock)) === 1,
        resource: {
          async write(key, fence) {
            return Number(await client.eval(FENCED_WRITE, [`resource:{${key}}`], [String(fence)])) === 1;
          },
        },
        close: async () => {},
      };
    }
    case "sqlite": {
      const db = new Database(spec.path);
      db.pragma("busy_timeout = 10000");
      db.pragma("journal_mode = WAL");
      const store = lib.databaseLockStore(db);
      const upsert = db.prepare(resourceUpsert(() => "?"));
      const del = db.prepare("DELETE FROM keel_locks WHERE key = ?");
      return {
        store,
        forceRelease: async (key) => del.run(key).changes === 1,
        resource: { write: async (key, fence) => upsert.run(key, fence).changes === 1 },
        close: async () => db.close(),
      };
    }
    case "pg": {
      const pool = new pg.Pool({ connectionString: spec.url, max: 3, connectionTimeoutMillis: 2000 });
      pool.on("error", () => {});
      const store = lib.databaseLockStore(pool);
      const sql = resourceUpsert((n) => `$${n}`);
      return {
        store,
        forceRelease: async (key) => (await pool.query("DELETE FROM keel_locks WHERE key = $1", [key])).rowCount === 1,
        resource: { write: async (key, fence) => (await pool.query(sql, [key, fence])).rowCount === 1 },
        close: async () => {
          await store.close?.().catch(() => {});
          await pool.end().catch(() => {});
        },
      };
    }
    default:
      throw new Error(`unknown store ${spec.kind}`);
  }
}

/** Creates the schema a store and its resource need (run once, by the parent). */
export async function prepare(spec, schema) {
  if (spec.kind === "sqlite") {
    const db = new Database(spec.path);
    db.pragma("journal_mode = WAL");
    db.exec(schema({ dialect: "sqlite" }));
    db.exec(resourceDdl);
    db.close();
  } else if (spec.kind === "pg") {
    const client = new pg.Client({ connectionString: spec.url });
    await client.connect();
    await client.query(schema({ dialect: "postgres" }));
    await client.query(resourceDdl);
    await client.end();
  }
}

// The methods the clients' stores keep (no watch: observe polls through the failing wrapper).
const METHODS = [
  "acquire", "release", "extend", "isLocked", "remainingTime", "acquireOrWait", "withdraw",
  "acquireShared", "acquireSharedOrWait", "acquireMany", "inspect",
];

function broken(store, variant, forceRelease, kind, random) {
  // The store built without its option (makeStoreFor) is the whole of no-wait's breakage.
  if (variant === "no-wait" || variant === "no-compare") variant = "correct";
  return brokenStore(store, variant, { methods: METHODS, forceRelease, perKeyFences: kind === "memory", random });
}

function failing(store, rate, random) {
  if (!(rate > 0)) return store;
  const out = {};
  for (const [name, method] of Object.entries(store)) {
    out[name] = async (...args) => {
      const roll = random();
      if (roll < rate / 2) throw new Error(`injected: ${name} failed before reaching the store`);
      const answer = await method(...args);
      if (roll < rate) throw new Error(`injected: ${name} answered, and the answer was lost`);
      return answer;
    };
  }
  return out;
}

export async function makeStoreFor(spec, { variant, errorRate, random, lib }) {
  if (variant === "no-wait") spec = { ...spec, waitForReplicas: undefined };
  if (variant === "no-compare") spec = { ...spec, noCompare: true };
  const b = await backend(spec, lib);
  return { store: failing(broken(b.store, variant, b.forceRelease, spec.kind, random), errorRate, random), resource: b.resource, close: b.close };
}
