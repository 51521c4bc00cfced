// A store from a URL. The drivers are not keel-lock's dependencies (a user of one store should
// not install the others): each is imported from the user's own install — the directory the
// command runs in first, then wherever keel-lock itself is installed (a global install finds
// drivers installed globally beside it) — and a missing one is a one-line message naming it.
import { createRequire } from "node:module";
import { mkdirSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { EXIT, UsageError } from "./options.js";

export class StoreError extends Error {
  name = "StoreError";
  constructor(message, code = EXIT.unavailable) {
    super(message);
    this.exitCode = code;
  }
}

const CONNECT_TIMEOUT_MS = 5_000;

async function driver(name, why) {
  let resolved;
  try {
    resolved = createRequire(join(process.cwd(), "noop.js")).resolve(name);
  } catch {
    try {
      resolved = createRequire(import.meta.url).resolve(name);
    } catch {
      throw new StoreError(`${why} needs the ${name} package, which is not installed: npm install ${name}`);
    }
  }
  let module;
  try {
    module = await import(pathToFileURL(resolved).href);
  } catch (error) {
    // Installed but broken, say a native module built for another Node: the store is unusable.
    throw new StoreError(`cannot load ${name} (${resolved}): ${String(error?.message ?? error).split("\n")[0]}`);
  }
  return module.default ?? module;
}

/** Where the no-store default keeps its file: per user, so other users cannot meddle with it. */
export function defaultStorePath() {
  const runtime = process.env.XDG_RUNTIME_DIR;
  const dir = runtime ? join(runtime, "keel-lock") : join(tmpdir(), `keel-lock-${process.getuid?.() ?? "user"}`);
  return join(dir, "locks.db");
}

/**
 * Makes `dir` (mode 0700) or checks the one there: in a shared temporary directory another user
 * could have made it first, and would then see and meddle with this user's locks.
 */
function ownDirectory(dir) {
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  } catch (error) {
    throw new StoreError(`cannot make ${dir} for the default store: ${error.message}`);
  }
  const stat = statSync(dir);
  const uid = process.getuid?.();
  if (!stat.isDirectory() || (uid !== undefined && stat.uid !== uid) || (stat.mode & 0o022) !== 0) {
    throw new StoreError(`${dir} is not a directory of this user's that only it can write: remove it, or give --store`);
  }
}

/**
 * The store `url` names (or the machine's default), opened and ready: `{ store, close,
 * description }`. Bad URLs are UsageErrors; a driver missing or a server unreachable, StoreErrors.
 */
export async function openStore(url) {
  if (url === undefined || url === "") {
    const path = defaultStorePath();
    ownDirectory(join(path, ".."));
    return openSqlite(path, "the default store (no --store or KEEL_LOCK_STORE)");
  }
  const scheme = /^([a-z][a-z0-9+.-]*):/i.exec(url)?.[1]?.toLowerCase();
  switch (scheme) {
    case "redis":
    case "rediss":
      return openRedis(url);
    case "redis+cluster":
    case "rediss+cluster":
      return openRedisCluster(url, scheme === "rediss+cluster");
    case "postgres":
    case "postgresql":
      return openPostgres(url);
    case "sqlite": {
      const path = url.slice("sqlite:".length).replace(/^\/\/(?=\/)/, "");
      if (path === "") throw new UsageError("--store sqlite:PATH needs a PATH");
      return openSqlite(path, "a sqlite: store");
    }
    case "https":
    case "http":
      return openUpstash(url);
    default:
      throw new UsageError(
        `--store: ${scheme ? `unknown scheme ${scheme}:` : `${JSON.stringify(url)} is not a URL`} (redis://, rediss://, redis+cluster://, postgres://, sqlite:PATH, https:// for Upstash)`,
      );
  }
}

function hostOf(url) {
  try {
    return new URL(url).host || url;
  } catch {
    throw new UsageError(`--store: ${JSON.stringify(url)} is not a valid URL`);
  }
}

async function openRedis(url) {
  const host = hostOf(url);
  const Redis = await driver("ioredis", "a redis:// store");
  const { redisLockStore } = await import("../stores/redis.js");
  const client = new Redis(url, {
    lazyConnect: true,
    connectTimeout: CONNECT_TIMEOUT_MS,
    // Reconnect while running (keel-lock bounds every call by the TTL), but answer "down" fast.
    maxRetriesPerRequest: 2,
    retryStrategy: (times) => Math.min(times * 100, 1_000),
  });
  client.on("error", () => {}); // reported through the failing calls
  try {
    await client.connect();
  } catch (error) {
    client.disconnect();
    throw new StoreError(`cannot reach Redis at ${host}: ${error.message}`);
  }
  return { store: redisLockStore(client), close: () => client.disconnect(), description: `Redis at ${host}` };
}

async function openRedisCluster(url, tls) {
  const nodes = url
    .replace(/^[^:]+:\/\//, "")
    .split("/")[0]
    .split(",")
    .map((part) => {
      const at = part.lastIndexOf("@");
      const hostPort = at >= 0 ? part.slice(at + 1) : part;
      const match = /^([^:]+|\[[^\]]+\]):(\d+)$/.exec(hostPort);
      if (!match) throw new UsageError(`--store: ${JSON.stringify(part)} is not HOST:PORT in a redis+cluster:// URL`);
      return { host: match[1].replace(/^\[|\]$/g, ""), port: Number(match[2]) };
    });
  const auth = /^[^:]+:\/\/(?:([^:@,]*):)?([^@,]*)@/.exec(url);
  const Redis = await driver("ioredis", "a redis+cluster:// store");
  const { redisLockStore } = await import("../stores/redis.js");
  const redisOptions = { connectTimeout: CONNECT_TIMEOUT_MS, maxRetriesPerRequest: 2 };
  if (auth) {
    if (auth[1]) redisOptions.username = decodeURIComponent(auth[1]);
    redisOptions.password = decodeURIComponent(auth[2]);
  }
  if (tls) redisOptions.tls = {};
  const client = new Redis.Cluster(nodes, { lazyConnect: true, redisOptions, clusterRetryStrategy: (times) => (times > 3 ? null : 200) });
  client.on("error", () => {});
  try {
    await client.connect();
  } catch (error) {
    client.disconnect();
    throw new StoreError(`cannot reach the Redis Cluster at ${nodes.map((n) => `${n.host}:${n.port}`).join(",")}: ${error.message}`);
  }
  return { store: redisLockStore(client), close: () => client.disconnect(), description: "a Redis Cluster" };
}

async function openPostgres(url) {
  const host = hostOf(url);
  const pg = await driver("pg", "a postgres:// store");
  const { databaseLockStore } = await import("../stores/sql.js");
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: CONNECT_TIMEOUT_MS });
  client.on("error", () => {}); // a dropped connection fails the calls that need it
  try {
    await client.connect();
    const store = databaseLockStore(client, { driver: "pg" });
    // Concurrent CREATE ... IF NOT EXISTS can still collide in PostgreSQL's catalog: one at a time.
    await client.query("SELECT pg_advisory_lock(hashtext('keel-lock createTable'))");
    try {
      await store.createTable();
    } finally {
      await client.query("SELECT pg_advisory_unlock(hashtext('keel-lock createTable'))");
    }
    return { store, close: () => client.end().catch(() => {}), description: `PostgreSQL at ${host}` };
  } catch (error) {
    client.end().catch(() => {});
    throw new StoreError(`cannot use PostgreSQL at ${host}: ${error.message}`);
  }
}

async function openSqlite(path, why) {
  let db;
  try {
    db = await openSqliteFile(path, why);
  } catch (error) {
    if (error instanceof StoreError) throw error;
    throw new StoreError(`cannot open the SQLite file ${path}: ${error.message}`);
  }
  const { databaseLockStore } = await import("../stores/sql.js");
  try {
    const store = databaseLockStore(db, { driver: "sqlite" });
    await store.createTable();
    return { store, close: () => db.close(), description: `the SQLite file ${path}` };
  } catch (error) {
    throw new StoreError(`cannot use the SQLite file ${path}: ${error.message}`);
  }
}

// node:sqlite where Node has it without a flag (22.13 and later), else better-sqlite3 from the
// user's install.
// Writers from other processes wait for each other (busy_timeout) instead of failing at once.
async function openSqliteFile(path, why) {
  let sqlite = null;
  const warn = process.emitWarning;
  try {
    // node:sqlite is marked experimental in some Node versions: its warning is not ours to print.
    process.emitWarning = (warning, ...rest) => (/sqlite/i.test(String(warning)) ? undefined : warn.call(process, warning, ...rest));
    sqlite = await import("node:sqlite");
  } catch {
    sqlite = null;
  } finally {
    process.emitWarning = warn;
  }
  if (sqlite?.DatabaseSync) {
    const db = new sqlite.DatabaseSync(path);
    db.exec("PRAGMA busy_timeout = 10000; PRAGMA journal_mode = WAL;");
    return db;
  }
  const Database = await driver("better-sqlite3", `${why} on a Node without node:sqlite (before 22.13)`);
  const db = new Database(path, { timeout: 10_000 });
  db.pragma("journal_mode = WAL");
  return db;
}

async function openUpstash(url) {
  const token = process.env.KEEL_LOCK_UPSTASH_TOKEN ?? process.env.UPSTASH_REDIS_REST_TOKEN;
  if (!token) {
    throw new UsageError("--store https://…: set the Upstash token in KEEL_LOCK_UPSTASH_TOKEN (or UPSTASH_REDIS_REST_TOKEN), never on the command line");
  }
  const host = hostOf(url);
  const upstash = await driver("@upstash/redis", "an Upstash REST store");
  const { redisLockStore } = await import("../stores/redis.js");
  const client = new upstash.Redis({ url, token, retry: { retries: 1 } });
  return { store: redisLockStore(client), close: () => {}, description: `Upstash REST at ${host}` };
}
