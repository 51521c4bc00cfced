// LockStores written in plain JS for the conformance kit's own tests:
//   jsMapStore()              a correct store over a Map, async like a remote one
//   brokenStore(flaws)        the same store with chosen flaws, each of which the kit must catch
//   racyRedisStore(ioredis)   the classic mistake against a real Redis: GET then SET, DEL without
//                             looking at the owner
// The async methods await a macrotask between reading and writing (like a network round trip),
// so a check-then-act store really interleaves under concurrent callers.

const tick = () => new Promise((resolve) => setImmediate(resolve));

/**
 * A store over a Map of key → { owner, expiresAt }, with optional flaws:
 *   "get-then-set"       acquire reads, awaits, then writes: not atomic
 *   "release-any-owner"  release deletes whoever holds the key
 *   "extend-any-owner"   extend resets the expiry whoever holds the key
 *   "extend-revives"     extend works on an expired (or missing) row and brings it back
 *   "never-expires"      the TTL is ignored: rows live until released
 *   "no-fences"          acquire answers true: a lock, but one without fencing tokens
 *   "fence-reused"       the fence counter restarts when a key is released
 *   "many"               not a flaw: acquireMany, every key or none in one step
 *   "many-key-by-key"    acquireMany takes key after key and keeps what it got when one is held
 *   "watch"              not a flaw: forceRelease, inspect (so metadata), and watch, which
 *                        pushes every holder change
 *   "watch-drops-ends"   watch reports grants but never a release
 *   "watch-leaks-owner"  watch's reports carry the holder's owner token
 *   "watch-ignores-stop" watch goes on reporting after stop()
 * Without flaws, acquire answers { fence } from one counter per store.
 */
export function brokenStore(flaws = []) {
  const flawed = new Set(flaws);
  for (const f of flawed) {
    const known = [
      ...["get-then-set", "release-any-owner", "extend-any-owner", "extend-revives", "never-expires", "no-fences", "fence-reused"],
      ...["many", "many-key-by-key", "watch", "watch-drops-ends", "watch-leaks-owner", "watch-ignores-stop"],
    ];
    if (!known.includes(f)) {
      throw new Error(`unknown flaw ${f}`);
    }
  }
  const rows = new Map();
  let lastFence = 0;
  const watchers = new Map(); // key → Set of onChange
  const tell = (key, change) => {
    for (const onChange of watchers.get(key) ?? []) onChange({ ...change });
  };
  // Reports the grant `answer` of `key` to `owner` for `ttlMs`, and keeps its fence in the row.
  const granted = (key, owner, ttlMs, answer) => {
    rows.get(key).fence = answer.fence;
    const report = { fence: answer.fence, held: true, metadata: rows.get(key).metadata ?? null, remainingMs: ttlMs };
    if (flawed.has("watch-leaks-owner")) report.owner = owner;
    tell(key, report);
    return answer;
  };
  const ended = (key, row) => {
    if (!flawed.has("watch-drops-ends")) tell(key, { fence: row.fence, held: false });
  };
  const grant = (key, owner, ttlMs) => (flawed.has("no-fences") ? true : granted(key, owner, ttlMs, { fence: ++lastFence }));
  const live = (key) => {
    const row = rows.get(key);
    if (!row) return null;
    if (!flawed.has("never-expires") && row.expiresAt <= Date.now()) return null;
    return row;
  };
  const store = {
    rows,
    async acquire(key, owner, ttlMs, metadata = null) {
      if (flawed.has("get-then-set")) {
        const held = live(key);
        await tick(); // the "round trip" between the read and the write
        if (held) return false;
        rows.set(key, { owner, expiresAt: Date.now() + ttlMs, metadata });
        return grant(key, owner, ttlMs);
      }
      await tick();
      if (live(key)) return false;
      rows.set(key, { owner, expiresAt: Date.now() + ttlMs, metadata });
      return grant(key, owner, ttlMs);
    },
    async release(key, owner) {
      await tick();
      const row = live(key);
      if (!row) return false;
      if (row.owner !== owner && !flawed.has("release-any-owner")) return false;
      rows.delete(key);
      if (flawed.has("fence-reused")) lastFence = 0;
      ended(key, row);
      return true;
    },
    async extend(key, owner, ttlMs) {
      await tick();
      const row = flawed.has("extend-revives") ? rows.get(key) ?? { owner } : live(key);
      if (!row) return false;
      if (row.owner !== owner && !flawed.has("extend-any-owner")) return false;
      rows.set(key, { ...row, expiresAt: Date.now() + ttlMs });
      return true;
    },
    async isLocked(key) {
      await tick();
      return live(key) !== null;
    },
    async remainingTime(key) {
      await tick();
      const row = live(key);
      if (!row) return null;
      return flawed.has("never-expires") ? 60_000 : Math.max(0, row.expiresAt - Date.now());
    },
  };
  if (flawed.has("many")) {
    store.acquireMany = async (keys, owners, ttlMs) => {
      await tick();
      if (keys.some((key) => live(key))) return false;
      return keys.map((key, i) => {
        rows.set(key, { owner: owners[i], expiresAt: Date.now() + ttlMs });
        return grant(key, owners[i], ttlMs);
      });
    };
  }
  if (flawed.has("many-key-by-key")) {
    store.acquireMany = async (keys, owners, ttlMs) => {
      const grants = [];
      for (let i = 0; i < keys.length; i++) {
        const got = await store.acquire(keys[i], owners[i], ttlMs);
        if (!got) return false;
        grants.push(got);
      }
      return grants;
    };
  }
  if ([...flawed].some((f) => f.startsWith("watch"))) {
    store.forceRelease = async (key) => {
      await tick();
      const row = live(key);
      if (!row) return false;
      rows.delete(key);
      ended(key, row);
      return true;
    };
    store.inspect = async (key) => {
      await tick();
      const row = live(key);
      const holders = row ? [{ metadata: row.metadata ?? null, fence: row.fence, remainingMs: Math.max(0, row.expiresAt - Date.now()) }] : [];
      return { holders, waiting: null };
    };
    store.watch = async (key, onChange) => {
      await tick();
      if (!watchers.has(key)) watchers.set(key, new Set());
      const mine = (change) => onChange(change); // one entry per watch, even of one function
      watchers.get(key).add(mine);
      return () => {
        if (!flawed.has("watch-ignores-stop")) watchers.get(key)?.delete(mine);
      };
    };
  }
  return store;
}

/** A correct JS store: the same Map store with no flaws. */
export const jsMapStore = () => brokenStore([]);

/**
 * The mistake people make with Redis: acquire as GET then SET (no NX), release as a bare DEL.
 * Runs against a real redis-server through ioredis.
 */
export function racyRedisStore(redis, prefix = "") {
  return {
    async acquire(key, owner, ttlMs, metadata = null) {
      if ((await redis.get(prefix + key)) !== null) return false;
      await redis.set(prefix + key, owner, "PX", ttlMs);
      return true;
    },
    async release(key) {
      return (await redis.del(prefix + key)) === 1;
    },
    async extend(key, owner, ttlMs) {
      return (await redis.get(prefix + key)) === owner && (await redis.pexpire(prefix + key, ttlMs)) === 1;
    },
    async isLocked(key) {
      return (await redis.exists(prefix + key)) === 1;
    },
    async remainingTime(key) {
      const ms = await redis.pttl(prefix + key);
      return ms < 0 ? null : ms;
    },
  };
}
