--- Plain acquire (KEYS: lock, fence counter, queue, waiters; ARGV: the lock's value, ttl ms — the value is
--- the owner, followed by NUL and the hold's metadata when it has some, so metadata costs this
--- script nothing). SET KEYS[1] to ARGV[1] NX with a TTL of ARGV[2] ms; if it was held, answer 0. If callers are queued for it (KEYS[3]
--- exists: its holder's TTL passed while they waited), delete it again and answer -1: the store
--- then runs check.lua for the key, which hands it to the oldest live waiter, and tries once
--- more — a newcomer never overtakes the queue. Otherwise INCR KEYS[2] (the fence counter) and
--- answer the new value (the fence).
--- A counter that would leave 1..2^53-1, or that INCR refuses (not an integer), is an error: the
--- counter is put back as it was and the lock deleted again, so every later acquire of the key
--- fails the same way.
--- While some store watches the key (the waiters hash KEYS[4] holds "\0w") the value is marked
--- (a NUL in front, as while callers queue), so that its release runs the full release script,
--- which reports the end, and the grant is published on KEYS[1] .. WATCH_SUFFIX.
--- The uncontended path is three commands — SET NX, one EXISTS of the queue and waiters names,
--- INCR — and the script takes only the names that path reads (Redis parses every argument of
--- every call); a held key costs the SET NX alone.

-- keel-lock acquire: if KEYS[1] is free and nobody queues (KEYS[3]), set it to ARGV[1] (the
-- owner) for ARGV[2] ms and answer the next fence from the counter KEYS[2]; 0 while it is held;
-- -1 when it is free with callers queued (the check script hands it over)
if not redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
  return 0
end
-- 0: nobody queues; 1: nobody queues, the waiters hash is there for a watch; 2 or 3: callers queue
local state = redis.call("EXISTS", KEYS[3], KEYS[3], KEYS[4])
if state >= 2 then
  redis.call("DEL", KEYS[1])
  return -1
end
-- include parts/draw-fence.lua call=pcall counter=KEYS[2]
if type(fence) ~= "number" then
  redis.call("DEL", KEYS[1])
  return fence
end
if state == 1 and redis.call("HEXISTS", KEYS[4], "\0w") == 1 then
  redis.call("SET", KEYS[1], "\0" .. ARGV[1], "KEEPTTL")
  local nul = string.find(ARGV[1], "\0", 1, true)
  local meta = nul and string.sub(ARGV[1], nul + 1)
  -- include parts/tell-grant.lua lock=KEYS[1] fence=fence ttl=ARGV[2] meta=meta
end
return fence
