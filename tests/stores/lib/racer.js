// One OS process racing for a lock: the user-written ioredis store (lib/user-redis-store.js)
// passed to keel-lock's setLockStore, keel-lock installed from the packed tarball.
//   node racer.js <redis port> '<json config>'
//   config: { id, ns, mode: "once" | "timeouts", rounds?, iterations?, store?: "user" | "racy" }
// Coordination with the parent goes through Redis lists under `ns` (no timing):
//   mode "once":     per round r, wait for ns:go:r:id, then lock(ns:key:r).run(hold, { timeout: 0 });
//                    the winner pushes "won:id" to ns:result:r and holds the lock until the parent
//                    pushes to ns:release:r:id; a loser pushes "lost:id".
//   mode "timeouts": wait for ns:go:id, then `iterations` times lock(ns:key).run(section,
//                    { timeout }); inside, INCR ns:inside (anything but 1 counts an overlap in
//                    ns:overlaps), log "id:i:enter" / "id:i:exit" to ns:log, DECR on the way out.
// Prints one JSON line with what happened, and exits 0 unless something threw.
import IORedis from "ioredis";
import { getLockStore, lock, setLockStore } from "keel-lock";
import { userRedisStore } from "./user-redis-store.js";
import { racyRedisStore } from "./js-stores.js";

const [port, raw] = process.argv.slice(2);
const { id, ns, mode, rounds = 1, iterations = 10, store: kind = "user" } = JSON.parse(raw);
const connect = () => new IORedis({ host: "127.0.0.1", port: Number(port), maxRetriesPerRequest: 0 });
const redis = connect();
const waiter = connect(); // BLPOP blocks its connection; keep it off the store's
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// "racy" (GET then SET, bare DEL) exists only to show the parent's checks can fail.
const store = kind === "racy" ? racyRedisStore(redis) : userRedisStore(redis);
setLockStore(store);
if (getLockStore() !== store) throw new Error("getLockStore() is not the store passed to setLockStore()");

const report = { id, pid: process.pid, mode, won: 0, lost: 0, ran: 0, notRan: 0 };
await redis.rpush(`${ns}:ready`, id);

if (mode === "once") {
  for (let r = 0; r < rounds; r++) {
    await waiter.blpop(`${ns}:go:${r}:${id}`, 0);
    const [ran] = await lock(`${ns}:key:${r}`, 60_000).run(
      async () => {
        await redis.rpush(`${ns}:result:${r}`, `won:${id}`);
        await waiter.blpop(`${ns}:release:${r}:${id}`, 0);
      },
      { timeout: 0 },
    );
    if (ran) report.won++;
    else {
      report.lost++;
      await redis.rpush(`${ns}:result:${r}`, `lost:${id}`);
    }
  }
} else if (mode === "timeouts") {
  await waiter.blpop(`${ns}:go:${id}`, 0);
  for (let i = 0; i < iterations; i++) {
    const [ran] = await lock(`${ns}:key`, 30_000).run(
      async () => {
        if ((await redis.incr(`${ns}:inside`)) !== 1) await redis.incr(`${ns}:overlaps`);
        await redis.rpush(`${ns}:log`, `${id}:${i}:enter`);
        await sleep(5 + Math.floor(Math.random() * 15)); // widen the window a second holder would hit
        await redis.rpush(`${ns}:log`, `${id}:${i}:exit`);
        await redis.decr(`${ns}:inside`);
      },
      { timeout: 120_000, retryDelay: 5 },
    );
    if (ran) report.ran++;
    else report.notRan++;
  }
} else {
  throw new Error(`unknown mode ${mode}`);
}

console.log(JSON.stringify(report));
redis.disconnect();
waiter.disconnect();
