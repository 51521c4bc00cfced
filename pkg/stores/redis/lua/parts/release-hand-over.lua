--- Both release scripts end here for a marked exclusive holder (callers queue, or someone
--- watches the key), freed here by free(), which tells the watchers, and for a shared holder with
--- callers queued, whose hold its part dropped already (t: the TIME that part read); then the key
--- goes to the next waiters.

-- include parts/prelude.lua

local channel = string.sub(K[1], 1, string.find(K[1], "{", 1, true) - 1) .. "{{CHANNEL}}"
if not t then
  free(v, channel)
  return 1
end
clock_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
if not hand_over(channel) then retime() end
return 1
