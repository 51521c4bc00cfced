// databaseLockStore over better-sqlite3: an in-memory database, then a database file shared by
// several connections (and by several threads racing for one key).
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { Worker } from "node:worker_threads";
import Database from "better-sqlite3";
import { databaseLockStore } from "../../pkg/stores/sql.js";
import { newContext, registerContract } from "./lib/contract.js";
import { registerSqlTests } from "./lib/sql-suite.js";
import { sleep } from "./lib/servers.js";

const rawFor = (db) => async (sql, params) => {
  const stmt = db.prepare(sql);
  return stmt.reader ? stmt.all(...params) : (stmt.run(...params), []);
};

describe("better-sqlite3, in memory", () => {
  let db;
  let stores;
  before(async () => {
    db = new Database(":memory:");
    stores = [databaseLockStore(db)];
    await stores[0].createTable();
  });
  after(() => db.close());

  registerContract(() => newContext(stores, "sqlite-mem"));
  registerSqlTests(() => ({ dialect: "sqlite", db, stores, raw: rawFor(db) }), { driver: "sqlite" });
});

describe("better-sqlite3, one file, several connections", () => {
  let dir;
  let file;
  let dbs;
  let stores;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), "keel-lock-sqlite-"));
    file = join(dir, "locks.db");
    dbs = Array.from({ length: 4 }, () => new Database(file, { timeout: 10_000 }));
    dbs[0].pragma("journal_mode = WAL");
    stores = dbs.map((db) => databaseLockStore(db));
    await stores[0].createTable();
  });
  after(() => {
    for (const db of dbs) db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  registerContract(() => newContext(stores, "sqlite-file"));
  registerSqlTests(() => ({ dialect: "sqlite", db: dbs[1], stores, raw: rawFor(dbs[2]) }), { driver: "sqlite" });

  // Real parallelism: threads, each with its own connection, released at one instant.
  async function threadRace(key, ttl, threads = 5, perThread = 10) {
    const barrier = new SharedArrayBuffer(8);
    const gate = new Int32Array(barrier);
    const owners = Array.from({ length: threads }, () =>
      Array.from({ length: perThread }, () => randomBytes(16).toString("hex")),
    );
    const workers = owners.map(
      (mine) => new Worker(new URL("./lib/sqlite-worker.js", import.meta.url), { workerData: { file, key, owners: mine, ttl, barrier } }),
    );
    const results = workers.map(
      (w) =>
        new Promise((resolve, reject) => {
          w.once("message", resolve);
          w.once("error", reject);
        }),
    );
    while (Atomics.load(gate, 1) < threads) await sleep(5);
    Atomics.store(gate, 0, 1);
    Atomics.notify(gate, 0);
    return (await Promise.all(results)).flat();
  }

  test("50 acquirers on 5 threads with their own connections: exactly one wins", { timeout: 60_000 }, async () => {
    const key = `keel-test:threads:${randomBytes(4).toString("hex")}`;
    const winners = await threadRace(key, 60_000);
    assert.equal(winners.length, 1, `${winners.length} threads' acquires won`);
    assert.equal(await stores[0].release(key, winners[0]), true);
  });

  test("50 acquirers on 5 threads racing for an expired row: exactly one takes it over", { timeout: 60_000 }, async () => {
    const key = `keel-test:threads:${randomBytes(4).toString("hex")}`;
    assert.equal(await stores[0].acquire(key, "previous-holder", 50), true);
    await sleep(200);
    const winners = await threadRace(key, 60_000);
    assert.equal(winners.length, 1, `${winners.length} threads took over the expired row`);
    assert.equal(await stores[0].release(key, winners[0]), true);
  });
});
