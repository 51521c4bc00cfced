// Type-checked (never run) by types.test.js: the stores' .d.ts files against the package's
// LockStore type and the real client libraries' own types.
import type { Grant } from "../../../pkg/index.js";
import type { LockStore } from "../../../pkg/index.js";
import { redisLockStore, detectRedisClient, type RedisLockStore, type RedisClientType } from "../../../pkg/stores/redis.js";
import { databaseLockStore, schema, type DatabaseLockInfo, type DatabaseLockStore } from "../../../pkg/stores/sql.js";
import { etcdLockStore, etcdLockKeys, EtcdStoreError, type EtcdLockStore } from "../../../pkg/stores/etcd.js";
import { Redis as IORedis } from "ioredis";
import { createClient } from "redis";
import { Redis as Upstash } from "@upstash/redis";

declare const sqliteDb: object;

export async function usage(): Promise<void> {
  const io: RedisLockStore = redisLockStore(new IORedis(), { prefix: "lock:" });
  const nr: LockStore = redisLockStore(createClient(), { clientType: "node-redis" });
  const up: LockStore = redisLockStore(new Upstash({ url: "http://x", token: "t" }));
  const kind: RedisClientType | null = detectRedisClient(io);
  const prefix: string = io.prefix;

  const etcd: EtcdLockStore = etcdLockStore({ endpoints: ["http://127.0.0.1:2379"], auth: { username: "u", password: "p" } });
  const etcdAsLockStore: LockStore = etcd;
  const etcdGrant: false | Grant = await etcd.acquire("k", "o", 1500, "host a");
  const etcdForced: boolean = await etcd.forceRelease("k");
  const etcdLock: string = etcdLockKeys("k").lock + etcd.keys("k").metadata;
  const etcdHeld = (await etcd.inspect("k")).holders.map((h) => h.fence);
  const etcdWaited = await etcd.acquireOrWait("k", "o", 30_000, 5_000, 50, "host b");
  const etcdWaitedMs: number = etcdWaited === false ? 0 : etcdWaited.waitedMs;
  const etcdWithdrawn: boolean = await etcd.withdraw("k", "o");
  const etcdQueue: string = etcd.keys("k").queue;
  const etcdWaiting: number = (await etcd.inspect("k")).waiting;
  etcdLockStore({ endpoints: "http://x", safetyNetMs: 1_000 });
  const etcdShare = await etcd.acquireShared("k", "o", 30_000, 1, 3, "reader");
  const etcdShareLimit: number | undefined = etcdShare !== false && "heldLimit" in etcdShare ? etcdShare.heldLimit : undefined;
  const etcdShareWaited = await etcd.acquireSharedOrWait("k", "o", 30_000, 1, 3, 5_000, 50);
  const etcdSharedName: string = etcd.keys("k").shared;
  const etcdMany = await etcd.acquireMany(["a", "b"], ["o1", "o2"], 30_000, ["x", undefined]);
  const etcdManyFences: number[] | null = etcdMany ? etcdMany.map((g) => g.fence) : null;
  const etcdStop: () => Promise<void> = await etcd.watch("k", (change) => void (change === null ? 0 : change.fence));
  const etcdError: boolean = new Error("x") instanceof EtcdStoreError;
  // @ts-expect-error endpoints are required
  etcdLockStore({});
  // @ts-expect-error auth needs a username and a password
  etcdLockStore({ endpoints: "http://x", auth: { username: "u" } });
  void [etcdAsLockStore, etcdGrant, etcdForced, etcdLock, etcdHeld, etcdError, etcdWaitedMs, etcdWithdrawn, etcdQueue, etcdWaiting, etcdShareLimit, etcdShareWaited, etcdSharedName, etcdManyFences, etcdStop];

  const sql: DatabaseLockStore = databaseLockStore(sqliteDb, { table: "locks", driver: "sqlite" });
  const asLockStore: LockStore = sql;
  await sql.createTable();
  const purged: number = await sql.purgeExpired();
  const dbNow: number = await sql.now();
  const ddl: string = schema({ dialect: "postgres", table: "locks" });

  const won: false | Grant = await io.acquire("k", "owner", 1000);
  const fence: number | undefined = won ? won.fence : undefined;
  const forced: boolean = await sql.forceRelease("k");
  const left: number | null = await sql.remainingTime("k");
  // Shared holds: { fence }, false or { heldLimit }; the pg store also waits for them.
  const permit = await sql.acquireShared("k", "o", 1000, 1, 3);
  const heldLimit: number | undefined = permit && "heldLimit" in permit ? permit.heldLimit : undefined;
  const pgStore = databaseLockStore({ query: async () => ({}) });
  const waitedPermit = await pgStore.acquireSharedOrWait("k", "o", 1000, 2, 3, 5_000, 50);
  const waitedMs: number | undefined = waitedPermit && "waitedMs" in waitedPermit ? waitedPermit.waitedMs : undefined;
  // @ts-expect-error the SQLite store does not wait in the database
  sql.acquireSharedOrWait;
  void [heldLimit, waitedMs];
  // Several keys in one step: every key's { fence }, false, or null (not in one step here).
  const set = await sql.acquireMany(["a", "b"], ["o1", "o2"], 1000);
  const setFences: number[] | null = Array.isArray(set) ? set.map((g) => g.fence) : null;
  const pgSet: false | null | Grant[] = await pgStore.acquireMany(["a"], ["o"], 1000);
  // @ts-expect-error one owner per key, not one owner for the set
  sql.acquireMany(["a", "b"], "o", 1000);
  void [setFences, pgSet];
  // Hold metadata, and who holds a key.
  await sql.acquire("k", "o", 1000, "worker 7");
  await sql.acquireShared("k", "o", 1000, 1, 3, "permit");
  await sql.acquireMany(["a", "b"], ["o1", "o2"], 1000, ["first", undefined]);
  await pgStore.acquireOrWait("k", "o", 1000, 5_000, 50, "waiter");
  await pgStore.acquireSharedOrWait("k", "o", 1000, 1, 3, 5_000, 50, "reader");
  const info: DatabaseLockInfo = await sql.inspect("k");
  const firstHolder: { metadata: string | null; fence: number | null; remainingMs: number } | undefined = info.holders[0];
  const waitingNow: number | null = info.waiting;
  // @ts-expect-error metadata is a string
  sql.acquire("k", "o", 1000, { who: "me" });
  // @ts-expect-error acquireMany's metadata is one entry per key
  sql.acquireMany(["a"], ["o"], 1000, "one for all");
  void [firstHolder, waitingNow];
  // Pushed holder changes: PostgreSQL only.
  const stopWatching: () => Promise<void> = await pgStore.watch("k", (change) => {
    if (change === null) return; // look again
    const fence: number = change.fence;
    const metadata: string | null = change.held ? change.metadata : null;
    void [fence, metadata];
  });
  await stopWatching();
  const watchingStore: LockStore = pgStore;
  // @ts-expect-error SQLite and D1 cannot push: no watch
  sql.watch("k", () => {});
  // @ts-expect-error onChange is a function
  pgStore.watch("k", "onChange");
  void watchingStore;

  // @ts-expect-error prefix must be a string
  redisLockStore(new IORedis(), { prefix: 1 });
  // @ts-expect-error unknown client type
  redisLockStore(new IORedis(), { clientType: "memcached" });
  // @ts-expect-error unknown dialect
  schema({ dialect: "oracle" });
  // @ts-expect-error unknown driver
  databaseLockStore(sqliteDb, { driver: "mysql" });
  // @ts-expect-error acquire answers a boolean
  const notANumber: number = await sql.acquire("k", "o", 1);

  void [nr, up, kind, prefix, asLockStore, purged, dbNow, ddl, won, fence, forced, left, notANumber];
}
