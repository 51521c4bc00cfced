--- The waiters of one store look — their safety-net poll, and the look at a hold's expiry — for
--- several locks in one call. KEYS: five names per lock (a lock's names, as the other scripts take
--- them, one lock after another). ARGV: the channel, then per lock the number of owners asked
--- about followed by those owners. A lock not held exclusively (free, or held shared: some hold
--- may have expired) is first handed to the waiters at the front of its queue, as far as they
--- fit. Answers one array per lock: ms until its first hold expires (-2 if none), then three
--- numbers per owner asked about: 1, fence, waitedMs if it was handed the key; -1, 0, 0 if it is
--- no longer queued (its deadline passed); 0, 0, 0 while it waits.

-- keel-lock look: for each lock (five KEYS each), which of the owners in ARGV were handed it?
-- a lock whose holders expired is handed over first
-- include parts/prelude.lua

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
