--- Release, the shared holder's read (release.lua, release-shared.lua): ZMSCORE of K[1] for the
--- owner's expiry, its weight and the grant-record marker; an error when K[1] is a string.
local r = redis.pcall("ZMSCORE", KEYS[1], ARGV[1], "\0w:" .. ARGV[1], "\0h")
