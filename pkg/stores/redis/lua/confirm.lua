--- Confirm (KEYS: lock, fence counter; ARGV: owner), for waitForReplicas after a hand-over: a
--- grant another connection's script made. While ARGV[1] holds KEYS[1] (exclusively, or a live
--- shared hold), the counter KEYS[2] is written again with its own value and the answer is 1;
--- otherwise 0 and nothing is written. That write changes nothing, but Redis replicates it like
--- any other, so a WAIT sent after it on the same connection covers every write made to the key
--- before it, the hand-over included (WAIT counts only the writes of its own connection).

-- keel-lock confirm: while ARGV[1] holds KEYS[1], write the fence counter KEYS[2] again as it is and answer 1
local holder = redis.pcall("GET", KEYS[1])
if type(holder) ~= "table" then
  -- include parts/refuse-other-holder.lua holder=holder owner=ARGV[1]
else
  -- include parts/refuse-lapsed-shared-holder.lua holds=KEYS[1] owner=ARGV[1]
end
local fence = redis.call("GET", KEYS[2])
if not fence then
  return 0
end
redis.call("SET", KEYS[2], fence)
return 1
