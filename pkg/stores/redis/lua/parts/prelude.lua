--- What the scripts that hand a key over share: the key layout of one lock (all in one hash slot),
--- Redis's clock, and the hand-over. Lua creates a function each time execution passes its
--- definition, so enqueue.lua, acquire-shared.lua and the release scripts include this after their
--- uncontended path, which needs none of it (acquire.lua has no use for it at all).
--- K[1] while held shared: scores above 0 are holds; the bookkeeping sits in the same set at scores
--- of 0 and below, under names no owner has (owners hold no NUL), so one ZMSCORE reads a holder and
--- the key's state together and no other key needs its own expiry. Each hold's fence is kept there
--- too, added by the ZADD that adds the hold and removed by the ZREM that drops it.

-- K: the five names of one lock (KEYS, unless a script that covers several locks sets it)
-- K[1] lock: held exclusively, a string, the owner token followed, if the hold has metadata,
--      by "\0" .. metadata (PX ttl; "\0" in front while callers queue behind it or someone
--      watches it, so that its release runs the full script; its fence is the counter's value:
--      nothing draws a fence while it is held); held shared, a sorted set (below), PEXPIREAT
--      its latest hold
-- K[2] fence counter   K[3] queue (list of owners, oldest first)
-- K[4] waiters (hash: owner -> "enqueuedUs deadlineUs ttlMs", plus " weight limit" if shared;
--      "\0m:" .. owner -> the waiter's metadata, if it gave some; "\0w" -> until when (ms)
--      some store watches K[1] (WATCH_SCRIPT), while one does: every change of the exclusive
--      holder is then PUBLISHed on K[1] .. "{{WATCH_SUFFIX}}": "+fence ttlMs", and " " .. metadata if the
--      hold has some, when a hold is granted; "-fence" when an operation ends it)
-- K[5] grants: beside an exclusive holder, "fence waitedMs owner" of the last hand-over (PX
--      ttl); beside shared holders, a hash owner -> "fence waitedMs" for each holder that was
--      handed the key and "\0m:" .. owner -> metadata for each holder that gave some,
--      PEXPIREAT the latest hold as it stood when it was last written
-- K[1] held shared, a sorted set: owner -> expiry (ms by Redis's clock, > 0) for each hold, and
--   "\0f:" .. owner -> -fence, "\0limit" -> -limit, "\0w:" .. owner -> -weight for a hold
--   above 1 permit, "\0extra" -> -(what those add above 1 each), "\0h" -> -1 once a holder
--   was handed the key or gave metadata (K[5] may hold records). The weight held is the number
--   of holds (expired ones not yet dropped included) minus "\0extra"'s score; none of these
--   but the fences change while holds of 1 come and go.
local K = KEYS
local MARK = "\0"

-- Redis's clock in µs, read once per script (a script runs in one go: one moment serves it
-- all, and each TIME is a command). A script that read TIME before this part may set clock_us.
local clock_us
local function now_us()
  if not clock_us then
    local t = redis.call("TIME")
    clock_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return clock_us
end

local function int(n)
  return string.format("%.0f", n)
end

-- Whether some store watches K[1].
local function watched()
  return redis.call("HEXISTS", K[4], "\0w") == 1
end

-- Draws K[1]'s next fence: a number, or (the counter put back) the error reply naming the range
-- it would leave. A counter that is not an integer stops the script with INCR's error.
local function next_fence()
  -- include parts/draw-fence.lua call=call counter=K[2]
  return fence
end

-- K[1] (and K[5], if it holds grant records) expire with the latest hold; with no hold left
-- both go.
local function retime()
  local last = redis.call("ZRANGE", K[1], -1, -1, "WITHSCORES")
  if not last[2] or tonumber(last[2]) <= 0 then
    redis.call("DEL", K[1], K[5])
    return
  end
  redis.call("PEXPIREAT", K[1], last[2])
  redis.call("PEXPIREAT", K[5], last[2])
end

-- Drops the shared holds in who (a list of owners): their members, fences, weights, grant
-- records and metadata.
local function drop_holds(who)
  for first = 1, #who, 256 do
    local weights, drop, records = {"ZMSCORE", K[1]}, {"ZREM", K[1]}, {"HDEL", K[5]}
    local last = math.min(#who, first + 255)
    for i = first, last do
      weights[#weights + 1] = "\0w:" .. who[i]
      drop[#drop + 1] = who[i]
      drop[#drop + 1] = "\0w:" .. who[i]
      drop[#drop + 1] = "\0f:" .. who[i]
      records[#records + 1] = who[i]
      records[#records + 1] = "\0m:" .. who[i]
    end
    local above = 0
    -- (a missing weight is false, not nil, so ipairs sees every one)
    for _, w in ipairs(redis.call(unpack(weights))) do
      if w then above = above - tonumber(w) - 1 end
    end
    redis.call(unpack(drop))
    if above > 0 then redis.call("ZINCRBY", K[1], above, "\0extra") end
    redis.pcall(unpack(records))
  end
end

-- How K[1] is held at now_ms: "none", "exclusive", or "shared" with the weight held and the
-- limit. Expired shared holds are dropped first (a crashed holder's permits come back).
local function holds(now_ms)
  local t = redis.call("TYPE", K[1])["ok"]
  if t == "none" then return "none", 0, 0 end
  if t ~= "zset" then return "exclusive", 0, 0 end
  local gone = redis.call("ZRANGEBYSCORE", K[1], "(0", now_ms)
  if #gone > 0 then drop_holds(gone) end
  -- the weight held: one per hold, plus what holds above 1 add
  local held = redis.call("ZCOUNT", K[1], "(0", "+inf")
  if held == 0 then
    redis.call("DEL", K[1], K[5])
    return "none", 0, 0
  end
  local r = redis.call("ZMSCORE", K[1], "\0extra", "\0limit")
  return "shared", held - (tonumber(r[1]) or 0), -(tonumber(r[2]) or 0)
end

-- Adds a shared hold of weight w under limit for ttl ms (kind: how the key was held before),
-- with its fence, a grant record of its fence and wait if handed, and its metadata (meta, a
-- string, or nil); the caller retimes K[1] and K[5] afterwards.
local function hold_shared(who, w, limit, ttl, fence, waited, kind, now_ms, handed, meta)
  local add = {"ZADD", K[1], now_ms + ttl, who, -fence, "\0f:" .. who}
  if kind == "none" then
    redis.call("DEL", K[5]) -- a grant record left by an exclusive holder that expired
    add[#add + 1] = -limit
    add[#add + 1] = "\0limit"
  end
  if w ~= 1 then
    add[#add + 1] = -w
    add[#add + 1] = "\0w:" .. who
  end
  if handed or meta then
    if kind ~= "none" and not redis.call("ZSCORE", K[1], "\0h") then redis.call("DEL", K[5]) end
    add[#add + 1] = -1
    add[#add + 1] = "\0h"
    local record = {"HSET", K[5]}
    if handed then
      record[3] = who
      record[4] = int(fence) .. " " .. int(waited)
    end
    if meta then
      record[#record + 1] = "\0m:" .. who
      record[#record + 1] = meta
    end
    redis.call(unpack(record))
  end
  redis.call(unpack(add))
  if w ~= 1 then redis.call("ZINCRBY", K[1], 1 - w, "\0extra") end
end

-- Drops who's shared hold; retimes the keys unless the caller hands over next (which does).
local function unhold(who, handing)
  local w = redis.call("ZSCORE", K[1], "\0w:" .. who)
  redis.call("ZREM", K[1], who, "\0w:" .. who, "\0f:" .. who)
  if w then redis.call("ZINCRBY", K[1], -tonumber(w) - 1, "\0extra") end
  redis.pcall("HDEL", K[5], who, "\0m:" .. who)
  if not handing then retime() end
end

-- {1, fence, waitedMs} if who holds a live shared hold of K[1] at now_ms, else nil. Without its
-- grant record (never handed, or lost by hand) its fence and 0 ms waited are the answer (the
-- counter, conservatively, for a hold kept without its fence).
local function shared_grant(who, now_ms)
  local s = redis.call("ZMSCORE", K[1], who, "\0f:" .. who)
  if not s[1] or tonumber(s[1]) <= now_ms then return nil end
  local g = redis.pcall("HGET", K[5], who)
  local f, waited
  if type(g) == "string" then f, waited = string.match(g, "^(%d+) (%d+)$") end
  if not f then return {1, s[2] and -tonumber(s[2]) or tonumber(redis.call("GET", K[2])), 0} end
  return {1, tonumber(f), tonumber(waited)}
end

-- ms until the first hold of K[1] expires (a shared hold's expiry frees room for waiters), or
-- PTTL's -2 when nobody holds it. kind, if given, is how K[1] is held (saves a TYPE).
local function next_expiry(now_ms, kind)
  if not kind and redis.call("TYPE", K[1])["ok"] == "zset" then kind = "shared" end
  if kind ~= "shared" then return redis.call("PTTL", K[1]) end
  local first = redis.call("ZRANGEBYSCORE", K[1], "(0", "+inf", "WITHSCORES", "LIMIT", 0, 1)
  if not first[2] then return -2 end
  return math.max(0, tonumber(first[2]) - now_ms)
end

-- Hands the key to the waiters at the front of the queue, oldest first, while each fits (an
-- exclusive waiter: nobody holds the key; a shared one: no exclusive holder, the same limit as
-- the shared holders, and room under it), dropping those whose deadline passed on the way; stops
-- at the first that does not fit. Each grantee gets the next fence and its grant is recorded
-- and PUBLISHed on channel. Answers how many were handed the key.
local function hand_over(channel)
  local now = now_us()
  local now_ms = math.floor(now / 1000)
  local kind, total, limit = holds(now_ms)
  local grants = {}
  while true do
    local who = redis.call("LINDEX", K[3], 0)
    if not who then break end
    local entry = redis.call("HMGET", K[4], who, "\0m:" .. who)
    local info, meta = entry[1], entry[2] or nil
    local enq, deadline, ttl, w, l
    if info then enq, deadline, ttl, w, l = string.match(info, "^(%d+) (%d+) (%d+) ?(%d*) ?(%d*)$") end
    w, l = tonumber(w), tonumber(l)
    if enq and tonumber(deadline) > now and not (w and kind == "shared" and redis.call("ZSCORE", K[1], who)) then
      local fits = kind == "none"
      if w and kind == "shared" then fits = limit == l and total + w <= l end
      if not fits then break end
      local fence = next_fence()
      if type(fence) ~= "number" then break end
      redis.call("LPOP", K[3])
      redis.call("HDEL", K[4], who, "\0m:" .. who)
      local waited = math.max(0, math.floor((now - tonumber(enq)) / 1000))
      if w then
        hold_shared(who, w, l, tonumber(ttl), fence, waited, kind, now_ms, true, meta)
        kind, total, limit = "shared", total + w, l
      else
        local value = who
        if meta then value = who .. MARK .. meta end
        local seen = watched()
        if seen or redis.call("EXISTS", K[3]) == 1 then value = MARK .. value end
        redis.call("SET", K[1], value, "PX", ttl)
        redis.call("SET", K[5], int(fence) .. " " .. int(waited) .. " " .. who, "PX", ttl)
        if seen then
          -- include parts/tell-grant.lua lock=K[1] fence=fence ttl=ttl meta=meta
        end
        kind = "exclusive"
      end
      grants[#grants + 1] = {who, int(fence), int(waited)}
    else
      redis.call("LPOP", K[3])
      redis.call("HDEL", K[4], who, "\0m:" .. who)
    end
  end
  if #grants == 0 then return nil end
  if kind == "shared" then retime() end
  local next_ms = int(next_expiry(now_ms, kind))
  for _, g in ipairs(grants) do
    redis.call("PUBLISH", channel, cjson.encode({K[1], g[1], g[2], g[3], next_ms}))
  end
  return #grants
end

-- The owner in v, an exclusive holder's value: without the mark in front ("callers queue") and
-- the metadata after the owner (owners hold no NUL, so the first NUL after the owner ends it).
local function holder(v)
  if string.sub(v, 1, 1) == MARK then v = string.sub(v, 2) end
  local nul = string.find(v, MARK, 1, true)
  if nul then return string.sub(v, 1, nul - 1) end
  return v
end

-- What a waiter that holds the key exclusively (handed over) answers: {1, fence, waitedMs},
-- from the grant record; without one (it expired with an earlier holder) the counter is still
-- this holder's fence, and 0 ms waited is the conservative answer.
local function granted(owner)
  local g = redis.pcall("GET", K[5])
  if type(g) == "string" then
    local f, w, who = string.match(g, "^(%d+) (%d+) (.*)$")
    if who == owner then return {1, tonumber(f), tonumber(w)} end
  end
  return {1, tonumber(redis.call("GET", K[2])), 0}
end

-- Frees the key held exclusively with value v (the caller checked the owner), telling the
-- watchers (before any grant that follows); a marked key goes to the next waiters.
local function free(v, channel)
  redis.call("DEL", K[1], K[5])
  if watched() then
    local fence = redis.call("GET", K[2])
    if fence then redis.call("PUBLISH", K[1] .. "{{WATCH_SUFFIX}}", "-" .. fence) end
  end
  if string.sub(v, 1, 1) == MARK then hand_over(channel) end
end
