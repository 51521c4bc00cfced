--- Takes the free lock (enqueue.lua): INCR the fence counter KEYS[2], SET KEYS[1] to `value` (the
--- owner, and its metadata if any) PX ARGV[2]; `fence` is then the new counter value. A counter that
--- would leave 1..MAX_FENCE is put back and the script answers an error. When the waiters hash
--- exists (`seen`; nobody queues, so it is there for its "\0w") and says someone watches, the value
--- is marked, so that its release runs the full script, and the grant is published. Uses nothing
--- from parts/prelude.lua, so the uncontended path creates none of its functions.

local fence = redis.call("INCR", KEYS[2])
if fence < 1 or fence > {{MAX_FENCE}} then
  redis.call("DECR", KEYS[2])
  return redis.error_reply("ERR keel-lock: fence counter " .. KEYS[2] .. " is outside 1..{{MAX_FENCE}}")
end
if seen and redis.call("HEXISTS", KEYS[4], "\0w") == 1 then
  redis.call("SET", KEYS[1], "\0" .. value, "PX", ARGV[2])
  redis.call("PUBLISH", KEYS[1] .. "{{WATCH_SUFFIX}}", "+" .. string.format("%.0f", fence) .. " " .. ARGV[2] .. (ARGV[5] and " " .. ARGV[5] or ""))
else
  redis.call("SET", KEYS[1], value, "PX", ARGV[2])
end
