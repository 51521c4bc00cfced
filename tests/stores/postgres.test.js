// databaseLockStore over pg, against a throwaway PostgreSQL cluster started here (initdb +
// pg_ctl in a temp dir, on a free port) and stopped at the end; a second cluster is stopped and
// started again on its data directory to show the fence counter survives restarts.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFileSync, realpathSync } from "node:fs";
import { dirname, join } from "node:path";
import { after, before, describe, test } from "node:test";
import pg from "pg";
import { databaseLockStore } from "../../pkg/stores/sql.js";
import { sleep, startPostgres } from "./lib/servers.js";
import { acquired, newContext, registerContract } from "./lib/contract.js";
import { fenceLedger, fenceScenario, registerSqlTests } from "./lib/sql-suite.js";
import { registerPgWaitingTests } from "./lib/pg-waiting.js";
import { registerAcquireManyTests, registerPgAcquireManyTests } from "./lib/sql-multi.js";
import { registerInspectTests, registerPgInspectTests } from "./lib/sql-inspect.js";

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
  registerAcquireManyTests(() => ({ dialect: "postgres", db: pools[1], stores, raw }));
  registerPgAcquireManyTests(() => ({ stores, pools, raw }));
  registerInspectTests(() => ({ dialect: "postgres", db: pools[1], stores, raw }));
  registerPgInspectTests(() => ({ stores, pools, raw }));
});

registerPgWaitingTests(() => ({ connectionString: server.connectionString, pools }));

describe("pg Client", () => {
  test("a single Client works as a store alongside the pools", async () => {
    const store = databaseLockStore(client);
    assert.equal(store.driver, "pg");
    const key = `keel-test:pg-client:${Date.now()}`;
    assert.equal(acquired(await store.acquire(key, "client-owner", 60_000)), true);
    assert.equal(await stores[0].acquire(key, "pool-owner", 60_000), false);
    assert.equal(await stores[0].release(key, "client-owner"), true);
  });

  test("inside the client's open transaction, expiry still follows the real clock", async () => {
    // now() would be frozen at BEGIN; the store must judge by clock_timestamp().
    const store = databaseLockStore(client);
    const key = `keel-test:pg-tx:${Date.now()}`;
    const ledger = fenceLedger();
    await client.query("BEGIN");
    try {
      ledger.take(key, await store.acquire(key, "a", 100), "inside the transaction");
      await sleep(300);
      assert.equal(await store.isLocked(key), false, "a lock outlived its TTL inside a transaction");
      ledger.take(key, await store.acquire(key, "b", 60_000), "taking over inside the transaction");
    } finally {
      await client.query("ROLLBACK");
    }
    // The rows rolled back; the fences stay spent (sequences are not transactional), so a fence
    // seen inside the rolled-back transaction is never handed out again.
    ledger.take(key, await stores[0].acquire(key, "c", 60_000), "after the rollback");
    assert.equal(await stores[0].release(key, "c"), true);
  });
});

describe("a broken Postgres fence counter is caught (pg)", () => {
  test("a sequence with a per-session cache hands out fences out of order: the fence checks fail", { timeout: 60_000 }, async () => {
    const table = `cached_seq_${randomBytes(3).toString("hex")}`;
    const broken = pools.map((pool) => databaseLockStore(pool, { table }));
    await broken[0].createTable();
    // What CACHE 1 in schema() prevents: each session takes 20 values at a time and hands them
    // out while other sessions, holding later blocks, go on acquiring the same key.
    await pools[0].query(`ALTER SEQUENCE "${table}_fence_seq" CACHE 20`);
    try {
      await assert.rejects(
        fenceScenario({ stores: broken }, "cached-sequence"),
        (error) => error instanceof assert.AssertionError && /is not greater than the fence \d+ handed out before it/.test(error.message),
      );
    } finally {
      await pools[0].query(`DROP TABLE IF EXISTS "${table}", "${table}_waiters"`);
      await pools[0].query(`DROP SEQUENCE IF EXISTS "${table}_fence_seq"`);
    }
  });
});

// The resource-side check from pkg/stores/README.md, verbatim: the protected row remembers the
// largest fence that wrote it and refuses anything older.
const FENCED_UPDATE = "UPDATE ledger SET balance = $1, last_fence = $2 WHERE id = $3 AND last_fence <= $2";

describe("fencing a resource (pg)", () => {
  test("a holder that stalls past its TTL cannot write after the next holder has: 0 rows updated", async () => {
    const ledgerTable = "ledger";
    await pools[0].query(`CREATE TABLE ${ledgerTable} (id INT PRIMARY KEY, balance BIGINT NOT NULL, last_fence BIGINT NOT NULL DEFAULT 0)`);
    try {
      await pools[0].query("INSERT INTO ledger (id, balance) VALUES (1, 100)");
      const write = async (pool, fence, balance) => (await pool.query(FENCED_UPDATE, [balance, fence, 1])).rowCount;
      const [storeA, storeB] = [stores[0], stores[1]];
      const key = `keel-test:ledger:${randomBytes(4).toString("hex")}`;

      // A acquires, reads the balance, and stalls (a GC pause, a lost network) past its TTL.
      const a = await storeA.acquire(key, "holder-a", 300);
      assert.equal(acquired(a), true);
      await sleep(800);
      assert.equal(await storeB.isLocked(key), false);

      // B acquires the expired lock with a larger fence and writes, twice.
      const b = await storeB.acquire(key, "holder-b", 60_000);
      assert.equal(acquired(b), true);
      assert.ok(b.fence > a.fence, `B's fence ${b.fence} is not above A's ${a.fence}`);
      assert.equal(await write(pools[1], b.fence, 150), 1, "the current holder could not write");
      assert.equal(await write(pools[1], b.fence, 175), 1, "the current holder could not write a second time");

      // A wakes up and writes with its old fence: refused by the resource.
      assert.equal(await write(pools[2], a.fence, 999), 0, "the stale holder's write was applied");
      const [row] = (await pools[0].query("SELECT balance, last_fence FROM ledger WHERE id = 1")).rows;
      assert.deepEqual(row, { balance: "175", last_fence: String(b.fence) });
      assert.equal(await storeA.release(key, "holder-a"), false);
      assert.equal(await storeA.extend(key, "holder-a", 60_000), false);
      assert.equal(await storeB.release(key, "holder-b"), true);
    } finally {
      await pools[0].query(`DROP TABLE IF EXISTS ${ledgerTable}`);
    }
  });
});

// Stops the cluster behind `pool` and starts it again on the same data directory with the
// options it was started with (postmaster.opts), as pg_ctl restart would. `mode` is pg_ctl's stop
// mode: "fast" is a clean shutdown, "immediate" a crash that the start recovers from the WAL.
function stopAndStart(dataDir, mode) {
  const pid = Number(readFileSync(join(dataDir, "postmaster.pid"), "utf8").split("\n")[0]);
  const bin = dirname(realpathSync(`/proc/${pid}/exe`));
  // postmaster.opts: the server binary, then each argument in double quotes.
  const args = [...readFileSync(join(dataDir, "postmaster.opts"), "utf8").matchAll(/"([^"]*)"/g)].map((m) => m[1]);
  const dataAt = args.indexOf("-D");
  if (dataAt >= 0) args.splice(dataAt, 2);
  const asRoot = process.getuid?.() === 0;
  const pgCtl = (...argv) => {
    const [cmd, full] = asRoot ? ["runuser", ["-u", "postgres", "--", join(bin, "pg_ctl"), ...argv]] : [join(bin, "pg_ctl"), argv];
    const result = spawnSync(cmd, full, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
    assert.equal(result.status, 0, `pg_ctl ${argv.join(" ")}: ${result.stdout}${result.stderr}`);
  };
  pgCtl("stop", "-D", dataDir, "-m", mode, "-w");
  pgCtl("start", "-D", dataDir, "-o", args.join(" "), "-l", join(dirname(dataDir), "restart.log"), "-w", "-t", "30");
}

describe("the fence counter across PostgreSQL restarts", () => {
  let cluster;
  before(async () => {
    cluster = await startPostgres();
  });
  after(async () => {
    await cluster?.stop();
  });

  test("pg_ctl stop/start on the same data directory (clean and crash stops) keeps counting up", { timeout: 120_000 }, async () => {
    const key = `keel-test:restart:${randomBytes(4).toString("hex")}`;
    const ledger = fenceLedger();
    const session = async (when, body) => {
      const pool = new pg.Pool({ connectionString: cluster.connectionString, max: 4 });
      pool.on("error", () => {});
      try {
        return await body(pool, databaseLockStore(pool));
      } finally {
        await pool.end();
      }
    };
    const dataDir = await session("before", async (pool, store) => {
      await store.createTable();
      for (let i = 0; i < 3; i++) {
        ledger.take(key, await store.acquire(key, `before-${i}`, 60_000), `before restarting, ${i}`);
        assert.equal(await store.release(key, `before-${i}`), true);
      }
      ledger.take(key, await store.acquire(key, "expiring", 50), "before restarting, expiring");
      await sleep(200);
      assert.equal(await store.purgeExpired(), 1);
      return (await pool.query("SHOW data_directory")).rows[0].data_directory;
    });
    for (const mode of ["fast", "immediate"]) {
      stopAndStart(dataDir, mode);
      await session(mode, async (pool, store) => {
        await store.createTable(); // what an application does at start; must not reset anything
        ledger.take(key, await store.acquire(key, `after-${mode}`, 60_000), `after a ${mode} stop and a start`);
        assert.equal(await store.release(key, `after-${mode}`), true);
        assert.deepEqual((await pool.query("SELECT count(*)::int AS n FROM keel_locks")).rows, [{ n: 0 }]);
      });
    }
    // And the whole scenario once more on the restarted server, two pools racing.
    const pools2 = [0, 1].map(() => new pg.Pool({ connectionString: cluster.connectionString, max: 10 }));
    for (const p of pools2) p.on("error", () => {});
    try {
      await fenceScenario({ stores: pools2.map((p) => databaseLockStore(p)) }, "after-restarts");
    } finally {
      for (const p of pools2) await p.end();
    }
  });
});
