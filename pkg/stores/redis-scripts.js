// keel-lock/redis: the Lua scripts the store runs, their SHA-1 digests, and how a script's answer
// reads. Each script's source is a file in redis/lua/ (what it does: the comment at its top), the
// parts several share in redis/lua/parts/; scripts/generate-redis-scripts.mjs composes them into
// redis-scripts.generated.js with each text's SHA-1 (a test recomputes them from the text), so no
// SCRIPT LOAD round trip is needed. The key layout and what each script does to it:
// stores/README.md, "keel-lock/redis".

import { MAX_FENCE } from "./args.js";

export { CHANNEL, WATCH_SUFFIX } from "./redis-names.js";
// Every script and its SHA-1, as generated from redis/lua/ (each `<NAME>_SCRIPT`, `<NAME>_SHA`).
export * from "./redis-scripts.generated.js";

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

// ACQUIRE_MANY_SCRIPT's answer for `count` keys: 0, or one fence per key.
export function manyAnswer(reply, count) {
  if (Number(reply) === 0 && !Array.isArray(reply)) return false;
  if (!Array.isArray(reply) || reply.length !== count) {
    throw new TypeError(`redisLockStore: the acquire-many script answered ${String(reply)}, expected 0 or ${count} fences`);
  }
  return reply.map((fence) => {
    const got = fenceFrom(fence);
    if (!got) throw new TypeError(`redisLockStore: the acquire-many script answered a fence of ${String(fence)}`);
    return got;
  });
}

// INSPECT_SCRIPT's answer: { holders: [{ metadata, fence, remainingMs }], waiting }, the holds in
// fence order (those without a fence last, by time left).
export function inspectAnswer(reply) {
  if (!Array.isArray(reply) || reply.length % 3 !== 1) {
    throw new TypeError(`redisLockStore: the inspect script answered ${String(reply)}`);
  }
  const holders = [];
  for (let i = 1; i < reply.length; i += 3) {
    const [fence, metadata, remainingMs] = [reply[i], reply[i + 1], reply[i + 2]];
    holders.push({
      metadata: metadata === null || metadata === undefined ? null : String(metadata).slice(1),
      fence: fence === null || fence === undefined ? null : Number(fence),
      remainingMs: Math.max(0, Math.floor(Number(remainingMs))),
    });
  }
  if (holders.length > 1) {
    holders.sort((a, b) => (a.fence === null) - (b.fence === null) || (a.fence ?? 0) - (b.fence ?? 0) || a.remainingMs - b.remainingMs);
  }
  return { holders, waiting: Number(reply[0]) };
}

// ACQUIRE_SHARED_SCRIPT's answer without waiting: {1, fence}, {2, heldLimit}, or {-1}.
export function sharedAnswer(reply) {
  if (!Array.isArray(reply)) throw new TypeError(`redisLockStore: the shared acquire script answered ${String(reply)}`);
  const state = Number(reply[0]);
  if (state === 1) return fenceFrom(reply[1]);
  if (state === 2) return { heldLimit: Number(reply[1]) };
  return false;
}
