--- Acquire or queue (ARGV: owner, ttl ms, wait ms, channel, and the hold's metadata if it has
--- some). Free and nobody queued: take it as acquire.lua does (a watched key's grant marked
--- and published as there) and answer {1, fence}.
--- Otherwise join the queue (the waiter's deadline and TTL recorded by Redis's clock, and its
--- metadata beside them, for the grant), mark an exclusive holder's value so its release hands
--- over, and answer {0, ms until the first hold expires}. The queue and the waiters hash expire a
--- second after the last deadline.

-- keel-lock acquire-or-wait: take KEYS[1] like acquire, or queue ARGV[1] for ARGV[3] ms
local value = ARGV[1]
if ARGV[5] then value = ARGV[1] .. "\0" .. ARGV[5] end
-- 0: free; 1: held; 2: free with callers queued; 3: both; 4 more while the waiters hash exists
local state = redis.call("EXISTS", KEYS[1], KEYS[3], KEYS[3], KEYS[4], KEYS[4], KEYS[4], KEYS[4])
local seen = state >= 4
state = state % 4
if state == 0 then
  -- include parts/take.lua
  return {1, fence}
end
-- include parts/prelude.lua

if state == 2 and not hand_over(ARGV[4]) then
  state = redis.call("EXISTS", KEYS[1], KEYS[3], KEYS[3], KEYS[4], KEYS[4], KEYS[4], KEYS[4])
  seen = state >= 4
  state = state % 4
end
if state == 0 then
  -- include parts/take.lua
  return {1, fence}
end
local now = now_us()
local wait = tonumber(ARGV[3])
redis.call("RPUSH", KEYS[3], ARGV[1])
local entry = {"HSET", KEYS[4], ARGV[1], string.format("%.0f %.0f %s", now, now + wait * 1000, ARGV[2])}
if ARGV[5] then
  entry[5] = "\0m:" .. ARGV[1]
  entry[6] = ARGV[5]
end
redis.call(unpack(entry))
for i = 3, 4 do
  if redis.call("PTTL", KEYS[i]) < wait + 1000 then redis.call("PEXPIRE", KEYS[i], wait + 1000) end
end
local v = redis.pcall("GET", KEYS[1])
if type(v) == "string" and string.sub(v, 1, 1) ~= MARK then redis.call("SET", KEYS[1], MARK .. v, "KEEPTTL") end
return {0, next_expiry(math.floor(now / 1000))}
