--- The same release, asking first as for a shared holder (the store runs it for an owner it saw
--- take a shared hold): ZMSCORE fails on a string, and only then is the key read as an exclusive
--- holder's. It answers as release.lua does for any holder.

-- keel-lock release of a shared hold: as the release script, the shared holder's case first
-- include parts/release-shared-read.lua
local t, v
if r.err then
  v = redis.call("GET", KEYS[1])
  -- include parts/release-exclusive-holder.lua
else
  -- include parts/release-shared-holder.lua
end
-- include parts/release-hand-over.lua
