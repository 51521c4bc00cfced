--- Release, the exclusive holder's part: GET (in v) told K[1] is a string or missing. Its owner
--- deletes it; a marked value (callers queued) goes on to hand over; anyone else answers 0. A
--- value that is the owner alone is compared first: a hold without metadata costs no more.

if v == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
if v ~= "\0" .. ARGV[1] then
  -- the owner followed by its metadata: owner .. "\0" .. metadata (marked: "\0" in front)
  local o = ARGV[1] .. "\0"
  if not v then return 0 end
  if string.sub(v, 1, #o) == o then return redis.call("DEL", KEYS[1]) end
  if string.sub(v, 1, #o + 1) ~= "\0" .. o then return 0 end
end
