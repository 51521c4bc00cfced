// databaseLockStore over pg, against a throwaway PostgreSQL cluster started here (initdb +
// pg_ctl in a temp dir, on a free port) and stopped at the end.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import pg from "pg";
import { databaseLockStore } from "../../pkg/stores/sql.js";
import { startPostgres } from "./lib/servers.js";
import { newContext, registerContract } from "./lib/contract.js";
import { registerSqlTests } from "./lib/sql-suite.js";

let server;
const pools = [];
let client;
let stores;

// The suite writes SQL with `?`; pg wants $1, $2, …
const raw = async (sql, params) => {
  let n = 0;
  const result = await pools[0].query(sql.replace(/\?/g, () => `$${++n}`), params);
  return result.rows ?? [];
};

before(async () => {
  server = await startPostgres();
  // Four pools of ten connections: the race tests run on up to 40 backends at once.
  for (let i = 0; i < 4; i++) {
    const pool = new pg.Pool({ connectionString: server.connectionString, max: 10 });
    pool.on("error", () => {}); // an idle connection dropped at shutdown is not a test failure
    pools.push(pool);
  }
  client = new pg.Client({ connectionString: server.connectionString });
  client.on("error", () => {});
  await client.connect();
  stores = pools.map((p) => databaseLockStore(p));
  await stores[0].createTable();
});

after(async () => {
  await client?.end();
  for (const p of pools) await p.end();
  await server?.stop();
});

describe("pg Pool", () => {
  registerContract(() => newContext(stores, "pg"));
  registerSqlTests(() => ({ dialect: "postgres", db: pools[1], stores, raw }), { driver: "pg" });
});

describe("pg Client", () => {
  test("a single Client works as a store alongside the pools", async () => {
    const store = databaseLockStore(client);
    assert.equal(store.driver, "pg");
    const key = `keel-test:pg-client:${Date.now()}`;
    assert.equal(await store.acquire(key, "client-owner", 60_000), true);
    assert.equal(await stores[0].acquire(key, "pool-owner", 60_000), false);
    assert.equal(await stores[0].release(key, "client-owner"), true);
  });

  test("inside the client's open transaction, expiry still follows the real clock", async () => {
    // now() would be frozen at BEGIN; the store must judge by clock_timestamp().
    const store = databaseLockStore(client);
    const key = `keel-test:pg-tx:${Date.now()}`;
    await client.query("BEGIN");
    try {
      assert.equal(await store.acquire(key, "a", 100), true);
      await new Promise((r) => setTimeout(r, 300));
      assert.equal(await store.isLocked(key), false, "a lock outlived its TTL inside a transaction");
      assert.equal(await store.acquire(key, "b", 60_000), true, "an expired lock was not taken over");
    } finally {
      await client.query("ROLLBACK");
    }
  });
});
