--- Extend (KEYS: lock, grants; ARGV: owner, ttl ms): resets ARGV[1]'s hold to expire in ARGV[2]
--- ms only while it holds it; answers 1 or 0. An exclusive holder is GET and PEXPIRE; a shared
--- holder's expiry is rescored and both keys expire with the latest hold.

-- keel-lock extend: reset ARGV[1]'s hold to ARGV[2] ms only while ARGV[1] still holds it
local holder = redis.pcall("GET", KEYS[1])
if type(holder) ~= "table" then
  -- include parts/refuse-other-holder.lua holder=holder owner=ARGV[1]
  -- the metadata after the owner stays: PEXPIRE leaves the value as it is
  return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
-- include parts/refuse-lapsed-shared-holder.lua holds=KEYS[1] owner=ARGV[1]
redis.call("ZADD", KEYS[1], now_ms + tonumber(ARGV[2]), ARGV[1])
-- K[1] (and K[2], the grant records) expire with the latest hold
local last = redis.call("ZRANGE", KEYS[1], -1, -1, "WITHSCORES")[2]
redis.call("PEXPIREAT", KEYS[1], last)
redis.call("PEXPIREAT", KEYS[2], last)
return 1
