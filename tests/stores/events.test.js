// Lock events from the installed package over the stores users run it on: each names its store,
// and says how a waiter's grant came — handed over by Redis (its own queue) and PostgreSQL
// (LISTEN), polled on SQLite.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import IORedis from "ioredis";
import Database from "better-sqlite3";
import pg from "pg";
import { lock, onLockEvent, setLockStore } from "keel-lock";
import { redisLockStore } from "keel-lock/redis";
import { databaseLockStore } from "keel-lock/sql";
import { startPostgres } from "./lib/servers.js";
import { useRedis } from "./lib/redis-fixture.js";

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A holder, a waiter behind it — once `waits(key)` says it waits (queued in the store, or refused
 * once and polling), and 100 ms more — then the holder's release: what was told.
 */
async function contended(store, waits) {
  setLockStore(store);
  const told = [];
  const stop = onLockEvent((e) => told.push(e));
  try {
    const key = `events:${crypto.randomUUID()}`;
    const holder = lock(key, 60_000);
    assert.equal(await holder.acquire(), true);
    const waiting = lock(key, 10_000).run(() => "ran", { timeout: 30_000, retryDelay: 20 });
    const deadline = Date.now() + 20_000;
    while (!(await waits(key))) {
      assert.ok(Date.now() < deadline, "the waiter never waited");
      await sleep(5);
    }
    await sleep(100);
    await holder.release();
    assert.deepEqual(await waiting, [true, "ran"]);
  } finally {
    stop();
  }
  return told;
}

describe("lock events over real stores", () => {
  const server = useRedis();
  let postgres;
  const closers = server.closers;
  before(async () => {
    postgres = await startPostgres();
  });
  after(async () => {
    await postgres?.stop();
  });

  const cases = {
    "Redis (ioredis)": async () => {
      const client = new IORedis({ port: server.redis.port, host: "127.0.0.1" });
      closers.push(() => client.quit());
      const store = redisLockStore(client);
      // queued: in the key's queue list
      const waits = async (key) => (await client.llen(`${store.keys(key).lock}:queue`)) >= 1;
      return { store, name: "RedisLockStore", via: "hand-over", waits };
    },
    "PostgreSQL (pg Pool)": async () => {
      const pool = new pg.Pool({ connectionString: postgres.connectionString });
      closers.push(() => pool.end());
      const store = databaseLockStore(pool);
      await store.createTable();
      // queued: a row of the waiters table not yet granted
      const waits = async (key) => (await pool.query("SELECT 1 FROM keel_locks_waiters WHERE key = $1 AND granted_at IS NULL", [key])).rowCount >= 1;
      return { store, name: "DatabaseLockStore", via: "hand-over", waits };
    },
    "SQLite (better-sqlite3)": async () => {
      const db = new Database(":memory:");
      closers.push(() => db.close());
      const store = databaseLockStore(db);
      await store.createTable();
      // polling: one of its acquires was refused (the holder's is the only one granted)
      const refused = new Set();
      const acquire = store.acquire;
      store.acquire = async function (key, ...rest) {
        const answer = await acquire.call(this, key, ...rest);
        if (answer === false) refused.add(key);
        return answer;
      };
      return { store, name: "DatabaseLockStore", via: "poll", waits: async (key) => refused.has(key) };
    },
  };

  for (const [label, make] of Object.entries(cases)) {
    test(`${label}: the store is named, and the waiter's grant says how it came`, async () => {
      const { store, name, via, waits } = await make();
      const told = await contended(store, waits);
      assert.ok(told.length >= 6, JSON.stringify(told.map((e) => e.type)));
      for (const e of told) assert.equal(e.store, name);
      const granted = told.filter((e) => e.type === "granted");
      assert.deepEqual(granted.map((e) => e.via), ["immediate", via]);
      assert.ok(granted[1].waitedMs >= 80, `waited ${granted[1].waitedMs} ms`);
      assert.ok(Number.isSafeInteger(granted[1].fence) && granted[1].fence > granted[0].fence);
    });
  }
});
