--- The fence draw, the one way every script takes a fence from a counter: INCR {{counter}} into a
--- new local `fence`, which is a number only when a fence was drawn. A counter that would leave
--- 1..MAX_FENCE is put back (DECR) and `fence` is the error reply naming it. A counter INCR
--- refuses (not an integer) is INCR's error, raised through redis.{{call}}: with `call` it stops
--- the script, with `pcall` `fence` is that error reply, for the includer to undo what it wrote
--- and answer it. Included, not called: a function would be created on every run of the scripts
--- whose uncontended path draws a fence.

local fence = redis.{{call}}("INCR", {{counter}})
if type(fence) == "number" and (fence < 1 or fence > {{MAX_FENCE}}) then
  redis.call("DECR", {{counter}})
  fence = redis.error_reply("ERR keel-lock: fence counter " .. {{counter}} .. " is outside 1..{{MAX_FENCE}}")
end
