--- Takes the free lock (enqueue.lua): INCR the fence counter KEYS[2], SET KEYS[1] to `value` (the
--- owner, and its metadata if any) PX ARGV[2]; `fence` is then the new counter value. A counter that
--- would leave 1..MAX_FENCE is put back and the script answers an error. When the waiters hash
--- exists (`seen`; nobody queues, so it is there for its "\0w") and says someone watches, the value
--- is marked, so that its release runs the full script, and the grant is published. Uses nothing
--- from parts/prelude.lua, so the uncontended path creates none of its functions.

-- include parts/draw-fence.lua call=call counter=KEYS[2]
if type(fence) ~= "number" then return fence end
if seen and redis.call("HEXISTS", KEYS[4], "\0w") == 1 then
  redis.call("SET", KEYS[1], "\0" .. value, "PX", ARGV[2])
  -- include parts/tell-grant.lua lock=KEYS[1] fence=fence ttl=ARGV[2] meta=ARGV[5]
else
  redis.call("SET", KEYS[1], value, "PX", ARGV[2])
end
