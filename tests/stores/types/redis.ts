// Type-checked (never run) by redis.test.js: keel-lock/redis's types against the real client
// libraries' own types — fences, key names, cluster clients — and the misuses they must reject.
import {
  redisLockStore,
  redisLockKeys,
  detectRedisClient,
  ACQUIRE_SHA,
  INSPECT_SHA,
  WATCH_SHA,
  CONFIRM_SHA,
  LockNotReplicatedError,
  type RedisClientType,
  type RedisLockInfo,
  type RedisLockKeys,
  type RedisLockStore,
} from "../../../pkg/stores/redis.js";
import type { Grant, LockStore, WatchReport } from "../../../pkg/index.js";
import { Redis as IORedis, Cluster } from "ioredis";
import { createClient, createCluster } from "redis";
import { Redis as Upstash } from "@upstash/redis";
import { GlideClient, GlideClusterClient } from "@valkey/valkey-glide";

export async function redisUsage(): Promise<void> {
  const io: RedisLockStore = redisLockStore(new IORedis(), { prefix: "lock:" });
  const ioCluster = redisLockStore(new Cluster([{ host: "127.0.0.1", port: 7000 }]));
  const nodeRedis = redisLockStore(createClient(), { clientType: "node-redis" });
  const nodeRedisCluster = redisLockStore(createCluster({ rootNodes: [{ url: "redis://127.0.0.1:7000" }] }), {
    clientType: "node-redis-cluster",
  });
  const upstash = redisLockStore(new Upstash({ url: "http://x", token: "t" }));
  const glide: RedisLockStore = redisLockStore(await GlideClient.createClient({ addresses: [{ host: "127.0.0.1" }] }));
  const glideCluster = redisLockStore(await GlideClusterClient.createClient({ addresses: [{ host: "127.0.0.1", port: 7000 }] }), {
    clientType: "glide-cluster",
  });
  const glideType: "glide" | "glide-cluster" = glideCluster.clientType === "glide" ? "glide" : "glide-cluster";
  const glideWaits: boolean = typeof glide.acquireOrWait === "function" && glideType !== undefined;
  const kind: RedisClientType | null = detectRedisClient(ioCluster);
  const type: RedisClientType = nodeRedisCluster.clientType;

  const got: false | Grant = await io.acquire("k", "owner", 1000);
  const fence: number | undefined = got ? got.fence : undefined;
  const released: boolean = await ioCluster.release("k", "owner");
  const extended: boolean = await nodeRedis.extend("k", "owner", 1000);
  const left: number | null = await upstash.remainingTime("k");
  const names: RedisLockKeys = redisLockKeys("k", "lock:");
  const lockName: string = io.keys("k").lock;
  const counterName: string = names.fence;
  const sha: string = ACQUIRE_SHA;
  const asLockStore: LockStore = nodeRedisCluster; // what setLockStore() takes
  const tagged = redisLockStore(new Cluster([{ host: "127.0.0.1", port: 7000 }]), { hashTags: true });
  const many: false | null | Grant[] = await tagged.acquireMany(["{a}:1", "{a}:2"], ["o1", "o2"], 1000);
  const firstFence: number | undefined = many ? many[0].fence : undefined;
  const taggedNames: RedisLockKeys = redisLockKeys("{a}:1", "", { hashTags: true });
  const withMetadata: false | Grant = await io.acquire("k", "owner", 1000, "worker 7");
  const manyWithMetadata = await tagged.acquireMany(["{a}:1", "{a}:2"], ["o1", "o2"], 1000, ["a", undefined]);
  const permit = await io.acquireShared("k", "owner", 1000, 1, 4, "reader");
  const waited = await io.acquireOrWait?.("k", "owner", 1000, 500, 50, "waiter");
  const info: RedisLockInfo = await upstash.inspect("k");
  const holder: { metadata: string | null; fence: number | null; remainingMs: number } | undefined = info.holders[0];
  const waiting: number = info.waiting;
  const inspectSha: string = INSPECT_SHA;
  const stop: (() => Promise<void>) | undefined = await io.watch?.("k", (change: WatchReport | null) => {
    if (change !== null && change.held) {
      const told: [number, string | null, number] = [change.fence, change.metadata, change.remainingMs];
      void told;
    }
  });
  await stop?.();
  const watchSha: string = WATCH_SHA;
  const replicated = redisLockStore(new Cluster([{ host: "127.0.0.1", port: 7000 }]), { waitForReplicas: { replicas: 1, timeoutMs: 100 } });
  try {
    await replicated.acquire("k", "owner", 1000);
  } catch (error) {
    if (error instanceof LockNotReplicatedError) {
      const seen: [string, string, number | null, number, boolean] = [error.key, error.operation, error.acknowledged, error.required, error.released];
      void seen;
    }
  }
  const confirmSha: string = CONFIRM_SHA;
  // @ts-expect-error waitForReplicas takes replicas and timeoutMs
  redisLockStore(new IORedis(), { waitForReplicas: { replicas: 1 } });
  // @ts-expect-error replicas is a number
  redisLockStore(new IORedis(), { waitForReplicas: { replicas: "1", timeoutMs: 100 } });

  // @ts-expect-error acquire answers { fence } or false, not a boolean
  const won: boolean = await io.acquire("k", "owner", 1000);
  // @ts-expect-error a fence is a number
  const notAString: string = (await io.acquire("k", "owner", 1000) || { fence: 0 }).fence;
  // @ts-expect-error unknown client type
  redisLockStore(new IORedis(), { clientType: "cluster" });
  // @ts-expect-error prefix must be a string
  redisLockKeys("k", 1);
  // @ts-expect-error acquireMany takes the keys as an array
  await io.acquireMany("k", ["o"], 1000);
  // @ts-expect-error metadata is a string
  await io.acquire("k", "owner", 1000, 42);
  // @ts-expect-error acquireMany's metadata is one entry per key, an array
  await io.acquireMany(["k"], ["o"], 1000, "m");
  // @ts-expect-error inspect answers no owner
  const leaked: string = (await io.inspect("k")).holders[0].owner;
  // @ts-expect-error hashTags is a boolean
  redisLockStore(new IORedis(), { hashTags: "yes" });
  // @ts-expect-error a watch report carries no owner
  await io.watch?.("k", (change) => change?.owner);
  // @ts-expect-error onChange is a function
  await io.watch?.("k", "onChange");
  // @ts-expect-error an end carries no metadata
  await io.watch?.("k", (change) => change !== null && !change.held && change.metadata);

  void [withMetadata, manyWithMetadata, permit, waited, holder, waiting, inspectSha, leaked, watchSha, confirmSha];
  void [asLockStore, firstFence, taggedNames, kind, type, fence, released, extended, left, lockName, counterName, sha, won, notAString];
}
