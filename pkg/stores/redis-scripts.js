// keel-lock/redis: the Lua scripts the store runs, their SHA-1 digests (a test recomputes them
// from the text, so no SCRIPT LOAD round trip is needed), and how a script's answer reads. The
// key layout and what each script does to it: stores/README.md, "keel-lock/redis".

import { MAX_FENCE } from "./args.js";

// Every hand-over under prefix P is published on the channel P + CHANNEL.
export const CHANNEL = "keel-lock:handover";
// Shared by the scripts below: the key layout of one lock (all in one hash slot) and the hand-over.
// Lua creates a function each time execution passes its definition, so the enqueue and release
// scripts place this after their uncontended path, which needs none of it (the acquire script
// has no use for it at all).
const PRELUDE = `-- K: the five names of one lock (KEYS, unless a script that covers several locks sets it)
-- K[1] lock (owner token, PX ttl; "\\0" .. owner while callers queue behind it)
-- K[2] fence counter   K[3] queue (list of owners, oldest first)
-- K[4] waiters (hash: owner -> "enqueuedUs deadlineUs ttlMs")
-- K[5] grant record ("fence waitedMs owner", PX ttl) of the last hand-over
local K = KEYS
local MARK = "\\0"
local MAX = ${MAX_FENCE}

local function now_us()
  local t = redis.call("TIME")
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Draws K[1]'s next fence; nil (the counter put back) once it would leave 1..MAX.
local function next_fence()
  local fence = redis.call("INCR", K[2])
  if fence < 1 or fence > MAX then
    redis.call("DECR", K[2])
    return nil
  end
  return fence
end

-- Hands the key to the oldest waiter whose deadline has not passed, dropping the others on the
-- way: SET the lock to it for its TTL, draw its fence, record the grant and PUBLISH it on
-- channel. Answers owner, fence, waitedMs, or nil when nobody was handed the key (the queue
-- held nobody alive, or the fence counter cannot go higher).
local function grant_next(channel)
  local now = now_us()
  while true do
    local who = redis.call("LINDEX", K[3], 0)
    if not who then return nil end
    local info = redis.call("HGET", K[4], who)
    local enq, deadline, ttl
    if info then enq, deadline, ttl = string.match(info, "^(%d+) (%d+) (%d+)$") end
    if enq and tonumber(deadline) > now then
      local fence = next_fence()
      if not fence then return nil end
      redis.call("LPOP", K[3])
      redis.call("HDEL", K[4], who)
      local waited = math.floor((now - tonumber(enq)) / 1000)
      if waited < 0 then waited = 0 end
      local value = who
      if redis.call("EXISTS", K[3]) == 1 then value = MARK .. who end
      redis.call("SET", K[1], value, "PX", ttl)
      local f, w = string.format("%.0f", fence), string.format("%.0f", waited)
      redis.call("SET", K[5], f .. " " .. w .. " " .. who, "PX", ttl)
      redis.call("PUBLISH", channel, cjson.encode({K[1], who, f, w, ttl}))
      return who, fence, waited
    end
    redis.call("LPOP", K[3])
    redis.call("HDEL", K[4], who)
  end
end

-- What a waiter that holds the key (handed over) answers: {1, fence, waitedMs}, from the grant
-- record; without one (it expired with an earlier holder) the counter is still this holder's
-- fence, and 0 ms waited is the conservative answer.
local function granted(owner)
  local g = redis.call("GET", K[5])
  if g then
    local f, w, who = string.match(g, "^(%d+) (%d+) (.*)$")
    if who == owner then return {1, tonumber(f), tonumber(w)} end
  end
  return {1, tonumber(redis.call("GET", K[2])), 0}
end

-- Frees the key held with value v (the caller checked the owner); a marked key goes to the next
-- waiter.
local function free(v, channel)
  redis.call("DEL", K[1], K[5])
  if string.sub(v, 1, 1) == MARK then grant_next(channel) end
end
`;

// Takes the free lock (ENQUEUE_SCRIPT): INCR the fence counter KEYS[2], SET KEYS[1] to ARGV[1]
// PX ARGV[2]; `fence` is then the new counter value. A counter that would leave 1..MAX_FENCE is
// put back and the script answers an error. Uses nothing from PRELUDE, so the uncontended path
// creates none of its functions.
const TAKE = `local fence = redis.call("INCR", KEYS[2])
if fence < 1 or fence > ${MAX_FENCE} then
  redis.call("DECR", KEYS[2])
  return redis.error_reply("ERR keel-lock: fence counter " .. KEYS[2] .. " is outside 1..${MAX_FENCE}")
end
redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])`;

// `text` with every line indented by two spaces, to nest a shared part inside a block.
const nested = (text) => text.replace(/^(?=.)/gm, "  ");

/**
 * Plain acquire (KEYS: lock, fence counter, queue; ARGV: owner, ttl ms). SET KEYS[1] to ARGV[1]
 * NX with a TTL of ARGV[2] ms; if it was held, answer 0. If callers are queued for it (KEYS[3]
 * exists: its holder's TTL passed while they waited), delete it again and answer -1: the store
 * then runs CHECK_SCRIPT for the key, which hands it to the oldest live waiter, and tries once
 * more — a newcomer never overtakes the queue. Otherwise INCR KEYS[2] (the fence counter) and
 * answer the new value (the fence).
 * A counter that would leave 1..2^53-1, or that INCR refuses (not an integer), is an error: the
 * counter is put back as it was and the lock deleted again, so every later acquire of the key
 * fails the same way.
 * The uncontended path is three commands — SET NX, a one-key EXISTS, INCR — and the script
 * takes only the names that path reads (Redis parses every argument of every call); a held key
 * costs the SET NX alone.
 */
export const ACQUIRE_SCRIPT = `-- keel-lock acquire: if KEYS[1] is free and nobody queues (KEYS[3]), set it to ARGV[1] (the
-- owner) for ARGV[2] ms and answer the next fence from the counter KEYS[2]; 0 while it is held;
-- -1 when it is free with callers queued (the check script hands it over)
if not redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
  return 0
end
if redis.call("EXISTS", KEYS[3]) == 1 then
  redis.call("DEL", KEYS[1])
  return -1
end
local fence = redis.pcall("INCR", KEYS[2])
if type(fence) == "number" and fence >= 1 and fence <= ${MAX_FENCE} then
  return fence
end
redis.call("DEL", KEYS[1])
if type(fence) ~= "number" then
  return fence
end
redis.call("DECR", KEYS[2])
return redis.error_reply("ERR keel-lock: fence counter " .. KEYS[2] .. " is outside 1..${MAX_FENCE}")
`;

/**
 * Acquire or queue (ARGV: owner, ttl ms, wait ms, channel). Free and nobody queued: take it as
 * ACQUIRE_SCRIPT does and answer {1, fence}. Otherwise join the queue (the waiter's deadline and
 * TTL recorded by Redis's clock), mark the holder's value so its release hands over, and answer
 * {0, PTTL of the lock}. The queue and the waiters hash expire a second after the last deadline.
 */
export const ENQUEUE_SCRIPT = `-- keel-lock acquire-or-wait: take KEYS[1] like acquire, or queue ARGV[1] for ARGV[3] ms
local state = redis.call("EXISTS", KEYS[1], KEYS[3], KEYS[3])
if state == 0 then
${nested(TAKE)}
  return {1, fence}
end
${PRELUDE}
if state == 2 and not grant_next(ARGV[4]) then
  state = redis.call("EXISTS", KEYS[1], KEYS[3], KEYS[3])
end
if state == 0 then
${nested(TAKE)}
  return {1, fence}
end
local now = now_us()
local wait = tonumber(ARGV[3])
redis.call("RPUSH", KEYS[3], ARGV[1])
redis.call("HSET", KEYS[4], ARGV[1], string.format("%.0f %.0f %s", now, now + wait * 1000, ARGV[2]))
for i = 3, 4 do
  if redis.call("PTTL", KEYS[i]) < wait + 1000 then redis.call("PEXPIRE", KEYS[i], wait + 1000) end
end
local v = redis.call("GET", KEYS[1])
if v and string.sub(v, 1, 1) ~= MARK then redis.call("SET", KEYS[1], MARK .. v, "KEEPTTL") end
return {0, redis.call("PTTL", KEYS[1])}
`;

/**
 * The waiters of one store look — their safety-net poll, and the look at a holder's expiry — for
 * several locks in one call. KEYS: five names per lock (a lock's names, as the other scripts take
 * them, one lock after another). ARGV: the channel, then per lock the number of owners asked
 * about followed by those owners. A lock that is gone (its holder's TTL passed) is first handed
 * to its oldest live waiter. Answers one array per lock: the lock's PTTL, then three numbers per
 * owner asked about: 1, fence, waitedMs if it was handed the key; -1, 0, 0 if it is no longer
 * queued (its deadline passed); 0, 0, 0 while it waits.
 */
export const CHECK_SCRIPT = `-- keel-lock look: for each lock (five KEYS each), which of the owners in ARGV were handed it?
-- a lock whose holder expired is handed over first
${PRELUDE}
local answers = {}
local at = 2
for first = 1, #KEYS, 5 do
  K = {KEYS[first], KEYS[first + 1], KEYS[first + 2], KEYS[first + 3], KEYS[first + 4]}
  local count = tonumber(ARGV[at])
  local v = redis.call("GET", K[1])
  if not v and redis.call("EXISTS", K[3]) == 1 then
    grant_next(ARGV[1])
    v = redis.call("GET", K[1])
  end
  local answer = {redis.call("PTTL", K[1])}
  for i = at + 1, at + count do
    local owner = ARGV[i]
    if v == owner or v == MARK .. owner then
      local g = granted(owner)
      answer[#answer + 1] = 1
      answer[#answer + 1] = g[2]
      answer[#answer + 1] = g[3]
    else
      answer[#answer + 1] = redis.call("HEXISTS", K[4], owner) == 1 and 0 or -1
      answer[#answer + 1] = 0
      answer[#answer + 1] = 0
    end
  end
  answers[#answers + 1] = answer
  at = at + count + 1
end
return answers
`;

/**
 * A waiter leaves (ARGV: owner, channel, "0" at its deadline or "1" to withdraw). If it was
 * handed the key already: at the deadline it keeps it and answers {1, fence, waitedMs}; when
 * withdrawing it releases it (the next waiter is handed the key) and answers {2}. Otherwise it
 * leaves the queue and answers {0}; a holder left with nobody queued behind it is unmarked.
 */
export const LEAVE_SCRIPT = `-- keel-lock leave: take ARGV[1] out of KEYS[1]'s queue, or release the key it was handed
${PRELUDE}
local v = redis.call("GET", KEYS[1])
if v == ARGV[1] or v == MARK .. ARGV[1] then
  if ARGV[3] ~= "1" then return granted(ARGV[1]) end
  free(v, ARGV[2])
  return {2}
end
redis.call("LREM", KEYS[3], 0, ARGV[1])
redis.call("HDEL", KEYS[4], ARGV[1])
if v and string.sub(v, 1, 1) == MARK and redis.call("EXISTS", KEYS[3]) == 0 then
  redis.call("SET", KEYS[1], string.sub(v, 2), "KEEPTTL")
end
return {0}
`;

/**
 * Release (KEYS: the lock's five names; ARGV: owner): deletes KEYS[1] only while ARGV[1] holds it
 * and answers 1 or 0. With nobody queued that is GET and DEL; a holder with callers queued behind
 * it (its value is marked) hands the key to the oldest live waiter in the same script. The
 * hand-over's channel is the prefix — what precedes the first "{" of the lock's name, as the
 * store escapes any "{" in it — followed by CHANNEL.
 */
export const RELEASE_SCRIPT = `-- keel-lock release: delete the key only while ARGV[1] still holds it; hand it to the next waiter
local v = redis.call("GET", KEYS[1])
if v == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
if v ~= "\\0" .. ARGV[1] then
  return 0
end
${PRELUDE}
free(v, string.sub(K[1], 1, string.find(K[1], "{", 1, true) - 1) .. "${CHANNEL}")
return 1
`;

/** Resets KEYS[1]'s TTL to ARGV[2] ms only while ARGV[1] still holds it. Answers 1 or 0. */
export const EXTEND_SCRIPT = `-- keel-lock extend: reset the key's TTL to ARGV[2] ms only while ARGV[1] still holds it
local holder = redis.call("GET", KEYS[1])
if holder ~= ARGV[1] and holder ~= "\\0" .. ARGV[1] then
  return 0
end
return redis.call("PEXPIRE", KEYS[1], ARGV[2])
`;

/**
 * Force-release (ARGV: channel): deletes KEYS[1] whoever holds it and answers 1, or 0 if nobody
 * did. A queued waiter is handed the key, as on a release.
 */
export const FORCE_RELEASE_SCRIPT = `-- keel-lock force-release: free KEYS[1] whoever holds it; hand it to the next waiter
${PRELUDE}
local v = redis.call("GET", KEYS[1])
if v then
  free(v, ARGV[1])
  return 1
end
if redis.call("EXISTS", KEYS[3]) == 1 then grant_next(ARGV[1]) end
return 0
`;

/** SHA-1 of ACQUIRE_SCRIPT, the name Redis caches it under (checked by the tests). */
export const ACQUIRE_SHA = "c63daa244b0ba5f38a0cdf96979f88f3c55d200e";
/** SHA-1 of RELEASE_SCRIPT, the name Redis caches it under (checked by the tests). */
export const RELEASE_SHA = "a914215d28d7ec31b845abc66011c4d61084b9b7";
/** SHA-1 of EXTEND_SCRIPT, the name Redis caches it under (checked by the tests). */
export const EXTEND_SHA = "a64738b7daa6da2e5b5604faf596399fdb28ebd0";
/** SHA-1 of ENQUEUE_SCRIPT (checked by the tests). */
export const ENQUEUE_SHA = "72ce7d545219d89dcbca19a6c7fd3700d5d8483e";
/** SHA-1 of CHECK_SCRIPT (checked by the tests). */
export const CHECK_SHA = "74f0075b0db960daca76f86b254a1d42c7fe5954";
/** SHA-1 of LEAVE_SCRIPT (checked by the tests). */
export const LEAVE_SHA = "576f2755b76c4a7a649eed7cbc1a0d5e5fe308c5";
/** SHA-1 of FORCE_RELEASE_SCRIPT (checked by the tests). */
export const FORCE_RELEASE_SHA = "e88b95289510268d8078179f576188658d583d73";

// How a script's answer reads.
export const isOne = (reply) => Number(reply) === 1;

export function fenceFrom(reply) {
  const value = typeof reply === "number" ? reply : typeof reply === "string" || typeof reply === "bigint" ? Number(reply) : NaN;
  if (value === 0) return false;
  if (!Number.isInteger(value) || value < 1 || value > MAX_FENCE) {
    throw new TypeError(`redisLockStore: acquire script answered ${String(reply)}, expected 0 or a fence in 1..${MAX_FENCE}`);
  }
  return { fence: value };
}
