--- Answers 0 (ends the script) unless {{owner}} has a live hold in the shared holds' sorted set
--- {{holds}} (scored by expiry in ms); leaves now_ms, Redis's time in ms, to what follows.

local t = redis.call("TIME")
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local s = redis.call("ZSCORE", {{holds}}, {{owner}})
if not s or tonumber(s) <= now_ms then
  return 0
end
