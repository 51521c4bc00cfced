// ioredis clients made without an offline queue (`enableOfflineQueue: false`, common where a
// command must fail fast rather than wait for a reconnect) or with `lazyConnect`: the store's
// pub/sub connection, a duplicate of the client, must subscribe once it is connected, not before
// — else every hand-over reaches its waiter only at a later look, perhaps after the grant ran
// out, and waits answer false while the key was handed to them.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import IORedis from "ioredis";
import { lock, setLockStore } from "keel-lock";
import { redisLockStore } from "keel-lock/redis";
import { useRedis } from "./lib/redis-fixture.js";

describe("redisLockStore over ioredis without an offline queue, or connecting lazily", () => {
  let redis;
  useRedis({ ready: (server) => (redis = server.redis) });

  const cases = {
    "enableOfflineQueue: false": { enableOfflineQueue: false, maxRetriesPerRequest: 0 },
    "lazyConnect: true": { lazyConnect: true },
  };
  for (const [name, options] of Object.entries(cases)) {
    test(`${name}: three callers waiting on one key are each handed it, none told no`, async () => {
      const client = new IORedis({ port: redis.port, host: "127.0.0.1", ...options });
      if (options.lazyConnect) await client.connect();
      else await new Promise((resolve) => client.once("ready", resolve));
      try {
        setLockStore(redisLockStore(client, { prefix: `offline:${name.split(":")[0]}:` }));
        let granted = 0;
        let refused = 0;
        const end = Date.now() + 1_500;
        await Promise.all(
          [0, 1, 2].map(async () => {
            while (Date.now() < end) {
              const [ran] = await lock("k", 300).run(() => new Promise((resolve) => setTimeout(resolve, 5)), { timeout: 6_000 });
              if (ran) granted++;
              else refused++;
            }
          }),
        );
        assert.equal(refused, 0, `${refused} waits answered no (${granted} granted)`);
        assert.ok(granted >= 3, `${granted} granted`);
      } finally {
        client.disconnect();
      }
    });
  }
});
