--- A waiter leaves (ARGV: owner, channel, "0" at its deadline or "1" to withdraw). If it was
--- handed the key already (exclusive or shared): at the deadline it keeps it and answers
--- {1, fence, waitedMs}; when withdrawing it releases it (the next waiters are handed the key)
--- and answers {2}. Otherwise it leaves the queue and answers {0}; an exclusive holder left with
--- nobody queued behind it is unmarked, and a key not held exclusively is handed to the waiters
--- now at the front as far as they fit (the one that left may have been the one that did not).

-- keel-lock leave: take ARGV[1] out of KEYS[1]'s queue, or release the key it was handed
-- include parts/prelude.lua

local v = redis.pcall("GET", KEYS[1])
if type(v) == "string" and holder(v) == ARGV[1] then
  if ARGV[3] ~= "1" then return granted(ARGV[1]) end
  free(v, ARGV[2])
  return {2}
end
if type(v) == "table" then
  local g = shared_grant(ARGV[1], math.floor(now_us() / 1000))
  if g then
    if ARGV[3] ~= "1" then return g end
    unhold(ARGV[1])
    if redis.call("EXISTS", KEYS[3]) == 1 then hand_over(ARGV[2]) end
    return {2}
  end
end
redis.call("LREM", KEYS[3], 0, ARGV[1])
redis.call("HDEL", KEYS[4], ARGV[1], "\0m:" .. ARGV[1])
local queued = redis.call("EXISTS", KEYS[3]) == 1
if type(v) == "string" then
  if string.sub(v, 1, 1) == MARK and not queued and not watched() then redis.call("SET", KEYS[1], string.sub(v, 2), "KEEPTTL") end
elseif queued then
  hand_over(ARGV[2])
end
return {0}
