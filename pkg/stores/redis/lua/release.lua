--- Release (KEYS: the lock's five names; ARGV: owner): frees ARGV[1]'s hold only while it holds
--- it and answers 1 or 0. An exclusive holder with nobody queued is GET and DEL; a holder with
--- callers queued behind it (its value is marked) hands the key over in the same script. A
--- shared holder (K[1] is a sorted set, so GET fails: redis.pcall reads that as the type check)
--- drops its hold before parts/prelude.lua: one ZMSCORE (its expiry and weight, the weight held, the latest
--- expiry, whether grant records exist), TIME, EXISTS of the queue, then DEL for the last hold or
--- ZREM and one ZADD (the weight held). With callers queued, the key goes to those at the front
--- that now fit.
--- The hand-over's channel is the prefix — what precedes the first "{" of the lock's name, as
--- the store escapes any "{" in it — followed by CHANNEL.

-- keel-lock release: free ARGV[1]'s hold only while it holds it; hand the key to the next waiters
local v = redis.pcall("GET", KEYS[1])
local t
if type(v) == "table" then
  -- include parts/release-shared-read.lua
  -- include parts/release-shared-holder.lua
else
  -- include parts/release-exclusive-holder.lua
end
-- include parts/release-hand-over.lua
