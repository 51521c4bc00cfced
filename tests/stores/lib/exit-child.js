// One user script, as the README shows it, in a process of its own: connect a client, hand it to
// the store, make a run wait (so the store opens its own pub/sub or LISTEN connection), then close
// the client the user opened — and nothing else. exit.test.js checks that the process then ends
// by itself.
//
//   node exit-child.js <client> <address JSON> <scenario>
//
// client:   ioredis | node-redis | ioredis-cluster | node-redis-cluster | pg-pool | pg-client
// scenario: waited      a run waits for a holder, gets the key, then the client is closed
//           queued      the client is closed while a run is still queued; that run must reject
//           left-open   as "waited", but the client is never closed (the process must NOT end)
//           watching    the key is watched (store.watch, Redis only) while it is held and
//                       released, and the client is closed with the watch still live
//
// Prints one JSON line per step: {"step":"closing"} right before the client is closed, then
// {"step":"done", …} with what the runs answered.
import IORedis from "ioredis";
import pg from "pg";
import { createClient, createCluster } from "redis";
import { lock, setLockStore } from "keel-lock";
import { redisLockStore } from "keel-lock/redis";
import { databaseLockStore } from "keel-lock/sql";

const [kind, addressJson, scenario] = process.argv.slice(2);
const address = JSON.parse(addressJson);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const say = (step, extra = {}) => console.log(JSON.stringify({ step, ...extra }));

// Resolves once `ready()` holds, looking every 10 ms; throws after 20 s.
async function until(ready, what) {
  const deadline = Date.now() + 20_000;
  while (!ready()) {
    if (Date.now() > deadline) throw new Error(`${what} within 20 s`);
    await sleep(10);
  }
}

async function open() {
  switch (kind) {
    case "ioredis": {
      const client = new IORedis({ host: "127.0.0.1", port: address.port });
      return { store: redisLockStore(client), close: () => client.quit() };
    }
    case "node-redis": {
      const client = await createClient({ url: address.url }).connect();
      return { store: redisLockStore(client), close: () => client.quit() };
    }
    case "ioredis-cluster": {
      const client = new IORedis.Cluster(address.nodes.map(({ host, port }) => ({ host, port })));
      await new Promise((resolve, reject) => client.once("ready", resolve).once("error", reject));
      return { store: redisLockStore(client), close: () => client.quit() };
    }
    case "node-redis-cluster": {
      const client = await createCluster({ rootNodes: address.nodes.map(({ url }) => ({ url })) }).connect();
      return { store: redisLockStore(client), close: () => client.quit() };
    }
    case "pg-pool": {
      const pool = new pg.Pool({ connectionString: address.connectionString, max: 4 });
      const store = databaseLockStore(pool, { table: address.table });
      await store.createTable();
      return { store, close: () => pool.end() };
    }
    case "pg-client": {
      const client = new pg.Client({ connectionString: address.connectionString });
      await client.connect();
      const store = databaseLockStore(client, { table: address.table });
      await store.createTable();
      return { store, close: () => client.end() };
    }
    default:
      throw new Error(`unknown client ${kind}`);
  }
}

const { store, close } = await open();
setLockStore(store);
const key = `exit:${kind}:${scenario}:${process.pid}`;
const holder = lock(key, 10_000);
if (!(await holder.acquire())) throw new Error("the holder did not get the key");

// A run waits in the store: counted there, and the store's own connection (Redis pub/sub,
// PostgreSQL LISTEN) is open.
const waitsInStore = () => store.waitingCount >= 1 && (store.subscribed === true || store.listening === true);

if (scenario === "waited" || scenario === "left-open") {
  const waited = lock(key).run(() => "ran", { timeout: 30_000 });
  await until(waitsInStore, "the run did not wait in the store");
  const opened = store.waitingCount;
  await holder.release();
  const answer = await waited;
  if (scenario === "left-open") {
    say("done", { answer, opened });
  } else {
    say("closing");
    await close();
    say("done", { answer, opened });
  }
} else if (scenario === "watching") {
  const reports = [];
  const stop = await store.watch(key, (change) => reports.push(change));
  await holder.release();
  const again = lock(key, 10_000);
  await again.acquire();
  await again.release();
  await until(() => reports.length >= 3, `the watch saw ${reports.length} of 3 changes`).catch(() => {});
  const opened = store.subscribed ? 1 : 0;
  say("closing");
  await close();
  say("done", { reports: reports.map((r) => r && { fence: r.fence, held: r.held }), opened, stop: typeof stop });
} else if (scenario === "queued") {
  const started = Date.now();
  const waited = lock(key).run(() => "ran", { timeout: 30_000 }).then(
    (answer) => ({ answer }),
    (error) => ({ rejected: error?.name, message: String(error?.message), afterMs: Date.now() - started }),
  );
  await until(waitsInStore, "the run did not wait in the store");
  const opened = store.waitingCount;
  say("closing");
  const closed = Promise.resolve(close()).catch((error) => `close failed: ${error?.message}`);
  const outcome = await waited;
  await closed;
  say("done", { ...outcome, opened });
} else {
  throw new Error(`unknown scenario ${scenario}`);
}
