--- A store watches a lock, or stops (KEYS: lock, waiters, watch set; ARGV: the store's watcher id,
--- and the ms its watch lasts unless renewed, or "0" to stop). The watch set holds each watching
--- store's id until when it watches (ms by Redis's clock); the ids whose time passed are dropped,
--- and the set expires with its latest. While the set has an id, the waiters hash holds "\0w" ->
--- that latest time (and lives at least as long), which tells the other scripts to publish; with
--- no id left it is removed. Watching also marks an exclusive holder's value, so that its release
--- runs the full release script (which reports the end). Answers 1 if the id was watching
--- already, 0 if not (a first watch, or its time had passed: changes may have gone unreported);
--- stopping answers 0.

-- keel-lock watch: ARGV[1] watches KEYS[1] for ARGV[2] ms (KEYS[3]: the watchers), or stops ("0")
local t = redis.call("TIME")
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ms = tonumber(ARGV[2])
local was = redis.call("ZSCORE", KEYS[3], ARGV[1])
redis.call("ZREMRANGEBYSCORE", KEYS[3], "-inf", now_ms)
if ms == 0 then
  redis.call("ZREM", KEYS[3], ARGV[1])
else
  redis.call("ZADD", KEYS[3], now_ms + ms, ARGV[1])
  local v = redis.pcall("GET", KEYS[1])
  if type(v) == "string" and string.sub(v, 1, 1) ~= "\0" then redis.call("SET", KEYS[1], "\0" .. v, "KEEPTTL") end
end
local last = redis.call("ZRANGE", KEYS[3], -1, -1, "WITHSCORES")[2]
if last then
  redis.call("PEXPIREAT", KEYS[3], last)
  redis.call("HSET", KEYS[2], "\0w", last)
  if redis.call("PTTL", KEYS[2]) < tonumber(last) - now_ms then redis.call("PEXPIREAT", KEYS[2], last) end
else
  redis.call("HDEL", KEYS[2], "\0w")
end
if ms ~= 0 and was and tonumber(was) > now_ms then return 1 end
return 0
