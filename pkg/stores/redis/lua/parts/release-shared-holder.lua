--- Release, a shared holder's part: r is ZMSCORE of K[1] for the owner, its weight and the
--- grant-record marker. A live hold is dropped (ZREM, and for a hold above 1 permit its weight);
--- a look at the latest hold left (ZRANGE) then tells whether none is (DEL both keys) or K[1]
--- expires earlier now (PEXPIREAT). With callers queued it goes on to hand over (t: the TIME
--- read); otherwise it answers 1.

if not r[1] then return 0 end
t = redis.call("TIME")
local s = tonumber(r[1])
if s <= tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) then
  return 0
end
if r[2] then
  redis.call("ZREM", KEYS[1], ARGV[1], "\0f:" .. ARGV[1], "\0w:" .. ARGV[1])
  redis.call("ZINCRBY", KEYS[1], -tonumber(r[2]) - 1, "\0extra")
else
  redis.call("ZREM", KEYS[1], ARGV[1], "\0f:" .. ARGV[1])
end
if r[3] then redis.call("HDEL", KEYS[5], ARGV[1], "\0m:" .. ARGV[1]) end
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
end
