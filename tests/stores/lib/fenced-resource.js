// A resource protected by fencing tokens, kept in Redis: the resource-side recipe from
// pkg/stores/README.md ("Fencing: the resource side"), verbatim. The hash KEYS[1] holds the value
// and the highest fence that wrote it; a write carrying a lower fence is refused.

export const FENCED_WRITE_SCRIPT = `-- Fenced write: set KEYS[1]'s value to ARGV[2] unless a write with a higher fence came first.
-- ARGV[1] is the writer's fence. Answers 1 (written) or 0 (refused: a newer holder has written).
local fence = tonumber(ARGV[1])
if fence == nil or fence < 1 or fence % 1 ~= 0 then
  return redis.error_reply("ERR fence must be a positive integer")
end
local last = tonumber(redis.call("HGET", KEYS[1], "fence"))
if last ~= nil and fence < last then
  return 0
end
redis.call("HSET", KEYS[1], "fence", ARGV[1], "value", ARGV[2])
return 1
`;

/** The resource at `key`, written through `redis` (an ioredis client or Cluster). */
export function fencedResource(redis, key) {
  return {
    key,
    async write(fence, value) {
      return Number(await redis.eval(FENCED_WRITE_SCRIPT, 1, key, String(fence), value)) === 1;
    },
    async read() {
      return redis.hget(key, "value");
    },
  };
}
