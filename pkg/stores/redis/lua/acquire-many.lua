--- Several keys in one step (KEYS: four names per key, the keys in order: lock, fence counter,
--- queue, waiters; ARGV: ttl ms, then the owner of each key in the same order). Every key is
--- granted to its owner, as acquire.lua grants one, when acquire.lua would grant each of them
--- now; otherwise the script changes nothing and answers 0. A key is free when its lock name does
--- not exist (held exclusively or shared, it exists; an expired one does not) and no caller
--- waits for it: a key with a queued waiter whose deadline has not passed is the waiter's (the
--- check script would hand it over), while a queue of waiters that are all past their deadline
--- counts as empty and is dropped with the grant, as the hand-over would drop it. The grant: INCR
--- each counter (a counter that would leave 1..2^53-1, or that INCR refuses, puts every counter
--- back as it was and answers the error acquire.lua answers), then SET each lock to its value
--- (ARGV: the owner, followed by NUL and the hold's metadata when it has some, as acquire.lua
--- takes it) PX ttl; the answer is the fences in key order. A key some store watches (its waiters
--- hash holds "\0w") is SET marked and its grant published, as acquire.lua does; a stale
--- queue's waiters go, its watch stays. Free keys cost three EXISTS for the whole set, one INCR
--- and one SET each (and the counters' MGET, which tells an undo which counters to delete).

-- keel-lock acquire-many: four KEYS per key (lock, fence counter, queue, waiters), ARGV the ttl
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
  -- include parts/draw-fence.lua call=pcall counter=KEYS[i]
  if type(fence) ~= "number" then
    for j = 1, #fences do
      if before[j] then redis.call("DECR", KEYS[4 * j - 2]) else redis.call("DEL", KEYS[4 * j - 2]) end
    end
    return fence
  end
  fences[#fences + 1] = fence
end
for _, i in ipairs(stale) do
  -- the waiters go; a watch ("\0w") stays, until when it was
  local w = redis.call("HGET", KEYS[i + 1], "\0w")
  redis.call("DEL", KEYS[i], KEYS[i + 1])
  if w then
    redis.call("HSET", KEYS[i + 1], "\0w", w)
    redis.call("PEXPIREAT", KEYS[i + 1], w)
  end
end
-- watched keys are marked, so that their release reports the end, and their grants published
local seen = redis.call(unpack(waiters)) ~= 0
for j = 1, #fences do
  local i = 4 * j - 3
  if seen and redis.call("HEXISTS", KEYS[i + 3], "\0w") == 1 then
    redis.call("SET", KEYS[i], "\0" .. ARGV[j + 1], "PX", ARGV[1])
    local nul = string.find(ARGV[j + 1], "\0", 1, true)
    local meta = nul and string.sub(ARGV[j + 1], nul + 1)
    -- include parts/tell-grant.lua lock=KEYS[i] fence=fences[j] ttl=ARGV[1] meta=meta
  else
    redis.call("SET", KEYS[i], ARGV[j + 1], "PX", ARGV[1])
  end
end
return fences
