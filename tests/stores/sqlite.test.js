// databaseLockStore over better-sqlite3: an in-memory database, then a database file shared by
// several connections (and by several threads racing for one key), then a file closed and
// reopened (the fence counter is in the file).
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { Worker } from "node:worker_threads";
import Database from "better-sqlite3";
import { databaseLockStore } from "../../pkg/stores/sql.js";
import { acquired, newContext, registerContract } from "./lib/contract.js";
import { fenceLedger, registerSqlTests } from "./lib/sql-suite.js";
import { registerAcquireManyTests } from "./lib/sql-multi.js";
import { registerInspectTests } from "./lib/sql-inspect.js";
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
  registerAcquireManyTests(() => ({ dialect: "sqlite", db, stores, raw: rawFor(db) }));
  registerInspectTests(() => ({ dialect: "sqlite", db, stores, raw: rawFor(db) }));
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
  registerAcquireManyTests(() => ({ dialect: "sqlite", db: dbs[1], stores, raw: rawFor(dbs[2]) }));
  registerInspectTests(() => ({ dialect: "sqlite", db: dbs[1], stores, raw: rawFor(dbs[2]) }));

  // Real parallelism: threads, each with its own connection, released at one instant. Answers
  // every attempt, [{ owner, answer }].
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

  // The one winner, checked: every loser answered exactly false, the winner's fence is new.
  function winnerOf(attempts, ledger, key, when) {
    const winners = attempts.filter((a) => acquired(a.answer));
    assert.equal(winners.length, 1, `${winners.length} threads' acquires won (${when})`);
    assert.ok(attempts.every((a) => a === winners[0] || a.answer === false), `a losing thread's acquire was not false (${when})`);
    ledger.take(key, winners[0].answer, when);
    return winners[0].owner;
  }

  test("50 acquirers on 5 threads with their own connections: exactly one wins, with a new fence", { timeout: 60_000 }, async () => {
    const key = `keel-test:threads:${randomBytes(4).toString("hex")}`;
    const ledger = fenceLedger();
    ledger.take(key, await stores[0].acquire(key, "previous-holder", 60_000), "before the race");
    assert.equal(await stores[0].release(key, "previous-holder"), true);
    const winner = winnerOf(await threadRace(key, 60_000), ledger, key, "threads, released key");
    assert.equal(await stores[0].release(key, winner), true);
  });

  test("50 acquirers on 5 threads racing for an expired row: exactly one takes it over, with a new fence", { timeout: 60_000 }, async () => {
    const key = `keel-test:threads:${randomBytes(4).toString("hex")}`;
    const ledger = fenceLedger();
    ledger.take(key, await stores[0].acquire(key, "previous-holder", 50), "before the race");
    await sleep(200);
    const winner = winnerOf(await threadRace(key, 60_000), ledger, key, "threads, expired key");
    assert.equal(await stores[0].release(key, winner), true);
    ledger.take(key, await stores[1].acquire(key, "after-the-race", 60_000), "after the race");
    assert.equal(await stores[1].release(key, "after-the-race"), true);
  });
});

describe("better-sqlite3, a file closed and reopened", () => {
  let dir;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), "keel-lock-sqlite-reopen-"));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  test("the fence counter is in the file: a reopened database goes on counting", async () => {
    const file = join(dir, "locks.db");
    const key = `keel-test:reopen:${randomBytes(4).toString("hex")}`;
    const ledger = fenceLedger();
    let db = new Database(file, { timeout: 10_000 });
    try {
      const store = databaseLockStore(db);
      await store.createTable();
      for (let i = 0; i < 3; i++) {
        ledger.take(key, await store.acquire(key, `holder-${i}`, 60_000), `first connection, ${i}`);
        assert.equal(await store.release(key, `holder-${i}`), true);
      }
      ledger.take(key, await store.acquire(key, "expiring", 50), "first connection, expiring");
      await sleep(200);
      assert.equal(await store.purgeExpired(), 1);
      assert.deepEqual(db.prepare("SELECT count(*) AS n FROM keel_locks").get(), { n: 0 });
    } finally {
      db.close();
    }
    db = new Database(file, { timeout: 10_000 });
    try {
      const store = databaseLockStore(db);
      await store.createTable(); // what an application does at start; must not reset anything
      ledger.take(key, await store.acquire(key, "after-reopen", 60_000), "after reopening the file");
      assert.equal(await store.release(key, "after-reopen"), true);
    } finally {
      db.close();
    }
  });
});
