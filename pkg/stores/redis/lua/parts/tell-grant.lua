--- Tells the watchers of the lock {{lock}} (the caller found its waiters hash's "\0w") that a hold
--- was granted with fence {{fence}} for {{ttl}} ms: "+fence ttlMs" on {{lock}} .. WATCH_SUFFIX,
--- and " " .. metadata when the hold has some ({{meta}}: the metadata, or nil or false).

redis.call("PUBLISH", {{lock}} .. "{{WATCH_SUFFIX}}", "+" .. string.format("%.0f", {{fence}}) .. " " .. {{ttl}} .. ({{meta}} and " " .. {{meta}} or ""))
