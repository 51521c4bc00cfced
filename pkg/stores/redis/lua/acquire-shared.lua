--- Shared acquire, or queue (KEYS: the lock's five names; ARGV: owner, ttl ms, weight, limit,
--- wait ms, channel, and the hold's metadata if it has some: kept in K[5], or with the waiter's
--- entry until it is handed the key). Callers queued for the key are first handed it as far as
--- they fit. Then:
--- shared holders under another limit answer {2, their limit} (never queued); a hold fits when
--- nobody holds the key exclusively, nobody is still queued, and the weight held plus this one is
--- at most the limit: it is added (the next fence drawn) and the answer is {1, fence}. Otherwise,
--- with wait ms 0 (or an owner that already holds a shared hold of the key) {-1}; else the
--- caller joins the queue as enqueue.lua queues and the answer is {0, ms until the first hold
--- expires}. A weight or limit outside 1..2^32-1, or a weight above the limit, is an error and
--- changes nothing.
--- With nobody queued, a free key or one held shared under the same limit with room is taken
--- before parts/prelude.lua (whose functions Lua would create on every run): one EXISTS tells free, held and
--- queued apart; beside other holds one ZMSCORE reads the owner, the limit, the weight held and
--- the latest expiry (or fails: the key is held exclusively); the hold is one INCR and one ZADD
--- (the hold and its fence, the weight held, the limit on a free key, the latest expiry when it
--- is the latest), and PEXPIREAT only when it is the latest. The weight held counts expired holds
--- not yet dropped, so a hold that fits with them fits; anything else (a full key with an expired
--- hold, another limit, an owner asking again, a hold with metadata) goes the full way.

-- keel-lock shared acquire: add ARGV[1]'s hold of weight ARGV[3] under limit ARGV[4], or queue
local w, l, wait, ttl = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[2])
if not (w and l and wait and ttl) or w % 1 ~= 0 or l % 1 ~= 0 or w < 1 or w > l or l > 4294967295 or wait < 0 then
  return redis.error_reply("ERR keel-lock: weight and limit must be whole numbers, 1 <= weight <= limit <= 4294967295")
end
local t
repeat
  -- a hold with metadata (ARGV[7]) goes the full way, which keeps it in K[5]
  if ARGV[7] then break end
  -- 0: free; 1: held (shared, or a string: held exclusively); 2 or 3: callers queue (the full way)
  local state = redis.call("EXISTS", KEYS[1], KEYS[3], KEYS[3])
  local total = 0
  if state == 1 then
    local r = redis.pcall("ZMSCORE", KEYS[1], ARGV[1], "\0limit", "\0extra")
    if r.err then -- held exclusively
      if wait == 0 then return {-1} end
      break
    end
    -- the owner asks again, or another limit: the full way
    if r[1] or -(tonumber(r[2]) or 0) ~= l then break end
    total = redis.call("ZCOUNT", KEYS[1], "(0", "+inf") - (tonumber(r[3]) or 0)
  elseif state ~= 0 then
    break
  end
  t = redis.call("TIME")
  local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if total + w > l then
    if wait ~= 0 then break end
    -- full, unless its first hold expired (the full way drops it and looks again)
    local first = redis.call("ZRANGEBYSCORE", KEYS[1], "(0", "+inf", "WITHSCORES", "LIMIT", 0, 1)
    if first[2] and tonumber(first[2]) > now_ms then return {-1} end
    break
  end
  -- include parts/draw-fence.lua call=pcall counter=KEYS[2]
  if type(fence) ~= "number" then return fence end
  -- (the expiry turned into text once: Redis formats each number argument of a call anew)
  local expiry = now_ms + ttl
  local at = expiry .. ""
  -- K[1] expires with its latest hold: a later one moves it
  local later = state == 0 or now_ms + redis.call("PTTL", KEYS[1]) < expiry
  local add = {"ZADD", KEYS[1], at, ARGV[1], -fence, "\0f:" .. ARGV[1]}
  if state == 0 then
    add[7] = -l
    add[8] = "\0limit"
  end
  if w ~= 1 then
    add[#add + 1] = -w
    add[#add + 1] = "\0w:" .. ARGV[1]
  end
  redis.call(unpack(add))
  if w ~= 1 then redis.call("ZINCRBY", KEYS[1], 1 - w, "\0extra") end
  if later then redis.call("PEXPIREAT", KEYS[1], at) end
  return {1, fence}
until true
-- include parts/prelude.lua

if t then clock_us = tonumber(t[1]) * 1000000 + tonumber(t[2]) end
if redis.call("EXISTS", K[3]) == 1 then hand_over(ARGV[6]) end
local now = now_us()
local now_ms = math.floor(now / 1000)
local kind, total, limit = holds(now_ms)
if kind == "shared" then
  if limit ~= l then return {2, limit} end
  if redis.call("ZSCORE", K[1], ARGV[1]) then return {-1} end
end
if kind ~= "exclusive" and redis.call("EXISTS", K[3]) == 0 and (kind == "none" or total + w <= l) then
  local fence = next_fence()
  if type(fence) ~= "number" then return fence end
  hold_shared(ARGV[1], w, l, ttl, fence, 0, kind, now_ms, false, ARGV[7])
  retime()
  return {1, fence}
end
if wait == 0 then return {-1} end
redis.call("RPUSH", K[3], ARGV[1])
local entry = {"HSET", K[4], ARGV[1], string.format("%.0f %.0f %.0f %.0f %.0f", now, now + wait * 1000, ttl, w, l)}
if ARGV[7] then
  entry[5] = "\0m:" .. ARGV[1]
  entry[6] = ARGV[7]
end
redis.call(unpack(entry))
for i = 3, 4 do
  if redis.call("PTTL", K[i]) < wait + 1000 then redis.call("PEXPIRE", K[i], int(wait + 1000)) end
end
local v = redis.pcall("GET", K[1])
if type(v) == "string" and string.sub(v, 1, 1) ~= MARK then redis.call("SET", K[1], MARK .. v, "KEEPTTL") end
return {0, next_expiry(now_ms)}
