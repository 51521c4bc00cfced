// Every store URL against a real server the test starts: the same runs, judged the same way —
// of two at once one runs and the other exits 75; with --timeout they take turns, never
// overlapping (the overlap detector), with fences that strictly increase; inspect shows the holder.
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import IORedis from "ioredis";
import { startPostgres, startRedis, startRedisCluster, startUpstashFixture } from "../stores/lib/servers.js";
import { keel, keelDone, readLog, tempDir, until, worker } from "./lib/cli.js";

const servers = [];
after(async () => {
  for (const server of servers.reverse()) await server.stop();
});

const stores = {
  "sqlite:PATH": async () => ({ url: `sqlite:${join(tempDir(), "locks.db")}` }),
  "redis://": async () => {
    const redis = await startRedis();
    servers.push(redis);
    return { url: redis.url };
  },
  "redis+cluster://": async () => {
    const cluster = await startRedisCluster();
    servers.push(cluster);
    return { url: `redis+cluster://${cluster.nodes.map((n) => `${n.host}:${n.port}`).join(",")}` };
  },
  "postgres://": async () => {
    const pg = await startPostgres();
    servers.push(pg);
    return { url: pg.connectionString };
  },
  "Upstash REST": async () => {
    const redis = await startRedis();
    servers.push(redis);
    const fixture = await startUpstashFixture(redis.port, { IORedis });
    servers.push(fixture);
    return { url: fixture.url, env: { KEEL_LOCK_UPSTASH_TOKEN: fixture.token } };
  },
};

for (const [name, start] of Object.entries(stores)) {
  describe(name, () => {
    let store;
    before(async () => {
      store = await start();
    });
    const env = () => ({ KEEL_LOCK_STORE: store.url, ...store.env });

    test("two runs at once: one runs, the other exits 75; inspect shows the holder", async () => {
      const dir = tempDir();
      const first = keel(["run", "--metadata", "job one", "k", "--", "sh", "-c", `touch ${dir}/started; sleep 30`], { env: env() });
      await until("the first COMMAND to start", () => existsSync(join(dir, "started")));
      const second = await keelDone(["run", "k", "--", "sh", "-c", `touch ${dir}/second`], { env: env() });
      assert.equal(second.code, 75, second.stderr);
      assert.ok(!existsSync(join(dir, "second")));
      const seen = await keelDone(["inspect", "--json", "k"], { env: env() });
      assert.equal(seen.code, 0, seen.stderr);
      const info = JSON.parse(seen.stdout);
      assert.equal(info.held, true);
      assert.equal(info.holders[0].metadata, "job one");
      first.child.kill("SIGTERM");
      assert.equal((await first.done).code, 128 + 15);
      const free = JSON.parse((await keelDone(["inspect", "--json", "k"], { env: env() })).stdout);
      assert.equal(free.held, false, "released when COMMAND exits");
    });

    test("with --timeout, three runs take turns, never overlapping, fences increasing", async () => {
      const dir = tempDir();
      const outs = await Promise.all(
        Array.from({ length: 3 }, () => keelDone(["run", "--timeout", "60s", "k-turns", "--", ...worker(dir, 0.3)], { env: env() })),
      );
      for (const out of outs) assert.equal(out.code, 0, out.stderr);
      const log = readLog(dir);
      assert.equal(log.length, 3);
      for (const entry of log) assert.equal(entry.concurrent, 1, `overlap: ${JSON.stringify(log)}`);
      for (let i = 1; i < log.length; i++) assert.ok(log[i].fence > log[i - 1].fence, `fences ${JSON.stringify(log)}`);
    });
  });
}
