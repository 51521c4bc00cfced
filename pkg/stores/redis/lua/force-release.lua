--- Force-release (ARGV: channel): frees every hold of KEYS[1] and answers 1, or 0 if nobody held
--- it. Queued waiters are handed the key, as on a release.

-- keel-lock force-release: free KEYS[1] whoever holds it; hand it to the next waiters
-- include parts/prelude.lua

local v = redis.pcall("GET", KEYS[1])
if type(v) == "string" then
  free(v, ARGV[1])
  return 1
end
local held = 0
if v then
  if holds(math.floor(now_us() / 1000)) ~= "none" then held = 1 end
  redis.call("DEL", K[1], K[5])
end
if redis.call("EXISTS", K[3]) == 1 then hand_over(ARGV[1]) end
return held
