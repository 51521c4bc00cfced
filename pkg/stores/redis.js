// keel-lock/redis — a LockStore backed by Redis, handing out fencing tokens.
//
// No runtime dependencies: you hand it a connected client of your choice and it adapts to that
// client's API. Supported clients:
//
//   ioredis         new Redis(...)                    evalsha(sha, numkeys, ...keys, ...args)
//   ioredis cluster new Redis.Cluster([...])          the same; routed by the first key's slot
//   node-redis      createClient(...) (v4, v5)        evalSha(sha, { keys, arguments })
//   node-redis      createCluster(...) (v4, v5)       sendCommand(keys[0], false, ["EVALSHA", …])
//   @upstash/redis  new Redis({ url, token })  (REST) evalsha(sha, keys, args)
//
// Key layout. For lock key K under prefix P the store uses two keys, both carrying the hash tag
// {K}, so they live in one Redis Cluster slot whatever K is:
//
//   P{K}          the lock: owner token as value, PX ttl        e.g. lock:{invoice:42}
//   P{K}:fence    the fence counter: an integer, never expires   e.g. lock:{invoice:42}:fence
//
// Inside the braces, and in P, the characters "%", "{" and "}" are written as "%25", "%7B" and
// "%7D". So the first "{" of the name is always the one this store put there, the first "}" after
// it closes the tag, and the tag is never empty: Redis hashes exactly the (escaped) user key. The
// escaping is one-to-one, so distinct (prefix, key) pairs never share a name.
//
// How each operation maps onto Redis (one round trip each on the happy path):
//
//   acquire        EVALSHA <acquire script>    SET the lock NX PX ttl; if nobody queues, INCR the
//                                              fence counter and answer the fence — atomically (a
//                                              lock found free with callers queued is deleted
//                                              again: the check script hands it over first)
//   release        EVALSHA <release script>    compare owner, then DEL — atomically; a holder
//                                              with callers queued behind it hands the key over
//   extend         EVALSHA <extend script>     compare owner, then PEXPIRE — atomically
//   isLocked       EXISTS
//   remainingTime  PTTL                        -2 (no key) / -1 (no expiry) / 0 → null
//   forceRelease   EVALSHA <force-release>     DEL whoever holds it; hands over like release
//
// With a standalone ioredis client the commands sent in one tick share writes to the socket
// (see corker); other clients batch writes themselves or are used as they are.
//
// Waiting without polling (acquireOrWait, withdraw, close; not on Upstash, which has no
// pub/sub). Three more keys per lock, all with the same hash tag:
//
//   P{K}:queue     list of waiting owners, oldest first
//   P{K}:waiters   hash owner → "enqueuedUs deadlineUs ttlMs" (Redis's clock)
//   P{K}:grant     "fence waitedMs owner" of the last hand-over, PX the grantee's TTL
//
// A caller that finds the key held (or others queued) joins the queue in the same script, and
// the holder's value becomes NUL + owner ("someone queues behind me"). Releasing a marked value
// hands the key to the oldest waiter whose deadline has not passed, in the same script: SET the
// lock to it PX its TTL, INCR the fence, write the grant record, PUBLISH [lock, owner, fence,
// waitedMs, ttl] on the channel P + "keel-lock:handover". A plain value — nobody ever queued —
// is released with GET and DEL as before, so the uncontended path costs nothing extra. A
// waiting store holds one pub/sub connection (a duplicate() of the client) while it has waits:
// opened by the first, closed a moment after the last one left or at once when the user closes
// the client. A waiting store also looks (the check script) when the holder's TTL runs out — which
// hands the key to the oldest waiter if the holder crashed — and, in case a message was lost,
// whenever one of its waits has gone max(pollMs, safetyNetMs) without a look. A look covers all of the store's
// waits in one request: every key on a single Redis; on a cluster, where a script may only touch
// keys of one hash slot, one request per key. The queue and waiters keys expire a second after
// their last deadline.
//
// Expiry is decided by Redis's clock alone; the caller's clock is never consulted.
//
// Scripts: their SHA-1 digests are constants in this file (a test recomputes them from the script
// text), so no SCRIPT LOAD round trip is ever needed. When Redis answers NOSCRIPT (its script cache
// is empty after a restart, a failover or SCRIPT FLUSH; in a cluster every master has its own
// cache) the store sends the same call as EVAL with the full script text, which also puts the
// script back in that server's cache for the next EVALSHA.
//
// Fences are as durable as the counter key: a Redis that loses writes (failover under
// asynchronous replication, a restart without persistence, eviction under an allkeys-* policy)
// can hand out a fence again.

import { argumentChecks, IDLE_CLOSE_MS, LockStoreClosedError, MAX_FENCE, MAX_TTL_MS, safetyNetOption, unrefTimer } from "./args.js";

export { LockStoreClosedError };

// Every hand-over under prefix P is published on the channel P + CHANNEL.
const CHANNEL = "keel-lock:handover";
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

const CLIENT_TYPES = ["ioredis", "ioredis-cluster", "node-redis", "node-redis-cluster", "upstash"];

function fn(client, name) {
  return typeof client[name] === "function";
}

// Whether the user has closed `client` (quit, disconnect): ioredis and its Cluster say "end" in
// `status`; node-redis clients (and node-redis v5's cluster) have `isOpen`.
function clientClosed(client, type) {
  if (type === "ioredis" || type === "ioredis-cluster") return client.status === "end";
  if (type === "node-redis" || type === "node-redis-cluster") return "isOpen" in client && client.isOpen === false;
  return false;
}

/**
 * Works out which client API `client` speaks.
 * node-redis has camel-cased `evalSha`; its cluster client also has `getSlotMaster`.
 * @upstash/redis has `evalsha` taking arrays plus `scriptLoad`.
 * ioredis has `evalsha` taking a key count and no `scriptLoad`; its Cluster has `isCluster === true`.
 */
export function detectRedisClient(client) {
  if (client === null || (typeof client !== "object" && typeof client !== "function")) return null;
  if (fn(client, "evalSha") && fn(client, "set")) {
    return fn(client, "getSlotMaster") ? "node-redis-cluster" : "node-redis";
  }
  if (fn(client, "evalsha") && fn(client, "scriptLoad") && fn(client, "set")) return "upstash";
  if (fn(client, "evalsha") && fn(client, "set")) return client.isCluster === true ? "ioredis-cluster" : "ioredis";
  return null;
}

// Each adapter exposes the same four primitives; every one is a single Redis command. `keys` is
// an array whose first element decides the slot (cluster clients route by it).
function adapter(client, type) {
  switch (type) {
    case "ioredis": {
      // Commands sent in one tick share writes (see corker). ioredis flattens array arguments
      // (one level), so keys and args go as the arrays they are, with no spread copy of them.
      const cork = corker(client);
      return {
        evalsha: (sha, keys, args) => (cork(), client.evalsha(sha, String(keys.length), keys, args)),
        eval: (script, keys, args) => (cork(), client.eval(script, String(keys.length), keys, args)),
        exists: (key) => (cork(), client.exists(key)),
        pttl: (key) => (cork(), client.pttl(key)),
      };
    }
    case "ioredis-cluster":
      return {
        evalsha: (sha, keys, args) => client.evalsha(sha, String(keys.length), keys, args),
        eval: (script, keys, args) => client.eval(script, String(keys.length), keys, args),
        exists: (key) => client.exists(key),
        pttl: (key) => client.pttl(key),
      };
    case "node-redis-cluster":
      // The cluster client's own evalSha does not route by keys[0] in node-redis v4 (its key
      // lookup reads the SHA argument), so scripts go through sendCommand(firstKey, …), which
      // both v4 and v5 route by the key given.
      return {
        evalsha: (sha, keys, args) =>
          client.sendCommand(keys[0], false, ["EVALSHA", sha, String(keys.length), ...keys, ...args]),
        eval: (script, keys, args) =>
          client.sendCommand(keys[0], false, ["EVAL", script, String(keys.length), ...keys, ...args]),
        exists: (key) => client.exists(key),
        pttl: (key) => (fn(client, "pTTL") ? client.pTTL(key) : client.PTTL(key)),
      };
    case "node-redis":
      return {
        evalsha: (sha, keys, args) => client.evalSha(sha, { keys, arguments: args }),
        eval: (script, keys, args) => client.eval(script, { keys, arguments: args }),
        exists: (key) => client.exists(key),
        pttl: (key) => (fn(client, "pTTL") ? client.pTTL(key) : client.PTTL(key)),
      };
    case "upstash":
      return {
        evalsha: (sha, keys, args) => client.evalsha(sha, keys, args),
        eval: (script, keys, args) => client.eval(script, keys, args),
        exists: (key) => client.exists(key),
        pttl: (key) => client.pttl(key),
      };
    default:
      throw new TypeError(`redisLockStore: unknown clientType ${JSON.stringify(type)}`);
  }
}

// For a standalone ioredis client, which writes each command to its socket as it is sent: one
// write system call per command, and one read for Redis. The function corker answers is called
// before the store sends a command; the first call in a tick corks the socket (Node then buffers
// what is written to it) and schedules the uncork with process.nextTick, which runs once the code
// now running and its promise callbacks are done. So the commands sent in one tick — by this
// store's concurrent callers, and anything else written to the client meanwhile — leave together,
// before any timer or I/O callback runs. Every CORKED_COMMANDS commands the buffer is written out
// at once, so Redis can start on those while the client is still sending the rest (with a whole
// tick in one write, client and server took turns instead of working at the same time). When the
// last tick that sent anything sent one command — a lone caller — the first command of this tick
// is not corked: it leaves at once, and what its caller does after sending overlaps with Redis's
// work instead of delaying the write; later commands of the tick are corked as above. Nothing is
// corked while the client is not ready (ioredis then queues commands itself) or has no socket
// with cork().
const CORKED_COMMANDS = 8;
function corker(client) {
  if (typeof globalThis.process?.nextTick !== "function") return () => {};
  let corked = null;
  let buffered = 0;
  let sent = 0; // commands sent this tick
  let previous = 0; // commands sent in the last tick that sent any
  const endOfTick = () => {
    previous = sent;
    sent = 0;
    const socket = corked;
    if (socket === null) return;
    corked = null;
    socket.uncork();
  };
  return () => {
    if (sent++ === 0) {
      process.nextTick(endOfTick);
      if (previous === 1) return;
    }
    if (corked === null) {
      const socket = client.stream;
      if (client.status !== "ready" || typeof socket?.cork !== "function" || typeof socket.uncork !== "function") return;
      socket.cork();
      corked = socket;
      buffered = 0;
    } else if (buffered === CORKED_COMMANDS) {
      corked.uncork();
      corked.cork();
      buffered = 0;
    }
    buffered++;
  };
}

// The store's pub/sub connection: a duplicate of the user's client (`duplicate()` in ioredis,
// ioredis Cluster, node-redis and its cluster client; a cluster client subscribes through one of
// its nodes, and PUBLISH reaches every node), subscribed to `channel`. `onMessage(text)` gets
// each message; `onReconnect()` runs when the connection comes back after a drop (messages sent
// meanwhile are lost). Answers { ready, connection, close() }; `ready` settles once subscribed.
function openSubscriber(client, type, channel, onMessage, onReconnect) {
  if (!fn(client, "duplicate")) {
    const ready = Promise.reject(new TypeError("redisLockStore: the client has no duplicate() to open a pub/sub connection with"));
    return { ready, connection: null, close: async () => {} };
  }
  const connection = client.duplicate();
  const ignore = () => {};
  connection.on?.("error", ignore); // connection errors surface as lost messages, covered by the poll
  let subscribed = false;
  connection.on?.("ready", () => subscribed && onReconnect());
  let ready;
  let close;
  if (type === "ioredis" || type === "ioredis-cluster") {
    connection.on("message", (from, text) => from === channel && onMessage(text));
    ready = connection.subscribe(channel);
    close = async () => connection.disconnect();
  } else {
    ready = Promise.resolve(connection.connect()).then(() => connection.subscribe(channel, (text) => onMessage(text)));
    close = async () => {
      if (fn(connection, "destroy")) connection.destroy();
      else await connection.disconnect();
    };
  }
  const opened = { ready: null, connection, close, subscribed: false };
  opened.ready = ready.then(() => {
    subscribed = true;
    opened.subscribed = true;
  });
  return opened;
}

function isNoScript(error) {
  const text = error && typeof error === "object" ? String(error.message ?? "") : String(error);
  return /NOSCRIPT/i.test(text);
}

// "%" first, so the escapes it introduces are not escaped again.
const escapeName = (text) => text.replace(/%/g, "%25").replace(/\{/g, "%7B").replace(/\}/g, "%7D");
const NEEDS_ESCAPE = /[%{}]/;
// How many keys' names a store keeps built (see lockKeys).
const NAMES_CACHED = 256;

const check = argumentChecks("redisLockStore");

/**
 * The Redis key names the store uses for lock key `key` under `prefix`: `lock` holds the owner
 * token (with the lock's TTL), `fence` the fence counter (no TTL). Both carry the hash tag
 * `{key}` (with `%`, `{`, `}` escaped as `%25`, `%7B`, `%7D`), so they share one cluster slot.
 */
export function redisLockKeys(key, prefix = "") {
  check.key(key);
  if (typeof prefix !== "string") throw new TypeError("redisLockStore: prefix must be a string");
  const lock = `${escapeName(prefix)}{${escapeName(key)}}`;
  return { lock, fence: `${lock}:fence` };
}

const isOne = (reply) => Number(reply) === 1;

function fenceFrom(reply) {
  const value = typeof reply === "number" ? reply : typeof reply === "string" || typeof reply === "bigint" ? Number(reply) : NaN;
  if (value === 0) return false;
  if (!Number.isInteger(value) || value < 1 || value > MAX_FENCE) {
    throw new TypeError(`redisLockStore: acquire script answered ${String(reply)}, expected 0 or a fence in 1..${MAX_FENCE}`);
  }
  return { fence: value };
}

/**
 * A keel-lock LockStore over Redis.
 *
 * @param {object} client a connected ioredis (or ioredis Cluster), node-redis v4+ (createClient
 *   or createCluster) or @upstash/redis client
 * @param {{ prefix?: string, clientType?: "ioredis" | "ioredis-cluster" | "node-redis" | "node-redis-cluster" | "upstash", safetyNetMs?: number }} [options]
 *   `prefix` is put in front of every key name (default: none);
 *   `clientType` skips detection when a wrapped client confuses it;
 *   `safetyNetMs`: a queued wait is looked at no more often than this (nor than the caller's
 *   pollMs), in case its hand-over message was lost (default 1000).
 */
export function redisLockStore(client, options = {}) {
  if (options === null || typeof options !== "object") {
    throw new TypeError("redisLockStore: options must be an object");
  }
  const prefix = options.prefix ?? "";
  if (typeof prefix !== "string") throw new TypeError("redisLockStore: prefix must be a string");
  const safetyNetMs = safetyNetOption("redisLockStore", options.safetyNetMs);
  let clientType = options.clientType;
  if (clientType === undefined) {
    clientType = detectRedisClient(client);
    if (clientType === null) {
      throw new TypeError(
        "redisLockStore: unrecognised client — expected an ioredis, node-redis (v4+) or @upstash/redis client " +
          "(or pass options.clientType)",
      );
    }
  } else if (!CLIENT_TYPES.includes(clientType)) {
    throw new TypeError(`redisLockStore: clientType must be one of ${CLIENT_TYPES.join(", ")}`);
  }
  const redis = adapter(client, clientType);
  const escapedPrefix = escapeName(prefix);
  const lockKey = (key) => `${escapedPrefix}{${NEEDS_ESCAPE.test(key) ? escapeName(key) : key}}`;
  // Every name one lock uses, in the order the scripts take them as KEYS (a frozen array; its
  // `take` is the first three, what the acquire script takes). The names of recently used keys
  // are kept, so a release finds those its acquire built; the cache is emptied when it reaches
  // NAMES_CACHED keys.
  const names = new Map();
  const lockKeys = (key) => {
    let all = names.get(key);
    if (all === undefined) {
      const lock = lockKey(key);
      all = [lock, `${lock}:fence`, `${lock}:queue`, `${lock}:waiters`, `${lock}:grant`];
      all.take = Object.freeze(all.slice(0, 3));
      Object.freeze(all);
      if (names.size >= NAMES_CACHED) names.clear();
      names.set(key, all);
    }
    return all;
  };
  // One channel per prefix: every hand-over under it is published there, key and owner inside.
  const channel = `${escapedPrefix}${CHANNEL}`;

  // EVALSHA first (one round trip); on NOSCRIPT, EVAL the text (one more, and it re-caches the
  // script). `answer`, if given, maps the reply. A plain promise chain rather than an async
  // function: on the happy path it adds one promise to the client's (Promise.resolve hands a
  // native promise back as it is).
  function runScript(sha, script, keys, args, answer) {
    let sent;
    try {
      sent = redis.evalsha(sha, keys, args);
    } catch (error) {
      return Promise.reject(error);
    }
    return Promise.resolve(sent).then(answer, (error) => {
      if (!isNoScript(error)) throw error;
      return Promise.resolve(redis.eval(script, keys, args)).then(answer);
    });
  }

  const checkOwner = (owner) => {
    check.owner(owner);
    // The store marks a held key's value with a leading NUL while callers queue behind it.
    if (owner.includes("\0")) throw new TypeError("redisLockStore: owner must not contain NUL");
  };

  const store = {
    prefix,
    clientType,

    /** The Redis key names used for `key`: `{ lock, fence }`. */
    keys(key) {
      return redisLockKeys(key, prefix);
    },

    acquire(key, owner, ttlMs) {
      try {
        check.key(key);
        checkOwner(owner);
        check.ttl(ttlMs);
      } catch (error) {
        return Promise.reject(error);
      }
      const all = lockKeys(key);
      const args = [owner, String(ttlMs)];
      // -1: the lock is free with callers queued (its holder expired). The check script hands it
      // to the oldest live waiter, dropping those whose deadline passed; a second try then finds
      // it held (false), or free with nobody left queued (taken). Still free with callers queued
      // after the look — the fence counter is at its limit — answers false.
      return runScript(ACQUIRE_SHA, ACQUIRE_SCRIPT, all.take, args, (reply) =>
        Number(reply) !== -1
          ? fenceFrom(reply)
          : runScript(CHECK_SHA, CHECK_SCRIPT, all, [channel, "0"]).then(() =>
              runScript(ACQUIRE_SHA, ACQUIRE_SCRIPT, all.take, args, (again) => fenceFrom(Number(again) === -1 ? 0 : again)),
            ),
      );
    },

    release(key, owner) {
      try {
        check.key(key);
        checkOwner(owner);
      } catch (error) {
        return Promise.reject(error);
      }
      return runScript(RELEASE_SHA, RELEASE_SCRIPT, lockKeys(key), [owner], isOne);
    },

    async extend(key, owner, ttlMs) {
      check.key(key);
      checkOwner(owner);
      check.ttl(ttlMs);
      const reply = await runScript(EXTEND_SHA, EXTEND_SCRIPT, [lockKey(key)], [owner, String(ttlMs)]);
      return Number(reply) === 1;
    },

    async isLocked(key) {
      check.key(key);
      return Number(await redis.exists(lockKey(key))) > 0;
    },

    async remainingTime(key) {
      check.key(key);
      const ms = Number(await redis.pttl(lockKey(key)));
      return Number.isFinite(ms) && ms > 0 ? ms : null;
    },

    /** Frees `key` whoever holds it (a queued waiter is handed it); true if someone held it. */
    async forceRelease(key) {
      check.key(key);
      return Number(await runScript(FORCE_RELEASE_SHA, FORCE_RELEASE_SCRIPT, lockKeys(key), [channel])) === 1;
    },
  };
  // Upstash's REST API has no pub/sub: its callers keep polling acquire.
  if (clientType !== "upstash") Object.defineProperties(store, Object.getOwnPropertyDescriptors(waiting()));
  return store;

  // Waiting without polling: acquireOrWait, withdraw, close.
  //
  // The pub/sub connection is the store's own, so the store keeps it only while it is of use: it
  // is opened by the first wait, closed IDLE_CLOSE_MS after the last wait left, and closed at
  // once when the user closes their client (its "end" event; clients without one are found
  // closed by the next look). Waits still queued then fail with LockStoreClosedError. So a
  // script that closes its client exits, with no close() of the store.
  function waiting() {
    const waits = new Map(); // lock name → Map(owner → pending acquireOrWait)
    const expiryTimers = new Map(); // lock name → the timer that looks at the holder's expiry
    let subscriber = null;
    let idleTimer = null; // closes the subscriber once no wait is left
    // The store's safety-net look: one timer for all its waits, due when the first of them is
    // (each queued wait is looked at least every max(pollMs, safetyNetMs) of its own).
    let lookTimer = null;
    let lookTimerAt = Infinity;
    // A script may only touch keys of one hash slot on a cluster, and each lock's names carry
    // their own hash tag: there a look is one request per lock, on a single Redis one in all.
    const cluster = clientType === "ioredis-cluster" || clientType === "node-redis-cluster";

    function settle(wait, answer, failed = false) {
      if (wait.settled) return;
      wait.settled = true;
      clearTimeout(wait.deadlineTimer);
      const same = waits.get(wait.lock);
      if (same?.get(wait.owner) === wait) {
        same.delete(wait.owner);
        if (same.size === 0) {
          waits.delete(wait.lock);
          clearTimeout(expiryTimers.get(wait.lock));
          expiryTimers.delete(wait.lock);
          if (waits.size === 0) {
            lookAt(Infinity);
            closeWhenIdle();
          }
        }
      }
      if (failed) wait.reject(answer);
      else wait.resolve(answer);
    }

    // The enqueue's answer for `wait`: {1, fence} took the key; {0, pttl} queued it.
    function enqueued(wait, reply, waitMs, started, wasSubscribed) {
      if (wait.settled) return;
      if (!Array.isArray(reply)) throw new TypeError(`redisLockStore: the enqueue script answered ${String(reply)}`);
      const state = Number(reply[0]);
      if (state === 1) return settle(wait, { ...fenceFrom(Number(reply[1])), waitedMs: 0 });
      const lock = wait.lock;
      const pttl = Number(reply[1]);
      // 0 is a key in its last millisecond: it is still held, and its expiry is the next look.
      if (pttl >= 0) expiryAt(lock, pttl);
      wait.deadlineTimer = setTimeout(async () => {
        if (wait.settled) return;
        if (clientClosed(client, clientType)) return clientEnded();
        try {
          const answer = await leave(wait, false);
          if (Number(answer[0]) === 1) settleFrom(wait, answer);
          else settle(wait, false);
        } catch (error) {
          settle(wait, error, true);
        }
      }, Math.max(0, waitMs - (Date.now() - started)));
      wait.queued = true;
      wait.nextLook = Date.now() + wait.pollMs;
      lookAt(wait.nextLook);
      if (!wasSubscribed) {
        if (subscriber?.subscribed) look(new Set([lock]));
        else {
          lookOnceSubscribed.add(lock);
          // Without a subscription the safety-net and expiry looks still hand the key over.
          subscribe().catch(() => {});
        }
      }
    }

    const granted = (fence, waited) => ({ ...fenceFrom(Number(fence)), waitedMs: Math.max(0, Math.floor(Number(waited) || 0)) });

    // A {1, fence, waitedMs} (handed the key) or {-1} (no longer queued) answer, for `wait`.
    function settleFrom(wait, reply) {
      const state = Number(reply[0]);
      try {
        if (state === 1) settle(wait, granted(reply[1], reply[2]));
        else if (state === -1) settle(wait, false);
      } catch (error) {
        settle(wait, error, true);
      }
    }

    // When the holder's TTL runs out, this store looks at the key (and so hands it over).
    function expiryAt(lock, ms) {
      clearTimeout(expiryTimers.get(lock));
      const timer = setTimeout(() => {
        expiryTimers.delete(lock);
        look(new Set([lock]));
      }, Math.min(ms + 1, 2_147_483_647));
      expiryTimers.set(lock, timer);
    }

    // Sets the safety-net timer to fire at `at` (Date.now() time) if that is sooner than it
    // would; Infinity stops it.
    function lookAt(at) {
      if (at === Infinity) {
        clearTimeout(lookTimer);
        lookTimer = null;
        lookTimerAt = Infinity;
        return;
      }
      if (lookTimer && lookTimerAt <= at) return;
      clearTimeout(lookTimer);
      lookTimerAt = at;
      lookTimer = setTimeout(() => {
        lookTimer = null;
        lookTimerAt = Infinity;
        look(null);
      }, Math.max(0, at - Date.now()));
    }

    // Sets the safety-net timer to the earliest time a queued wait without a look in flight is due.
    function lookWhenDue() {
      let due = Infinity;
      for (const pending of waits.values()) {
        for (const wait of pending.values()) if (wait.queued && !wait.looking && wait.nextLook < due) due = wait.nextLook;
      }
      lookAt(Infinity);
      lookAt(due);
    }

    // One look at every queued wait of this store with no look in flight — in one request on a
    // single Redis (whatever `locks` asks for), in one request per lock of `locks` (every lock
    // when null) on a cluster. Each wait it covers is next due pollMs from now.
    function look(locks) {
      if (clientClosed(client, clientType)) return clientEnded();
      const now = Date.now();
      const requests = new Map(); // one request → [{ lock, names, covered }]
      for (const [lock, pending] of waits) {
        if (cluster && locks && !locks.has(lock)) continue;
        const covered = [...pending.values()].filter((wait) => wait.queued && !wait.settled && !wait.looking);
        if (covered.length === 0) continue;
        const request = cluster ? lock : "";
        if (!requests.has(request)) requests.set(request, []);
        requests.get(request).push({ lock, names: pending.values().next().value.names, covered });
      }
      for (const group of requests.values()) {
        const keys = [];
        const args = [channel];
        for (const { names, covered } of group) {
          keys.push(...names);
          args.push(String(covered.length));
          for (const wait of covered) {
            args.push(wait.owner);
            wait.looking = true;
            wait.nextLook = now + wait.pollMs;
          }
        }
        const done = () => {
          for (const { covered } of group) for (const wait of covered) wait.looking = false;
        };
        runScript(CHECK_SHA, CHECK_SCRIPT, keys, args).then(
          (reply) => {
            done();
            group.forEach((entry, i) => answered(entry, reply?.[i]));
            lookWhenDue();
          },
          () => {
            done(); // the next look or the deadline decides
            lookWhenDue();
          },
        );
      }
      lookWhenDue();
    }

    // One lock's part of a look's answer: its PTTL, then state, fence, waitedMs per wait covered.
    function answered({ lock, covered }, reply) {
      if (!Array.isArray(reply)) return;
      covered.forEach((wait, i) => {
        if (!wait.settled) settleFrom(wait, reply.slice(1 + 3 * i, 4 + 3 * i));
      });
      const pttl = Number(reply[0]);
      if (pttl >= 0 && waits.has(lock)) expiryAt(lock, pttl);
    }

    function onMessage(text) {
      let lock, owner, fence, waited, ttl;
      try {
        [lock, owner, fence, waited, ttl] = JSON.parse(text);
      } catch {
        return;
      }
      const pending = waits.get(lock);
      if (!pending) return;
      const wait = pending.get(owner);
      if (wait) settleFrom(wait, [1, fence, waited]);
      if (waits.has(lock)) expiryAt(lock, Number(ttl));
    }

    // Messages sent while the connection was down are lost: a look at every waited-for key.
    function onReconnect() {
      look(null);
    }

    // Subscribes once per store; a failed attempt is retried by the next waiter. Keys whose
    // waiters queued before the subscription was up are looked at once it is.
    const lookOnceSubscribed = new Set();
    function subscribe() {
      if (!subscriber) {
        const opened = openSubscriber(client, clientType, channel, onMessage, onReconnect);
        subscriber = opened;
        client.on?.("end", clientEnded);
        opened.ready.then(
          () => {
            if (lookOnceSubscribed.size > 0) look(new Set(lookOnceSubscribed));
            lookOnceSubscribed.clear();
          },
          () => {
            if (subscriber === opened) unsubscribe().catch(() => {});
          },
        );
      }
      return subscriber.ready;
    }

    // Closes the pub/sub connection (if any) and stops following the user's client.
    async function unsubscribe() {
      clearTimeout(idleTimer);
      idleTimer = null;
      const closing = subscriber;
      subscriber = null;
      if (!closing) return;
      client.removeListener?.("end", clientEnded);
      await closing.ready.catch(() => {});
      await closing.close();
    }

    function closeWhenIdle() {
      if (!subscriber || idleTimer) return;
      idleTimer = unrefTimer(() => {
        idleTimer = null;
        if (waits.size === 0) unsubscribe().catch(() => {});
      }, IDLE_CLOSE_MS);
    }

    // The user closed their client: nothing this store sends can reach Redis any more. Every
    // wait fails now (its queue entry lapses at its deadline in Redis, or, handed the key meanwhile,
    // the key at its TTL, as a crashed client's would), and the connection is closed.
    function clientEnded() {
      for (const pending of [...waits.values()]) {
        for (const wait of [...pending.values()]) {
          settle(wait, new LockStoreClosedError(`redisLockStore: the Redis client was closed while waiting for ${JSON.stringify(wait.key)}`), true);
        }
      }
      for (const timer of expiryTimers.values()) clearTimeout(timer);
      expiryTimers.clear();
      lookAt(Infinity);
      unsubscribe().catch(() => {});
    }

    async function leave(wait, withdrawing) {
      return runScript(LEAVE_SHA, LEAVE_SCRIPT, wait.names, [wait.owner, channel, withdrawing ? "1" : "0"]);
    }

    return {
      /**
       * Takes the key if it is free and nobody queues; otherwise joins its FIFO queue and waits up
       * to `waitMs` for a release (or the holder's expiry) to hand it over. Answers
       * `{ fence, waitedMs }` or `false`.
       */
      acquireOrWait(key, owner, ttlMs, waitMs, pollMs) {
        try {
          check.key(key);
          checkOwner(owner);
          check.ttl(ttlMs);
          if (!Number.isInteger(waitMs) || waitMs < 0 || waitMs > MAX_TTL_MS) {
            throw new RangeError(`redisLockStore: waitMs must be a whole number of ms in 0..${MAX_TTL_MS}, got ${waitMs}`);
          }
          if (!Number.isInteger(pollMs) || pollMs < 1 || pollMs > MAX_TTL_MS) {
            throw new RangeError(`redisLockStore: pollMs must be a whole number of ms in 1..${MAX_TTL_MS}, got ${pollMs}`);
          }
        } catch (error) {
          return Promise.reject(error);
        }
        if (waitMs === 0) return store.acquire(key, owner, ttlMs).then((got) => got && { ...got, waitedMs: 0 });
        const names = lockKeys(key);
        const lock = names[0];
        let pending = waits.get(lock);
        if (pending?.has(owner)) return Promise.reject(new Error(`redisLockStore: ${owner} is already waiting for ${key}`));
        if (clientClosed(client, clientType)) {
          return Promise.reject(new LockStoreClosedError("redisLockStore: the Redis client is closed"));
        }
        clearTimeout(idleTimer);
        idleTimer = null;
        const started = Date.now();
        return new Promise((resolve, reject) => {
          const wait = { key, lock, owner, names, pollMs: Math.max(pollMs, safetyNetMs), resolve, reject, settled: false, queued: false, looking: false, nextLook: Infinity, enqueued: null, deadlineTimer: undefined };
          if (pending === undefined) waits.set(lock, (pending = new Map()));
          pending.set(owner, wait);
          // With the subscription up, the hand-over message finds this wait registered. A key
          // whose waiters queued before it was up is looked at once it is: a message may have
          // come first.
          const wasSubscribed = subscriber?.subscribed === true;
          // Settles once the enqueue's answer has been acted on; never rejects.
          wait.enqueued = runScript(ENQUEUE_SHA, ENQUEUE_SCRIPT, names, [owner, String(ttlMs), String(waitMs), channel]).then(
            (reply) => {
              try {
                enqueued(wait, reply, waitMs, started, wasSubscribed);
              } catch (error) {
                settle(wait, error, true);
              }
            },
            (error) => settle(wait, error, true),
          );
        });
      },

      /**
       * Afterwards `owner` neither holds nor waits for `key`: it leaves the queue, or releases a
       * key it was handed (to the next waiter). A pending acquireOrWait of `owner` answers false.
       */
      async withdraw(key, owner) {
        check.key(key);
        checkOwner(owner);
        const names = lockKeys(key);
        const wait = waits.get(names[0])?.get(owner);
        if (wait) {
          settle(wait, false);
          await wait.enqueued; // the leave must reach Redis after the enqueue
        }
        await leave({ names, owner }, true);
      },

      /**
       * Pending acquireOrWait calls leave their queues (answering a grant they already got, else
       * false) and the pub/sub connection is closed. A later acquireOrWait subscribes again.
       */
      async close() {
        const pending = [...waits.values()].flatMap((m) => [...m.values()]);
        await Promise.all(
          pending.map(async (wait) => {
            try {
              await wait.enqueued;
              if (wait.settled) return;
              const answer = await leave(wait, false);
              if (Number(answer[0]) === 1) settleFrom(wait, answer);
              else settle(wait, false);
            } catch (error) {
              settle(wait, error, true);
            }
          }),
        );
        for (const timer of expiryTimers.values()) clearTimeout(timer);
        expiryTimers.clear();
        lookAt(Infinity);
        await unsubscribe();
      },

      /** The same as `close()`. */
      quit() {
        return store.close();
      },

      /** How many acquireOrWait calls of this store are waiting. */
      get waitingCount() {
        let n = 0;
        for (const m of waits.values()) n += m.size;
        return n;
      },

      /** Whether the store's pub/sub connection is open and subscribed. */
      get subscribed() {
        return subscriber?.subscribed === true;
      },

      /** The store's pub/sub connection (a duplicate of the client), or null before the first wait. */
      get subscriber() {
        return subscriber?.connection ?? null;
      },
    };
  }
}

export default redisLockStore;
