--- Inspect (KEYS: the lock's five names; no ARGV): one atomic read, nothing written. Answers
--- {waiting, then fence, metadata, remainingMs for each live hold}: waiting is the number of
--- queued waiters whose deadline has not passed; a hold held exclusively has the counter's value
--- as its fence (nothing draws a fence while it is held) and its PTTL; each live shared hold
--- (scored after now) its own "\0f:" fence — or its grant record's, or false for a hold kept
--- without either — and its expiry less now. Metadata is answered with "=" in front (false:
--- none), so a client that reads replies as JSON where it can (@upstash/redis) leaves it a string.
--- No owner is answered.

-- keel-lock inspect: the live holds of KEYS[1] (fence, metadata, ms left) and its live waiters
local t = redis.call("TIME")
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now_ms = math.floor(now_us / 1000)
local answer = {0}
local v = redis.pcall("GET", KEYS[1])
if type(v) == "string" then
  if string.sub(v, 1, 1) == "\0" then v = string.sub(v, 2) end
  local nul = string.find(v, "\0", 1, true)
  answer[2] = tonumber(redis.pcall("GET", KEYS[2])) or false
  answer[3] = nul and "=" .. string.sub(v, nul + 1) or false
  answer[4] = math.max(0, redis.call("PTTL", KEYS[1]))
elseif v then
  local live = redis.call("ZRANGEBYSCORE", KEYS[1], string.format("(%.0f", now_ms), "+inf", "WITHSCORES")
  for first = 1, #live, 512 do
    local last = math.min(#live, first + 511)
    local fences, records = {"ZMSCORE", KEYS[1]}, {"HMGET", KEYS[5]}
    for i = first, last, 2 do
      fences[#fences + 1] = "\0f:" .. live[i]
      records[#records + 1] = live[i]
      records[#records + 1] = "\0m:" .. live[i]
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
