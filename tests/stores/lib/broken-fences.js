// Redis lock stores that take the lock correctly but get fences wrong, for showing that the
// fence checks (lib/fence-checks.js) and the stale-writer story can fail. Each takes an ioredis
// client (standalone or Cluster) and uses keel-lock/redis's key names.
import { redisLockKeys, redisLockStore } from "../../../pkg/stores/redis.js";
import { argumentChecks } from "../../../pkg/stores/args.js";

const check = argumentChecks("broken store");
const checkAcquire = (key, owner, ttl) => {
  check.key(key);
  check.owner(owner);
  check.ttl(ttl);
};

export const BROKEN_FENCES = {
  // The counter lives only as long as the lock: after an expiry the next fence starts over.
  "counter expires with the lock": (client) => ({
    ...redisLockStore(client),
    async acquire(key, owner, ttl) {
      checkAcquire(key, owner, ttl);
      const { lock, fence } = redisLockKeys(key);
      const reply = await client.eval(
        `if redis.call("EXISTS", KEYS[1]) == 1 then return 0 end
         local n = redis.call("INCR", KEYS[2])
         redis.call("PEXPIRE", KEYS[2], ARGV[2])
         redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
         return n`,
        2, lock, fence, owner, ttl,
      );
      return reply === 0 ? false : { fence: reply };
    },
  }),
  // Release also deletes the counter.
  "counter reset on release": (client) => {
    const store = redisLockStore(client);
    return {
      ...store,
      async release(key, owner) {
        const released = await store.release(key, owner);
        if (released) await client.del(store.keys(key).fence);
        return released;
      },
    };
  },
  // Each connection counts for itself: two holders on different connections reuse fences.
  "a counter per connection": (client) => {
    let last = 0;
    return {
      ...redisLockStore(client),
      async acquire(key, owner, ttl) {
        checkAcquire(key, owner, ttl);
        const reply = await client.set(redisLockKeys(key).lock, owner, "PX", ttl, "NX");
        return reply === "OK" ? { fence: ++last } : false;
      },
    };
  },
};
