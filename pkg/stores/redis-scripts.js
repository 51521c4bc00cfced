// keel-lock/redis: the Lua scripts the store runs, their SHA-1 digests (a test recomputes them
// from the text, so no SCRIPT LOAD round trip is needed), and how a script's answer reads. The
// key layout and what each script does to it: stores/README.md, "keel-lock/redis".

import { MAX_FENCE } from "./args.js";

// Every hand-over under prefix P is published on the channel P + CHANNEL.
export const CHANNEL = "keel-lock:handover";
// A lock's watch set, and the channel its exclusive holder changes are published on while
// someone watches it, is named by its lock name followed by this.
export const WATCH_SUFFIX = ":watch";
// K[1] while held shared. Scores above 0 are holds; the bookkeeping sits in the same set at
// scores of 0 and below, under names no owner has (owners hold no NUL), so one ZMSCORE reads a
// holder and the key's state together and no other key needs its own expiry. Each hold's fence
// is kept there too, added by the ZADD that adds the hold and removed by the ZREM that drops it.
const SHARED_LAYOUT = `-- K[1] held shared, a sorted set: owner -> expiry (ms by Redis's clock, > 0) for each hold, and
--   "\\0f:" .. owner -> -fence, "\\0limit" -> -limit, "\\0w:" .. owner -> -weight for a hold
--   above 1 permit, "\\0extra" -> -(what those add above 1 each), "\\0h" -> -1 once a holder
--   was handed the key or gave metadata (K[5] may hold records). The weight held is the number
--   of holds (expired ones not yet dropped included) minus "\\0extra"'s score; none of these
--   but the fences change while holds of 1 come and go.`;

// Shared by the scripts below: the key layout of one lock (all in one hash slot) and the hand-over.
// Lua creates a function each time execution passes its definition, so the enqueue and release
// scripts place this after their uncontended path, which needs none of it (the acquire script
// has no use for it at all).
const PRELUDE = `-- K: the five names of one lock (KEYS, unless a script that covers several locks sets it)
-- K[1] lock: held exclusively, a string, the owner token followed, if the hold has metadata,
--      by "\\0" .. metadata (PX ttl; "\\0" in front while callers queue behind it or someone
--      watches it, so that its release runs the full script; its fence is the counter's value:
--      nothing draws a fence while it is held); held shared, a sorted set (below), PEXPIREAT
--      its latest hold
-- K[2] fence counter   K[3] queue (list of owners, oldest first)
-- K[4] waiters (hash: owner -> "enqueuedUs deadlineUs ttlMs", plus " weight limit" if shared;
--      "\\0m:" .. owner -> the waiter's metadata, if it gave some; "\\0w" -> until when (ms)
--      some store watches K[1] (WATCH_SCRIPT), while one does: every change of the exclusive
--      holder is then PUBLISHed on K[1] .. "${WATCH_SUFFIX}": "+fence ttlMs", and " " .. metadata if the
--      hold has some, when a hold is granted; "-fence" when an operation ends it)
-- K[5] grants: beside an exclusive holder, "fence waitedMs owner" of the last hand-over (PX
--      ttl); beside shared holders, a hash owner -> "fence waitedMs" for each holder that was
--      handed the key and "\\0m:" .. owner -> metadata for each holder that gave some,
--      PEXPIREAT the latest hold as it stood when it was last written
${SHARED_LAYOUT}
local K = KEYS
local MARK = "\\0"
local MAX = ${MAX_FENCE}

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

-- Whether some store watches K[1]; tell() publishes a holder change to the watchers.
local function watched()
  return redis.call("HEXISTS", K[4], "\\0w") == 1
end
local function tell(text)
  redis.call("PUBLISH", K[1] .. "${WATCH_SUFFIX}", text)
end

-- Draws K[1]'s next fence; nil (the counter put back) once it would leave 1..MAX.
local function next_fence()
  local fence = redis.call("INCR", K[2])
  if fence < 1 or fence > MAX then
    redis.call("DECR", K[2])
    return nil
  end
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
      weights[#weights + 1] = "\\0w:" .. who[i]
      drop[#drop + 1] = who[i]
      drop[#drop + 1] = "\\0w:" .. who[i]
      drop[#drop + 1] = "\\0f:" .. who[i]
      records[#records + 1] = who[i]
      records[#records + 1] = "\\0m:" .. who[i]
    end
    local above = 0
    -- (a missing weight is false, not nil, so ipairs sees every one)
    for _, w in ipairs(redis.call(unpack(weights))) do
      if w then above = above - tonumber(w) - 1 end
    end
    redis.call(unpack(drop))
    if above > 0 then redis.call("ZINCRBY", K[1], above, "\\0extra") end
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
  local r = redis.call("ZMSCORE", K[1], "\\0extra", "\\0limit")
  return "shared", held - (tonumber(r[1]) or 0), -(tonumber(r[2]) or 0)
end

-- Adds a shared hold of weight w under limit for ttl ms (kind: how the key was held before),
-- with its fence, a grant record of its fence and wait if handed, and its metadata (meta, a
-- string, or nil); the caller retimes K[1] and K[5] afterwards.
local function hold_shared(who, w, limit, ttl, fence, waited, kind, now_ms, handed, meta)
  local add = {"ZADD", K[1], now_ms + ttl, who, -fence, "\\0f:" .. who}
  if kind == "none" then
    redis.call("DEL", K[5]) -- a grant record left by an exclusive holder that expired
    add[#add + 1] = -limit
    add[#add + 1] = "\\0limit"
  end
  if w ~= 1 then
    add[#add + 1] = -w
    add[#add + 1] = "\\0w:" .. who
  end
  if handed or meta then
    if kind ~= "none" and not redis.call("ZSCORE", K[1], "\\0h") then redis.call("DEL", K[5]) end
    add[#add + 1] = -1
    add[#add + 1] = "\\0h"
    local record = {"HSET", K[5]}
    if handed then
      record[3] = who
      record[4] = int(fence) .. " " .. int(waited)
    end
    if meta then
      record[#record + 1] = "\\0m:" .. who
      record[#record + 1] = meta
    end
    redis.call(unpack(record))
  end
  redis.call(unpack(add))
  if w ~= 1 then redis.call("ZINCRBY", K[1], 1 - w, "\\0extra") end
end

-- Drops who's shared hold; retimes the keys unless the caller hands over next (which does).
local function unhold(who, handing)
  local w = redis.call("ZSCORE", K[1], "\\0w:" .. who)
  redis.call("ZREM", K[1], who, "\\0w:" .. who, "\\0f:" .. who)
  if w then redis.call("ZINCRBY", K[1], -tonumber(w) - 1, "\\0extra") end
  redis.pcall("HDEL", K[5], who, "\\0m:" .. who)
  if not handing then retime() end
end

-- {1, fence, waitedMs} if who holds a live shared hold of K[1] at now_ms, else nil. Without its
-- grant record (never handed, or lost by hand) its fence and 0 ms waited are the answer (the
-- counter, conservatively, for a hold kept without its fence).
local function shared_grant(who, now_ms)
  local s = redis.call("ZMSCORE", K[1], who, "\\0f:" .. who)
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
    local entry = redis.call("HMGET", K[4], who, "\\0m:" .. who)
    local info, meta = entry[1], entry[2] or nil
    local enq, deadline, ttl, w, l
    if info then enq, deadline, ttl, w, l = string.match(info, "^(%d+) (%d+) (%d+) ?(%d*) ?(%d*)$") end
    w, l = tonumber(w), tonumber(l)
    if enq and tonumber(deadline) > now and not (w and kind == "shared" and redis.call("ZSCORE", K[1], who)) then
      local fits = kind == "none"
      if w and kind == "shared" then fits = limit == l and total + w <= l end
      if not fits then break end
      local fence = next_fence()
      if not fence then break end
      redis.call("LPOP", K[3])
      redis.call("HDEL", K[4], who, "\\0m:" .. who)
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
        if seen then tell("+" .. int(fence) .. " " .. ttl .. (meta and " " .. meta or "")) end
        kind = "exclusive"
      end
      grants[#grants + 1] = {who, int(fence), int(waited)}
    else
      redis.call("LPOP", K[3])
      redis.call("HDEL", K[4], who, "\\0m:" .. who)
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
    if fence then tell("-" .. fence) end
  end
  if string.sub(v, 1, 1) == MARK then hand_over(channel) end
end
`;

// Takes the free lock (ENQUEUE_SCRIPT): INCR the fence counter KEYS[2], SET KEYS[1] to `value`
// (the owner, and its metadata if any) PX ARGV[2]; `fence` is then the new counter value. A counter that would leave 1..MAX_FENCE is
// put back and the script answers an error. When the waiters hash exists (`seen`; nobody
// queues, so it is there for its "\\0w") and says someone watches, the value is marked, so that
// its release runs the full script, and the grant is published. Uses nothing from PRELUDE, so
// the uncontended path creates none of its functions.
const TAKE = `local fence = redis.call("INCR", KEYS[2])
if fence < 1 or fence > ${MAX_FENCE} then
  redis.call("DECR", KEYS[2])
  return redis.error_reply("ERR keel-lock: fence counter " .. KEYS[2] .. " is outside 1..${MAX_FENCE}")
end
if seen and redis.call("HEXISTS", KEYS[4], "\\0w") == 1 then
  redis.call("SET", KEYS[1], "\\0" .. value, "PX", ARGV[2])
  redis.call("PUBLISH", KEYS[1] .. "${WATCH_SUFFIX}", "+" .. string.format("%.0f", fence) .. " " .. ARGV[2] .. (ARGV[5] and " " .. ARGV[5] or ""))
else
  redis.call("SET", KEYS[1], value, "PX", ARGV[2])
end`;

// `text` with every line indented by two spaces, to nest a shared part inside a block.
const nested = (text) => text.replace(/^(?=.)/gm, "  ");

/**
 * Plain acquire (KEYS: lock, fence counter, queue, waiters; ARGV: the lock's value, ttl ms — the value is
 * the owner, followed by NUL and the hold's metadata when it has some, so metadata costs this
 * script nothing). SET KEYS[1] to ARGV[1] NX with a TTL of ARGV[2] ms; if it was held, answer 0. If callers are queued for it (KEYS[3]
 * exists: its holder's TTL passed while they waited), delete it again and answer -1: the store
 * then runs CHECK_SCRIPT for the key, which hands it to the oldest live waiter, and tries once
 * more — a newcomer never overtakes the queue. Otherwise INCR KEYS[2] (the fence counter) and
 * answer the new value (the fence).
 * A counter that would leave 1..2^53-1, or that INCR refuses (not an integer), is an error: the
 * counter is put back as it was and the lock deleted again, so every later acquire of the key
 * fails the same way.
 * While some store watches the key (the waiters hash KEYS[4] holds "\\0w") the value is marked
 * (a NUL in front, as while callers queue), so that its release runs the full release script,
 * which reports the end, and the grant is published on KEYS[1] .. WATCH_SUFFIX.
 * The uncontended path is three commands — SET NX, one EXISTS of the queue and waiters names,
 * INCR — and the script takes only the names that path reads (Redis parses every argument of
 * every call); a held key costs the SET NX alone.
 */
export const ACQUIRE_SCRIPT = `-- keel-lock acquire: if KEYS[1] is free and nobody queues (KEYS[3]), set it to ARGV[1] (the
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
local fence = redis.pcall("INCR", KEYS[2])
if type(fence) == "number" and fence >= 1 and fence <= ${MAX_FENCE} then
  if state == 1 and redis.call("HEXISTS", KEYS[4], "\\0w") == 1 then
    redis.call("SET", KEYS[1], "\\0" .. ARGV[1], "KEEPTTL")
    local nul = string.find(ARGV[1], "\\0", 1, true)
    redis.call("PUBLISH", KEYS[1] .. "${WATCH_SUFFIX}", "+" .. string.format("%.0f", fence) .. " " .. ARGV[2] .. (nul and " " .. string.sub(ARGV[1], nul + 1) or ""))
  end
  return fence
end
redis.call("DEL", KEYS[1])
if type(fence) ~= "number" then
  return fence
end
redis.call("DECR", KEYS[2])
return redis.error_reply("ERR keel-lock: fence counter " .. KEYS[2] .. " is outside 1..${MAX_FENCE}")
`;

/**
 * Several keys in one step (KEYS: four names per key, the keys in order: lock, fence counter,
 * queue, waiters; ARGV: ttl ms, then the owner of each key in the same order). Every key is
 * granted to its owner, as ACQUIRE_SCRIPT grants one, when ACQUIRE_SCRIPT would grant each of them
 * now; otherwise the script changes nothing and answers 0. A key is free when its lock name does
 * not exist (held exclusively or shared, it exists; an expired one does not) and no caller
 * waits for it: a key with a queued waiter whose deadline has not passed is the waiter's (the
 * check script would hand it over), while a queue of waiters that are all past their deadline
 * counts as empty and is dropped with the grant, as the hand-over would drop it. The grant: INCR
 * each counter (a counter that would leave 1..2^53-1, or that INCR refuses, puts every counter
 * back as it was and answers the error ACQUIRE_SCRIPT answers), then SET each lock to its value
 * (ARGV: the owner, followed by NUL and the hold's metadata when it has some, as ACQUIRE_SCRIPT
 * takes it) PX ttl; the answer is the fences in key order. A key some store watches (its waiters
 * hash holds "\\0w") is SET marked and its grant published, as ACQUIRE_SCRIPT does; a stale
 * queue's waiters go, its watch stays. Free keys cost three EXISTS for the whole set, one INCR
 * and one SET each (and the counters' MGET, which tells an undo which counters to delete).
 */
export const ACQUIRE_MANY_SCRIPT = `-- keel-lock acquire-many: four KEYS per key (lock, fence counter, queue, waiters), ARGV the ttl
-- ms and one owner per key; if acquire would take every key now, take them all and answer their
-- fences in order; else change nothing and answer 0
local locks, queues, counters, waiters = {"EXISTS"}, {"EXISTS"}, {"MGET"}, {"EXISTS"}
for i = 1, #KEYS, 4 do
  locks[#locks + 1] = KEYS[i]
  counters[#counters + 1] = KEYS[i + 1]
  queues[#queues + 1] = KEYS[i + 2]
  waiters[#waiters + 1] = KEYS[i + 3]
end
if redis.call(unpack(locks)) ~= 0 then return 0 end
-- Free keys with a queue: a live waiter is handed the key first; waiters past their deadline
-- are gone (the hand-over drops them), so a queue of only those is dropped with the grant.
local stale = {}
if redis.call(unpack(queues)) ~= 0 then
  local t = redis.call("TIME")
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  for i = 3, #KEYS, 4 do
    local from = 0
    repeat
      local who = redis.call("LRANGE", KEYS[i], from, from + 99)
      if #who > 0 then
        local info = redis.call("HMGET", KEYS[i + 1], unpack(who))
        for j = 1, #who do
          local enq, deadline
          if info[j] then enq, deadline = string.match(info[j], "^(%d+) (%d+) (%d+) ?(%d*) ?(%d*)$") end
          if enq and tonumber(deadline) > now then return 0 end
        end
        if from == 0 then stale[#stale + 1] = i end
      end
      from = from + 100
    until #who < 100
  end
end
-- Draw every fence first: a counter that cannot give one puts back those drawn before it (a
-- counter that did not exist is deleted again), so nothing has changed.
local before = redis.call(unpack(counters))
local fences = {}
for i = 2, #KEYS, 4 do
  local fence = redis.pcall("INCR", KEYS[i])
  if type(fence) ~= "number" or fence < 1 or fence > ${MAX_FENCE} then
    if type(fence) == "number" then redis.call("DECR", KEYS[i]) end
    for j = 1, #fences do
      if before[j] then redis.call("DECR", KEYS[4 * j - 2]) else redis.call("DEL", KEYS[4 * j - 2]) end
    end
    if type(fence) ~= "number" then return fence end
    return redis.error_reply("ERR keel-lock: fence counter " .. KEYS[i] .. " is outside 1..${MAX_FENCE}")
  end
  fences[#fences + 1] = fence
end
for _, i in ipairs(stale) do
  -- the waiters go; a watch ("\\0w") stays, until when it was
  local w = redis.call("HGET", KEYS[i + 1], "\\0w")
  redis.call("DEL", KEYS[i], KEYS[i + 1])
  if w then
    redis.call("HSET", KEYS[i + 1], "\\0w", w)
    redis.call("PEXPIREAT", KEYS[i + 1], w)
  end
end
-- watched keys are marked, so that their release reports the end, and their grants published
local seen = redis.call(unpack(waiters)) ~= 0
for j = 1, #fences do
  local i = 4 * j - 3
  if seen and redis.call("HEXISTS", KEYS[i + 3], "\\0w") == 1 then
    redis.call("SET", KEYS[i], "\\0" .. ARGV[j + 1], "PX", ARGV[1])
    local nul = string.find(ARGV[j + 1], "\\0", 1, true)
    redis.call("PUBLISH", KEYS[i] .. "${WATCH_SUFFIX}", "+" .. string.format("%.0f", fences[j]) .. " " .. ARGV[1] .. (nul and " " .. string.sub(ARGV[j + 1], nul + 1) or ""))
  else
    redis.call("SET", KEYS[i], ARGV[j + 1], "PX", ARGV[1])
  end
end
return fences
`;

/**
 * Acquire or queue (ARGV: owner, ttl ms, wait ms, channel, and the hold's metadata if it has
 * some). Free and nobody queued: take it as ACQUIRE_SCRIPT does (a watched key's grant marked
 * and published as there) and answer {1, fence}.
 * Otherwise join the queue (the waiter's deadline and TTL recorded by Redis's clock, and its
 * metadata beside them, for the grant), mark an exclusive holder's value so its release hands
 * over, and answer {0, ms until the first hold expires}. The queue and the waiters hash expire a
 * second after the last deadline.
 */
export const ENQUEUE_SCRIPT = `-- keel-lock acquire-or-wait: take KEYS[1] like acquire, or queue ARGV[1] for ARGV[3] ms
local value = ARGV[1]
if ARGV[5] then value = ARGV[1] .. "\\0" .. ARGV[5] end
-- 0: free; 1: held; 2: free with callers queued; 3: both; 4 more while the waiters hash exists
local state = redis.call("EXISTS", KEYS[1], KEYS[3], KEYS[3], KEYS[4], KEYS[4], KEYS[4], KEYS[4])
local seen = state >= 4
state = state % 4
if state == 0 then
${nested(TAKE)}
  return {1, fence}
end
${PRELUDE}
if state == 2 and not hand_over(ARGV[4]) then
  state = redis.call("EXISTS", KEYS[1], KEYS[3], KEYS[3], KEYS[4], KEYS[4], KEYS[4], KEYS[4])
  seen = state >= 4
  state = state % 4
end
if state == 0 then
${nested(TAKE)}
  return {1, fence}
end
local now = now_us()
local wait = tonumber(ARGV[3])
redis.call("RPUSH", KEYS[3], ARGV[1])
local entry = {"HSET", KEYS[4], ARGV[1], string.format("%.0f %.0f %s", now, now + wait * 1000, ARGV[2])}
if ARGV[5] then
  entry[5] = "\\0m:" .. ARGV[1]
  entry[6] = ARGV[5]
end
redis.call(unpack(entry))
for i = 3, 4 do
  if redis.call("PTTL", KEYS[i]) < wait + 1000 then redis.call("PEXPIRE", KEYS[i], wait + 1000) end
end
local v = redis.pcall("GET", KEYS[1])
if type(v) == "string" and string.sub(v, 1, 1) ~= MARK then redis.call("SET", KEYS[1], MARK .. v, "KEEPTTL") end
return {0, next_expiry(math.floor(now / 1000))}
`;

/**
 * Shared acquire, or queue (KEYS: the lock's five names; ARGV: owner, ttl ms, weight, limit,
 * wait ms, channel, and the hold's metadata if it has some: kept in K[5], or with the waiter's
 * entry until it is handed the key). Callers queued for the key are first handed it as far as
 * they fit. Then:
 * shared holders under another limit answer {2, their limit} (never queued); a hold fits when
 * nobody holds the key exclusively, nobody is still queued, and the weight held plus this one is
 * at most the limit: it is added (the next fence drawn) and the answer is {1, fence}. Otherwise,
 * with wait ms 0 (or an owner that already holds a shared hold of the key) {-1}; else the
 * caller joins the queue as ENQUEUE_SCRIPT queues and the answer is {0, ms until the first hold
 * expires}. A weight or limit outside 1..2^32-1, or a weight above the limit, is an error and
 * changes nothing.
 * With nobody queued, a free key or one held shared under the same limit with room is taken
 * before PRELUDE (whose functions Lua would create on every run): one EXISTS tells free, held and
 * queued apart; beside other holds one ZMSCORE reads the owner, the limit, the weight held and
 * the latest expiry (or fails: the key is held exclusively); the hold is one INCR and one ZADD
 * (the hold and its fence, the weight held, the limit on a free key, the latest expiry when it
 * is the latest), and PEXPIREAT only when it is the latest. The weight held counts expired holds
 * not yet dropped, so a hold that fits with them fits; anything else (a full key with an expired
 * hold, another limit, an owner asking again, a hold with metadata) goes the full way.
 */
export const ACQUIRE_SHARED_SCRIPT = `-- keel-lock shared acquire: add ARGV[1]'s hold of weight ARGV[3] under limit ARGV[4], or queue
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
    local r = redis.pcall("ZMSCORE", KEYS[1], ARGV[1], "\\0limit", "\\0extra")
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
  local fence = redis.pcall("INCR", KEYS[2])
  if type(fence) ~= "number" then return fence end
  if fence < 1 or fence > ${MAX_FENCE} then
    redis.call("DECR", KEYS[2])
    return redis.error_reply("ERR keel-lock: fence counter " .. KEYS[2] .. " is outside 1..${MAX_FENCE}")
  end
  -- (the expiry turned into text once: Redis formats each number argument of a call anew)
  local expiry = now_ms + ttl
  local at = expiry .. ""
  -- K[1] expires with its latest hold: a later one moves it
  local later = state == 0 or now_ms + redis.call("PTTL", KEYS[1]) < expiry
  local add = {"ZADD", KEYS[1], at, ARGV[1], -fence, "\\0f:" .. ARGV[1]}
  if state == 0 then
    add[7] = -l
    add[8] = "\\0limit"
  end
  if w ~= 1 then
    add[#add + 1] = -w
    add[#add + 1] = "\\0w:" .. ARGV[1]
  end
  redis.call(unpack(add))
  if w ~= 1 then redis.call("ZINCRBY", KEYS[1], 1 - w, "\\0extra") end
  if later then redis.call("PEXPIREAT", KEYS[1], at) end
  return {1, fence}
until true
${PRELUDE}
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
  if not fence then
    return redis.error_reply("ERR keel-lock: fence counter " .. K[2] .. " is outside 1..${MAX_FENCE}")
  end
  hold_shared(ARGV[1], w, l, ttl, fence, 0, kind, now_ms, false, ARGV[7])
  retime()
  return {1, fence}
end
if wait == 0 then return {-1} end
redis.call("RPUSH", K[3], ARGV[1])
local entry = {"HSET", K[4], ARGV[1], string.format("%.0f %.0f %.0f %.0f %.0f", now, now + wait * 1000, ttl, w, l)}
if ARGV[7] then
  entry[5] = "\\0m:" .. ARGV[1]
  entry[6] = ARGV[7]
end
redis.call(unpack(entry))
for i = 3, 4 do
  if redis.call("PTTL", K[i]) < wait + 1000 then redis.call("PEXPIRE", K[i], int(wait + 1000)) end
end
local v = redis.pcall("GET", K[1])
if type(v) == "string" and string.sub(v, 1, 1) ~= MARK then redis.call("SET", K[1], MARK .. v, "KEEPTTL") end
return {0, next_expiry(now_ms)}
`;

/**
 * The waiters of one store look — their safety-net poll, and the look at a hold's expiry — for
 * several locks in one call. KEYS: five names per lock (a lock's names, as the other scripts take
 * them, one lock after another). ARGV: the channel, then per lock the number of owners asked
 * about followed by those owners. A lock not held exclusively (free, or held shared: some hold
 * may have expired) is first handed to the waiters at the front of its queue, as far as they
 * fit. Answers one array per lock: ms until its first hold expires (-2 if none), then three
 * numbers per owner asked about: 1, fence, waitedMs if it was handed the key; -1, 0, 0 if it is
 * no longer queued (its deadline passed); 0, 0, 0 while it waits.
 */
export const CHECK_SCRIPT = `-- keel-lock look: for each lock (five KEYS each), which of the owners in ARGV were handed it?
-- a lock whose holders expired is handed over first
${PRELUDE}
local answers = {}
local at = 2
for first = 1, #KEYS, 5 do
  K = {KEYS[first], KEYS[first + 1], KEYS[first + 2], KEYS[first + 3], KEYS[first + 4]}
  local count = tonumber(ARGV[at])
  local v = redis.pcall("GET", K[1])
  if type(v) ~= "string" and redis.call("EXISTS", K[3]) == 1 then
    hand_over(ARGV[1])
    v = redis.pcall("GET", K[1])
  end
  -- an exclusive holder's value: its owner alone (holder() cuts off the mark and metadata)
  if type(v) == "string" and string.find(v, MARK, 2, true) then v = holder(v) end
  local now_ms = math.floor(now_us() / 1000)
  local answer = {next_expiry(now_ms)}
  for i = at + 1, at + count do
    local owner = ARGV[i]
    local g = nil
    if v == owner or v == MARK .. owner then
      g = granted(owner)
    elseif type(v) == "table" then
      g = shared_grant(owner, now_ms)
    end
    if g then
      answer[#answer + 1] = 1
      answer[#answer + 1] = g[2]
      answer[#answer + 1] = g[3]
    else
      answer[#answer + 1] = redis.call("HEXISTS", K[4], owner) == 1 and 0 or -1
      answer[#answer + 1] = 0
      answer[#answer + 1] = 0
    end
  end
  answers[#answers + 1] = answer
  at = at + count + 1
end
return answers
`;

/**
 * A waiter leaves (ARGV: owner, channel, "0" at its deadline or "1" to withdraw). If it was
 * handed the key already (exclusive or shared): at the deadline it keeps it and answers
 * {1, fence, waitedMs}; when withdrawing it releases it (the next waiters are handed the key)
 * and answers {2}. Otherwise it leaves the queue and answers {0}; an exclusive holder left with
 * nobody queued behind it is unmarked, and a key not held exclusively is handed to the waiters
 * now at the front as far as they fit (the one that left may have been the one that did not).
 */
export const LEAVE_SCRIPT = `-- keel-lock leave: take ARGV[1] out of KEYS[1]'s queue, or release the key it was handed
${PRELUDE}
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
redis.call("HDEL", KEYS[4], ARGV[1], "\\0m:" .. ARGV[1])
local queued = redis.call("EXISTS", KEYS[3]) == 1
if type(v) == "string" then
  if string.sub(v, 1, 1) == MARK and not queued and not watched() then redis.call("SET", KEYS[1], string.sub(v, 2), "KEEPTTL") end
elseif queued then
  hand_over(ARGV[2])
end
return {0}
`;

// Release, the exclusive holder's part: GET (in v) told K[1] is a string or missing. Its owner
// deletes it; a marked value (callers queued) goes on to hand over; anyone else answers 0. A
// value that is the owner alone is compared first: a hold without metadata costs no more.
const RELEASE_EXCLUSIVE = `if v == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
if v ~= "\\0" .. ARGV[1] then
  -- the owner followed by its metadata: owner .. "\\0" .. metadata (marked: "\\0" in front)
  local o = ARGV[1] .. "\\0"
  if not v then return 0 end
  if string.sub(v, 1, #o) == o then return redis.call("DEL", KEYS[1]) end
  if string.sub(v, 1, #o + 1) ~= "\\0" .. o then return 0 end
end`;

// Release, a shared holder's part: r is ZMSCORE of K[1] for the owner, its weight and the
// grant-record marker. A live hold is dropped (ZREM, and for a hold above 1 permit its weight);
// a look at the latest hold left (ZRANGE) then tells whether none is (DEL both keys) or K[1]
// expires earlier now (PEXPIREAT). With callers queued it goes on to hand over (t: the TIME
// read); otherwise it answers 1.
const RELEASE_SHARED = `if not r[1] then return 0 end
t = redis.call("TIME")
local s = tonumber(r[1])
if s <= tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) then
  return 0
end
if r[2] then
  redis.call("ZREM", KEYS[1], ARGV[1], "\\0f:" .. ARGV[1], "\\0w:" .. ARGV[1])
  redis.call("ZINCRBY", KEYS[1], -tonumber(r[2]) - 1, "\\0extra")
else
  redis.call("ZREM", KEYS[1], ARGV[1], "\\0f:" .. ARGV[1])
end
if r[3] then redis.call("HDEL", KEYS[5], ARGV[1], "\\0m:" .. ARGV[1]) end
if redis.call("EXISTS", KEYS[3]) == 0 then
  -- K[1] expires with the latest hold: only dropping that one moves its expiry
  local last = redis.call("ZRANGE", KEYS[1], -1, -1, "WITHSCORES")
  if not last[2] or tonumber(last[2]) <= 0 then
    redis.call("DEL", KEYS[1], KEYS[5])
  elseif tonumber(last[2]) < s then
    redis.call("PEXPIREAT", KEYS[1], last[2])
    if r[3] then redis.call("PEXPIREAT", KEYS[5], last[2]) end
  end
  return 1
end`;

// Both release scripts end here when callers queue: hand the key to the next waiters.
const RELEASE_HAND_OVER = `${PRELUDE}
local channel = string.sub(K[1], 1, string.find(K[1], "{", 1, true) - 1) .. "${CHANNEL}"
if not t then
  free(v, channel)
  return 1
end
clock_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
if not hand_over(channel) then retime() end
return 1`;

const SHARED_READ = `redis.pcall("ZMSCORE", KEYS[1], ARGV[1], "\\0w:" .. ARGV[1], "\\0h")`;

/**
 * Release (KEYS: the lock's five names; ARGV: owner): frees ARGV[1]'s hold only while it holds
 * it and answers 1 or 0. An exclusive holder with nobody queued is GET and DEL; a holder with
 * callers queued behind it (its value is marked) hands the key over in the same script. A
 * shared holder (K[1] is a sorted set, so GET fails: redis.pcall reads that as the type check)
 * drops its hold before PRELUDE: one ZMSCORE (its expiry and weight, the weight held, the latest
 * expiry, whether grant records exist), TIME, EXISTS of the queue, then DEL for the last hold or
 * ZREM and one ZADD (the weight held). With callers queued, the key goes to those at the front
 * that now fit.
 * The hand-over's channel is the prefix — what precedes the first "{" of the lock's name, as
 * the store escapes any "{" in it — followed by CHANNEL.
 */
export const RELEASE_SCRIPT = `-- keel-lock release: free ARGV[1]'s hold only while it holds it; hand the key to the next waiters
local v = redis.pcall("GET", KEYS[1])
local t
if type(v) == "table" then
  local r = ${SHARED_READ}
${nested(RELEASE_SHARED)}
else
${nested(RELEASE_EXCLUSIVE)}
end
${RELEASE_HAND_OVER}
`;

/**
 * The same release, asking first as for a shared holder (the store runs it for an owner it saw
 * take a shared hold): ZMSCORE fails on a string, and only then is the key read as an exclusive
 * holder's. It answers as RELEASE_SCRIPT does for any holder.
 */
export const RELEASE_SHARED_SCRIPT = `-- keel-lock release of a shared hold: as the release script, the shared holder's case first
local r = ${SHARED_READ}
local t, v
if r.err then
  v = redis.call("GET", KEYS[1])
${nested(RELEASE_EXCLUSIVE)}
else
${nested(RELEASE_SHARED)}
end
${RELEASE_HAND_OVER}
`;

/**
 * Extend (KEYS: lock, grants; ARGV: owner, ttl ms): resets ARGV[1]'s hold to expire in ARGV[2]
 * ms only while it holds it; answers 1 or 0. An exclusive holder is GET and PEXPIRE; a shared
 * holder's expiry is rescored and both keys expire with the latest hold.
 */
export const EXTEND_SCRIPT = `-- keel-lock extend: reset ARGV[1]'s hold to ARGV[2] ms only while ARGV[1] still holds it
local holder = redis.pcall("GET", KEYS[1])
if type(holder) ~= "table" then
  if holder ~= ARGV[1] and holder ~= "\\0" .. ARGV[1] then
    -- the owner followed by its metadata (kept: PEXPIRE leaves the value as it is)
    local o = ARGV[1] .. "\\0"
    if not holder or (string.sub(holder, 1, #o) ~= o and string.sub(holder, 1, #o + 1) ~= "\\0" .. o) then
      return 0
    end
  end
  return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
local t = redis.call("TIME")
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local s = redis.call("ZSCORE", KEYS[1], ARGV[1])
if not s or tonumber(s) <= now_ms then
  return 0
end
redis.call("ZADD", KEYS[1], now_ms + tonumber(ARGV[2]), ARGV[1])
-- K[1] (and K[2], the grant records) expire with the latest hold
local last = redis.call("ZRANGE", KEYS[1], -1, -1, "WITHSCORES")[2]
redis.call("PEXPIREAT", KEYS[1], last)
redis.call("PEXPIREAT", KEYS[2], last)
return 1
`;

/**
 * Force-release (ARGV: channel): frees every hold of KEYS[1] and answers 1, or 0 if nobody held
 * it. Queued waiters are handed the key, as on a release.
 */
export const FORCE_RELEASE_SCRIPT = `-- keel-lock force-release: free KEYS[1] whoever holds it; hand it to the next waiters
${PRELUDE}
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
`;

/**
 * Inspect (KEYS: the lock's five names; no ARGV): one atomic read, nothing written. Answers
 * {waiting, then fence, metadata, remainingMs for each live hold}: waiting is the number of
 * queued waiters whose deadline has not passed; a hold held exclusively has the counter's value
 * as its fence (nothing draws a fence while it is held) and its PTTL; each live shared hold
 * (scored after now) its own "\\0f:" fence — or its grant record's, or false for a hold kept
 * without either — and its expiry less now. Metadata is answered with "=" in front (false:
 * none), so a client that reads replies as JSON where it can (@upstash/redis) leaves it a string.
 * No owner is answered.
 */
export const INSPECT_SCRIPT = `-- keel-lock inspect: the live holds of KEYS[1] (fence, metadata, ms left) and its live waiters
local t = redis.call("TIME")
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now_ms = math.floor(now_us / 1000)
local answer = {0}
local v = redis.pcall("GET", KEYS[1])
if type(v) == "string" then
  if string.sub(v, 1, 1) == "\\0" then v = string.sub(v, 2) end
  local nul = string.find(v, "\\0", 1, true)
  answer[2] = tonumber(redis.pcall("GET", KEYS[2])) or false
  answer[3] = nul and "=" .. string.sub(v, nul + 1) or false
  answer[4] = math.max(0, redis.call("PTTL", KEYS[1]))
elseif v then
  local live = redis.call("ZRANGEBYSCORE", KEYS[1], string.format("(%.0f", now_ms), "+inf", "WITHSCORES")
  for first = 1, #live, 512 do
    local last = math.min(#live, first + 511)
    local fences, records = {"ZMSCORE", KEYS[1]}, {"HMGET", KEYS[5]}
    for i = first, last, 2 do
      fences[#fences + 1] = "\\0f:" .. live[i]
      records[#records + 1] = live[i]
      records[#records + 1] = "\\0m:" .. live[i]
    end
    fences = redis.call(unpack(fences))
    records = redis.pcall(unpack(records))
    if records.err then records = {} end
    for j = 1, #fences do
      local i = first + 2 * (j - 1)
      local fence = fences[j] and -tonumber(fences[j])
      if not fence and records[2 * j - 1] then fence = tonumber(string.match(records[2 * j - 1], "^(%d+) ")) end
      answer[#answer + 1] = fence or false
      answer[#answer + 1] = records[2 * j] and "=" .. records[2 * j] or false
      answer[#answer + 1] = tonumber(live[i + 1]) - now_ms
    end
  end
end
local from = 0
repeat
  local who = redis.call("LRANGE", KEYS[3], from, from + 99)
  if #who > 0 then
    local info = redis.call("HMGET", KEYS[4], unpack(who))
    for j = 1, #who do
      local deadline = info[j] and string.match(info[j], "^%d+ (%d+) ")
      if deadline and tonumber(deadline) > now_us then answer[1] = answer[1] + 1 end
    end
  end
  from = from + 100
until #who < 100
return answer
`;

/**
 * A store watches a lock, or stops (KEYS: lock, waiters, watch set; ARGV: the store's watcher id,
 * and the ms its watch lasts unless renewed, or "0" to stop). The watch set holds each watching
 * store's id until when it watches (ms by Redis's clock); the ids whose time passed are dropped,
 * and the set expires with its latest. While the set has an id, the waiters hash holds "\\0w" ->
 * that latest time (and lives at least as long), which tells the other scripts to publish; with
 * no id left it is removed. Watching also marks an exclusive holder's value, so that its release
 * runs the full release script (which reports the end). Answers 1 if the id was watching
 * already, 0 if not (a first watch, or its time had passed: changes may have gone unreported);
 * stopping answers 0.
 */
export const WATCH_SCRIPT = `-- keel-lock watch: ARGV[1] watches KEYS[1] for ARGV[2] ms (KEYS[3]: the watchers), or stops ("0")
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
  if type(v) == "string" and string.sub(v, 1, 1) ~= "\\0" then redis.call("SET", KEYS[1], "\\0" .. v, "KEEPTTL") end
end
local last = redis.call("ZRANGE", KEYS[3], -1, -1, "WITHSCORES")[2]
if last then
  redis.call("PEXPIREAT", KEYS[3], last)
  redis.call("HSET", KEYS[2], "\\0w", last)
  if redis.call("PTTL", KEYS[2]) < tonumber(last) - now_ms then redis.call("PEXPIREAT", KEYS[2], last) end
else
  redis.call("HDEL", KEYS[2], "\\0w")
end
if ms ~= 0 and was and tonumber(was) > now_ms then return 1 end
return 0
`;

/** SHA-1 of ACQUIRE_SCRIPT, the name Redis caches it under (checked by the tests). */
export const ACQUIRE_SHA = "99ce45b5965ffc59d9f4815bf04c143e0a7e3dc7";
/** SHA-1 of RELEASE_SCRIPT, the name Redis caches it under (checked by the tests). */
export const RELEASE_SHA = "a85f7c74a6570913fa323ff1a6c6ebec9ff17910";
/** SHA-1 of EXTEND_SCRIPT, the name Redis caches it under (checked by the tests). */
export const EXTEND_SHA = "35704053b2a3c6469f88bb2c7f6fbb2d3d691d9c";
/** SHA-1 of ENQUEUE_SCRIPT (checked by the tests). */
export const ENQUEUE_SHA = "f846fc15ea12a2069a74d5aa6e07216f706186a6";
/** SHA-1 of CHECK_SCRIPT (checked by the tests). */
export const CHECK_SHA = "3fcd5352d582a534274dd382586135f067fc8c12";
/** SHA-1 of LEAVE_SCRIPT (checked by the tests). */
export const LEAVE_SHA = "c499e12c268ad12019a2e248f0f9973c91afa3ef";
/** SHA-1 of FORCE_RELEASE_SCRIPT (checked by the tests). */
export const FORCE_RELEASE_SHA = "6eea0aa1f61a4f3ad0333be54034083138db419c";
/** SHA-1 of RELEASE_SHARED_SCRIPT (checked by the tests). */
export const RELEASE_SHARED_SHA = "e30dfcf42b0d782bfc5b6cf87fd715f918dc7b15";
/** SHA-1 of ACQUIRE_SHARED_SCRIPT (checked by the tests). */
export const ACQUIRE_SHARED_SHA = "a83f233a0a11c3fb2c4e61b5ac1f95af3dcdce1f";
/** SHA-1 of INSPECT_SCRIPT (checked by the tests). */
export const INSPECT_SHA = "85f4103368ca1e02da49a7fcce8e058a335960d3";
/** SHA-1 of WATCH_SCRIPT (checked by the tests). */
export const WATCH_SHA = "e03380eb06e84ba7f44c62e71304048cfe0eb7d6";
/** SHA-1 of ACQUIRE_MANY_SCRIPT (checked by the tests). */
export const ACQUIRE_MANY_SHA = "c4fc766f54cf1ce4c7ec55e0f89fb1cb24a543d5";

/**
 * Confirm (KEYS: lock, fence counter; ARGV: owner), for waitForReplicas after a hand-over: a
 * grant another connection's script made. While ARGV[1] holds KEYS[1] (exclusively, or a live
 * shared hold), the counter KEYS[2] is written again with its own value and the answer is 1;
 * otherwise 0 and nothing is written. That write changes nothing, but Redis replicates it like
 * any other, so a WAIT sent after it on the same connection covers every write made to the key
 * before it, the hand-over included (WAIT counts only the writes of its own connection).
 */
export const CONFIRM_SCRIPT = `-- keel-lock confirm: while ARGV[1] holds KEYS[1], write the fence counter KEYS[2] again as it is and answer 1
local holder = redis.pcall("GET", KEYS[1])
if type(holder) ~= "table" then
  if holder ~= ARGV[1] and holder ~= "\\0" .. ARGV[1] then
    -- the owner followed by its metadata
    local o = ARGV[1] .. "\\0"
    if not holder or (string.sub(holder, 1, #o) ~= o and string.sub(holder, 1, #o + 1) ~= "\\0" .. o) then
      return 0
    end
  end
else
  local t = redis.call("TIME")
  local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local s = redis.call("ZSCORE", KEYS[1], ARGV[1])
  if not s or tonumber(s) <= now_ms then
    return 0
  end
end
local fence = redis.call("GET", KEYS[2])
if not fence then
  return 0
end
redis.call("SET", KEYS[2], fence)
return 1
`;
/** SHA-1 of CONFIRM_SCRIPT (checked by the tests). */
export const CONFIRM_SHA = "e59ee01e0867694ae46d7cc887e88c70c463cb2a";

// How a script's answer reads.
export const isOne = (reply) => Number(reply) === 1;

export function fenceFrom(reply) {
  const value = typeof reply === "number" ? reply : typeof reply === "string" || typeof reply === "bigint" ? Number(reply) : NaN;
  if (value === 0) return false;
  if (!Number.isInteger(value) || value < 1 || value > MAX_FENCE) {
    throw new TypeError(`redisLockStore: acquire script answered ${String(reply)}, expected 0 or a fence in 1..${MAX_FENCE}`);
  }
  return { fence: value };
}

// ACQUIRE_MANY_SCRIPT's answer for `count` keys: 0, or one fence per key.
export function manyAnswer(reply, count) {
  if (Number(reply) === 0 && !Array.isArray(reply)) return false;
  if (!Array.isArray(reply) || reply.length !== count) {
    throw new TypeError(`redisLockStore: the acquire-many script answered ${String(reply)}, expected 0 or ${count} fences`);
  }
  return reply.map((fence) => {
    const got = fenceFrom(fence);
    if (!got) throw new TypeError(`redisLockStore: the acquire-many script answered a fence of ${String(fence)}`);
    return got;
  });
}

// INSPECT_SCRIPT's answer: { holders: [{ metadata, fence, remainingMs }], waiting }, the holds in
// fence order (those without a fence last, by time left).
export function inspectAnswer(reply) {
  if (!Array.isArray(reply) || reply.length % 3 !== 1) {
    throw new TypeError(`redisLockStore: the inspect script answered ${String(reply)}`);
  }
  const holders = [];
  for (let i = 1; i < reply.length; i += 3) {
    const [fence, metadata, remainingMs] = [reply[i], reply[i + 1], reply[i + 2]];
    holders.push({
      metadata: metadata === null || metadata === undefined ? null : String(metadata).slice(1),
      fence: fence === null || fence === undefined ? null : Number(fence),
      remainingMs: Math.max(0, Math.floor(Number(remainingMs))),
    });
  }
  if (holders.length > 1) {
    holders.sort((a, b) => (a.fence === null) - (b.fence === null) || (a.fence ?? 0) - (b.fence ?? 0) || a.remainingMs - b.remainingMs);
  }
  return { holders, waiting: Number(reply[0]) };
}

// ACQUIRE_SHARED_SCRIPT's answer without waiting: {1, fence}, {2, heldLimit}, or {-1}.
export function sharedAnswer(reply) {
  if (!Array.isArray(reply)) throw new TypeError(`redisLockStore: the shared acquire script answered ${String(reply)}`);
  const state = Number(reply[0]);
  if (state === 1) return fenceFrom(reply[1]);
  if (state === 2) return { heldLimit: Number(reply[1]) };
  return false;
}
