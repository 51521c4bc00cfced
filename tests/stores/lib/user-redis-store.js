// What a user writes when following the documentation's "bring your own Redis store" example:
// ioredis, acquire as SET … PX … NX, release and extend as Lua scripts that compare the owner
// before acting. Written here from the LockStore contract, independently of keel-lock/redis.

const COMPARE_AND_DELETE = `
if redis.call("get", KEYS[1]) == ARGV[1] then
  return redis.call("del", KEYS[1])
end
return 0`;

const COMPARE_AND_EXTEND = `
if redis.call("get", KEYS[1]) == ARGV[1] then
  return redis.call("pexpire", KEYS[1], ARGV[2])
end
return 0`;

export function userRedisStore(redis) {
  return {
    async acquire(key, owner, ttlMs) {
      const reply = await redis.set(key, owner, "PX", ttlMs, "NX");
      return reply === "OK";
    },
    async release(key, owner) {
      return (await redis.eval(COMPARE_AND_DELETE, 1, key, owner)) === 1;
    },
    async extend(key, owner, ttlMs) {
      return (await redis.eval(COMPARE_AND_EXTEND, 1, key, owner, ttlMs)) === 1;
    },
    async isLocked(key) {
      return (await redis.exists(key)) === 1;
    },
    async remainingTime(key) {
      const ms = await redis.pttl(key);
      return ms >= 0 ? ms : null;
    },
  };
}
