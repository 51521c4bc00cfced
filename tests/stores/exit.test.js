// A user's script ends when they close what they opened. Each test runs lib/exit-child.js — the
// README's quick start in a process of its own, with keel-lock installed from the tarball — against
// real servers: a waited run (the store opens its own pub/sub or LISTEN connection), then the
// user's client is closed and nothing else. The process must exit 0 by itself — within 10 s of the
// close, room for a loaded machine — with no store.close(). A client closed while a run is still
// queued must reject that run with LockStoreClosedError (not leave it hanging), and a script that
// leaves its client open must still be alive after those 10 s — the check can tell a process that
// ends from one that hangs.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { startPostgres, startRedisCluster } from "./lib/servers.js";
import { useRedis } from "./lib/redis-fixture.js";
import { STORES_DIR, installedKeelLock } from "./lib/installed.js";

const CHILD = join(STORES_DIR, "lib", "exit-child.js");
const EXIT_WITHIN_MS = 10_000;
const children = new Set();
process.on("exit", () => {
  for (const child of children) if (child.exitCode === null) child.kill("SIGKILL");
});

/**
 * Runs the child; answers its JSON lines, exit code, and how long after its "closing" line it
 * exited (null if it was still running EXIT_WITHIN_MS after it, when it is killed).
 */
function runChild(kind, address, scenario) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CHILD, kind, JSON.stringify(address), scenario], { cwd: STORES_DIR, stdio: ["ignore", "pipe", "pipe"] });
    children.add(child);
    const lines = [];
    let stderr = "";
    let buffered = "";
    let closingAt = null;
    let killTimer = null;
    const startKillTimer = () => {
      killTimer = setTimeout(() => child.kill("SIGKILL"), EXIT_WITHIN_MS);
    };
    child.stdout.on("data", (chunk) => {
      buffered += chunk;
      let nl;
      while ((nl = buffered.indexOf("\n")) >= 0) {
        const line = JSON.parse(buffered.slice(0, nl));
        buffered = buffered.slice(nl + 1);
        lines.push(line);
        if (line.step === "closing" && closingAt === null) {
          closingAt = Date.now();
          startKillTimer();
        }
        // Nothing is closed in "left-open": the clock starts once the script's work is done.
        if (line.step === "done" && scenario === "left-open") {
          closingAt = Date.now();
          startKillTimer();
        }
      }
    });
    child.stderr.on("data", (chunk) => (stderr += chunk));
    const overall = setTimeout(() => child.kill("SIGKILL"), 60_000);
    child.on("error", reject);
    child.on("exit", (code, signal) => {
      clearTimeout(killTimer);
      clearTimeout(overall);
      children.delete(child);
      const killed = signal === "SIGKILL";
      resolve({ lines, code, stderr, exitedAfterMs: killed || closingAt === null ? null : Date.now() - closingAt });
    });
  });
}

function assertExitedCleanly(result) {
  assert.equal(result.stderr, "", "nothing on stderr");
  assert.notEqual(result.exitedAfterMs, null, `the process was still running ${EXIT_WITHIN_MS} ms after its client was closed: ${JSON.stringify(result.lines)}`);
  assert.equal(result.code, 0);
}

function assertWaitedRun(result) {
  assertExitedCleanly(result);
  const done = result.lines.find((line) => line.step === "done");
  assert.deepEqual(done.answer, [true, "ran"]);
  assert.equal(done.opened, 1, "the run waited in the store (its own connection was opened)");
}

function assertWatched(result) {
  assertExitedCleanly(result);
  const done = result.lines.find((line) => line.step === "done");
  assert.equal(done.opened, 1, "the watch opened the store's pub/sub connection");
  assert.equal(done.stop, "function");
  assert.deepEqual(done.reports.map((r) => r.held), [false, true, false], `the watch saw the release, the grant and the release: ${JSON.stringify(done.reports)}`);
}

function assertQueuedRejected(result) {
  assertExitedCleanly(result);
  const done = result.lines.find((line) => line.step === "done");
  assert.equal(done.opened, 1, "the run was queued in the store when the client was closed");
  assert.equal(done.rejected, "LockStoreClosedError", `the queued run answered ${JSON.stringify(done)}`);
  assert.match(done.message, /closed|ended/);
}

before(() => {
  assert.ok(installedKeelLock().isCopy, "keel-lock must be installed from the tarball");
});

describe("Redis standalone", () => {
  let redis;
  useRedis({ ready: (server) => (redis = server.redis) });

  for (const kind of ["ioredis", "node-redis"]) {
    test(`${kind}: a waited run, then client.quit() — the process exits by itself`, { timeout: 60_000 }, async () => {
      assertWaitedRun(await runChild(kind, { port: redis.port, url: redis.url }, "waited"));
    });
    test(`${kind}: client.quit() with a watch live — the process exits by itself`, { timeout: 60_000 }, async () => {
      assertWatched(await runChild(kind, { port: redis.port, url: redis.url }, "watching"));
    });
    test(`${kind}: the client is quit while a run is queued — the run rejects with LockStoreClosedError and the process exits`, { timeout: 60_000 }, async () => {
      assertQueuedRejected(await runChild(kind, { port: redis.port, url: redis.url }, "queued"));
    });
  }

  test("ioredis: a script that leaves its client open is still running 10 s later (the check sees a hang)", { timeout: 60_000 }, async () => {
    const result = await runChild("ioredis", { port: redis.port, url: redis.url }, "left-open");
    assert.equal(result.exitedAfterMs, null, `it exited ${result.exitedAfterMs} ms after its work`);
  });
});

describe("Redis Cluster (3 masters)", () => {
  let cluster;
  before(async () => {
    cluster = await startRedisCluster({ masters: 3 });
  });
  after(async () => cluster?.stop());

  for (const kind of ["ioredis-cluster", "node-redis-cluster"]) {
    test(`${kind}: a waited run, then quit() — the process exits by itself`, { timeout: 60_000 }, async () => {
      assertWaitedRun(await runChild(kind, { nodes: cluster.nodes }, "waited"));
    });
    test(`${kind}: quit() with a watch live — the process exits by itself`, { timeout: 60_000 }, async () => {
      assertWatched(await runChild(kind, { nodes: cluster.nodes }, "watching"));
    });
    test(`${kind}: quit() while a run is queued — the run rejects with LockStoreClosedError and the process exits`, { timeout: 60_000 }, async () => {
      assertQueuedRejected(await runChild(kind, { nodes: cluster.nodes }, "queued"));
    });
  }
});

describe("PostgreSQL", () => {
  let postgres;
  before(async () => {
    postgres = await startPostgres();
  });
  after(async () => postgres?.stop());

  for (const kind of ["pg-pool", "pg-client"]) {
    const address = () => ({ connectionString: postgres.connectionString, table: `exit_${kind.replace("-", "_")}` });
    test(`${kind}: a waited run, then end() — the process exits by itself`, { timeout: 60_000 }, async () => {
      assertWaitedRun(await runChild(kind, address(), "waited"));
    });
    test(`${kind}: end() while a run is queued — the run rejects with LockStoreClosedError and the process exits`, { timeout: 60_000 }, async () => {
      assertQueuedRejected(await runChild(kind, address(), "queued"));
    });
  }
});
