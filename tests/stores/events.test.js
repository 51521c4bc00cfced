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
import { startPostgres, startRedis } from "./lib/servers.js";

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** A holder, a waiter queued behind it for 100 ms, then the holder's release: what was told. */
async function contended(store) {
  setLockStore(store);
  const told = [];
  const stop = onLockEvent((e) => told.push(e));
  try {
    const key = `events:${crypto.randomUUID()}`;
    const holder = lock(key, 10_000);
    assert.equal(await holder.acquire(), true);
    const waiting = lock(key, 10_000).run(() => "ran", { timeout: 10_000, retryDelay: 20 });
    await sleep(100);
    await holder.release();
    assert.deepEqual(await waiting, [true, "ran"]);
  } finally {
    stop();
  }
  return told;
}

describe("lock events over real stores", () => {
  let redis;
  let postgres;
  const closers = [];
  before(async () => {
    redis = await startRedis();
    postgres = await startPostgres();
  });
  after(async () => {
    for (const close of closers.reverse()) await close();
    await redis?.stop();
    await postgres?.stop();
  });

  const cases = {
    "Redis (ioredis)": async () => {
      const client = new IORedis({ port: redis.port, host: "127.0.0.1" });
      closers.push(() => client.quit());
      return { store: redisLockStore(client), name: "RedisLockStore", via: "hand-over" };
    },
    "PostgreSQL (pg Pool)": async () => {
      const pool = new pg.Pool({ connectionString: postgres.connectionString });
      closers.push(() => pool.end());
      const store = databaseLockStore(pool);
      await store.createTable();
      return { store, name: "DatabaseLockStore", via: "hand-over" };
    },
    "SQLite (better-sqlite3)": async () => {
      const db = new Database(":memory:");
      closers.push(() => db.close());
      const store = databaseLockStore(db);
      await store.createTable();
      return { store, name: "DatabaseLockStore", via: "poll" };
    },
  };

  for (const [label, make] of Object.entries(cases)) {
    test(`${label}: the store is named, and the waiter's grant says how it came`, async () => {
      const { store, name, via } = await make();
      const told = await contended(store);
      assert.ok(told.length >= 6, JSON.stringify(told.map((e) => e.type)));
      for (const e of told) assert.equal(e.store, name);
      const granted = told.filter((e) => e.type === "granted");
      assert.deepEqual(granted.map((e) => e.via), ["immediate", via]);
      assert.ok(granted[1].waitedMs >= 80, `waited ${granted[1].waitedMs} ms`);
      assert.ok(Number.isSafeInteger(granted[1].fence) && granted[1].fence > granted[0].fence);
    });
  }
});
