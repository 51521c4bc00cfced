// Servers the fault suite can stop and start again on the same port and data directory:
//   startRedis({ aof })   redis-server; with aof, appendonly + appendfsync always (every acknowledged
//                         write survives a SIGKILL); without, no persistence at all
//   startPg()             a throwaway PostgreSQL cluster (initdb + pg_ctl)
//   startCluster()        a Redis Cluster of three masters with one replica each (started by
//                         tests/stores/lib/servers.js), with failover(), takeover() and restart()
//                         of the master serving a run's key
//   startUpstash()        redis-server (no persistence) behind the Upstash REST fixture of
//                         tests/stores/lib/servers.js
//   startEtcd()           a three-member etcd cluster (started by tests/stores/lib/servers.js),
//                         with leader() (the leader SIGKILLed and started again) and member()
//                         (a follower SIGKILLed and started again)
// Each answers { ..., restart(), stop() }; restart() kills the server abruptly (SIGKILL / immediate
// shutdown) and starts it again. A fault may answer { persistent, t0, t1 }: whether the store kept
// its state through it (when that differs from the server's `persistent`) and when it happened. Everything is stopped by PID on exit. Free ports come from
// tests/stores/lib/servers.js.
import { spawn, spawnSync, execFileSync } from "node:child_process";
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import IORedis from "ioredis";
import { freePort, simpleReplies, sleep, startEtcdCluster, startRedisCluster, startUpstashFixture } from "../../stores/lib/servers.js";

const cleanups = new Set();
process.on("exit", () => {
  for (const cleanup of cleanups) {
    try {
      cleanup();
    } catch {
      // best effort
    }
  }
});

function canConnect(port) {
  return new Promise((resolve) => {
    const socket = net.connect({ port, host: "127.0.0.1" });
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}

async function until(what, ready, ms = 15_000) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await ready()) return;
    await sleep(20);
  }
  throw new Error(`${what} did not become ready within ${ms} ms`);
}

export async function startRedis({ aof = false } = {}) {
  const dir = mkdtempSync(join(tmpdir(), "keel-lock-faults-redis-"));
  const port = await freePort();
  const persistence = aof ? ["--appendonly", "yes", "--appendfsync", "always"] : ["--appendonly", "no"];
  let child = null;
  const kill = () => child && child.exitCode === null && process.kill(child.pid, "SIGKILL");
  const removeDir = () => rmSync(dir, { recursive: true, force: true });
  cleanups.add(kill);
  cleanups.add(removeDir);
  const launch = async () => {
    child = spawn(
      "redis-server",
      ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--dir", dir, "--daemonize", "no", ...persistence],
      { stdio: "ignore" },
    );
    const exited = new Promise((resolve) => child.once("exit", resolve));
    child.exited = exited;
    await until("redis-server", () => canConnect(port));
  };
  await launch();
  return {
    port,
    persistent: aof,
    async restart() {
      const old = child;
      process.kill(old.pid, "SIGKILL");
      await old.exited;
      await launch();
    },
    async stop() {
      kill();
      if (child) await child.exited;
      removeDir();
      cleanups.delete(kill);
      cleanups.delete(removeDir);
    },
  };
}

function postgresBin() {
  const root = "/usr/lib/postgresql";
  const versions = existsSync(root)
    ? readdirSync(root).filter((v) => existsSync(join(root, v, "bin", "initdb"))).sort((a, b) => Number(b) - Number(a))
    : [];
  if (versions.length === 0) throw new Error("PostgreSQL binaries not found under /usr/lib/postgresql; run make setup");
  return join(root, versions[0], "bin");
}

export async function startPg() {
  const bin = postgresBin();
  const dir = mkdtempSync(join(tmpdir(), "keel-lock-faults-pg-"));
  const data = join(dir, "data");
  const asRoot = process.getuid?.() === 0;
  if (asRoot) {
    const uid = Number(execFileSync("id", ["-u", "postgres"], { encoding: "utf8" }).trim());
    const gid = Number(execFileSync("id", ["-g", "postgres"], { encoding: "utf8" }).trim());
    chownSync(dir, uid, gid);
  }
  const run = (tool, args, allowFailure = false) => {
    const [cmd, argv] = asRoot ? ["runuser", ["-u", "postgres", "--", join(bin, tool), ...args]] : [join(bin, tool), args];
    const result = spawnSync(cmd, argv, { encoding: "utf8", timeout: 60_000 });
    if (result.status !== 0 && !allowFailure) throw new Error(`${tool} failed:\n${result.stdout}\n${result.stderr}`);
    return result;
  };
  run("initdb", ["-D", data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8", "--locale=C"]);
  const port = await freePort();
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200`;
  const start = () => run("pg_ctl", ["-D", data, "-o", options, "-l", join(dir, "log"), "-w", "-t", "30", "start"]);
  const halt = () => run("pg_ctl", ["-D", data, "-m", "immediate", "-w", "stop"], true);
  const cleanup = () => {
    halt();
    rmSync(dir, { recursive: true, force: true });
  };
  cleanups.add(cleanup);
  start();
  return {
    port,
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    persistent: true,
    async restart() {
      halt(); // immediate: no shutdown checkpoint; the WAL replays on start
      start();
    },
    async stop() {
      cleanup();
      cleanups.delete(cleanup);
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Redis Cluster: three masters, one replica each, a 1 s node timeout (a dead master is replaced
// in about 2-3 s), replicas that sync at once (no diskless-sync delay) and DEBUG allowed from
// local connections. Three faults, each on the master serving the slot of a key the run locks
// (`key`):
//   failover()  CLUSTER FAILOVER on that master's replica: the master pauses writes, the replica
//               catches up with every write the master acknowledged and takes over, so none is
//               lost. Answers { persistent: true } once the replica answers as master (the old
//               master follows it while the run goes on): an overlap or a repeated fence across
//               it is a violation.
//   takeover()  the failover that does not wait: the replica stops reading for LAG_MS (DEBUG
//               SLEEP) while the master goes on acknowledging writes, then, before it reads any
//               of them, takes the slots over (CLUSTER FAILOVER TAKEOVER, sent in the same write
//               as the DEBUG SLEEP, so Redis runs it straight after the sleep, before it reads its
//               master link again). Every write the master acknowledged during the sleep (and any
//               not yet replicated before it) is lost; the old master follows the new one and
//               drops them. Answers { persistent: false } with the window from the sleep until the
//               old master answers as a replica (until then it may still acknowledge writes that
//               are lost too): what the checker explains by it is reported as losses.
//   restart()   the master is SIGKILLed; the cluster promotes its replica; the killed node is
//               started again (same port, same nodes.conf, no data) and rejoins as a replica
//               while the run goes on. Replication is asynchronous, so writes acknowledged just
//               before the kill may never have reached the replica: answers { persistent: false }
//               with the window in which they can be lost (from the kill until the replica
//               answers as master), and what the checker explains by that is reported as losses.
// Each waits (bounded) first until the cluster is whole: every node up, cluster_state:ok on each,
// every replica connected and through its initial sync (a CLUSTER FAILOVER sent to a replica
// still in its initial sync was seen never to complete).

const CLUSTER_ARGS = ["--cluster-node-timeout", "1000", "--repl-diskless-sync-delay", "0", "--enable-debug-command", "local"];
// How long the replica reads nothing before it takes over: under the node timeout, so no node
// marks it as failing meanwhile, and longer than the suite's TTL (300 ms), so no hold from before
// the sleep outlives it on the new master (a release lost with the sleep leaves nothing held
// that the checker would see refused while free).
const LAG_MS = 500;
const SETTLE_MS = 30_000;

export async function startCluster() {
  const cluster = await startRedisCluster({ masters: 3, replicas: 1, args: CLUSTER_ARGS });
  const nodes = cluster.nodes.map((n) => ({ ...n, child: null }));
  const connect = (node) => {
    const c = new IORedis({ host: node.host, port: node.port, maxRetriesPerRequest: 0, retryStrategy: () => 50, commandTimeout: 2000 });
    c.on("error", () => {});
    return c;
  };
  const admin = new Map(nodes.map((n) => [n.port, connect(n)]));
  const ask = async (port, ...command) => {
    try {
      return await admin.get(port).call(...command);
    } catch {
      return null;
    }
  };
  // Runs `step` until it answers something truthy, for at most `ms`.
  const until = async (what, step, ms = SETTLE_MS) => {
    const deadline = Date.now() + ms;
    for (;;) {
      const answer = await step();
      if (answer) return answer;
      if (Date.now() > deadline) throw new Error(`Redis Cluster: ${what} within ${ms} ms`);
      await sleep(20);
    }
  };
  // ROLE of every node: [{ port, role: "master" | "slave" | null (down), master?, link? }].
  const roles = async () =>
    Promise.all(
      nodes.map(async ({ port }) => {
        const r = await ask(port, "ROLE");
        if (!r) return { port, role: null };
        if (r[0] === "master") return { port, role: "master" };
        return { port, role: "slave", master: Number(r[2]), link: r[3] };
      }),
    );
  // Whole: three masters, each with one replica that is connected and done with its initial
  // sync (the master lists it as online: it streams every write from then on), and every node
  // reporting cluster_state:ok. A replica's offset trails its master's under load by the writes
  // since its last acknowledgement, so it is not compared: CLUSTER FAILOVER itself waits for the
  // replica to catch up, and what a killed master had not yet streamed is the loss its restart
  // is recorded for.
  const whole = async () => {
    const all = await roles();
    const masters = all.filter((r) => r.role === "master");
    if (masters.length !== 3 || all.some((r) => r.role === null)) return false;
    for (const m of masters) {
      const replica = all.find((r) => r.role === "slave" && r.master === m.port);
      if (!replica || replica.link !== "connected") return false;
      const info = (await ask(m.port, "INFO", "replication")) ?? "";
      if (!new RegExp(`^slave\\d+:ip=[^,]*,port=${replica.port},state=online,`, "m").test(info)) return false;
    }
    for (const { port } of nodes) if (!/cluster_state:ok/.test((await ask(port, "CLUSTER", "INFO")) ?? "")) return false;
    return all;
  };
  // The master serving `key`'s lock (its hash tag is the key itself) and that master's replica.
  const pair = async (key) => {
    const all = await until("the cluster was not whole", whole);
    const slot = Number(await ask(nodes[0].port, "CLUSTER", "KEYSLOT", key));
    const ranges = (await ask(nodes[0].port, "CLUSTER", "SLOTS")) ?? [];
    const range = ranges.find(([from, to]) => slot >= from && slot <= to);
    const master = Number(range[2][1]);
    const replica = all.find((r) => r.role === "slave" && r.master === master).port;
    return { master, replica };
  };
  const now = () => performance.timeOrigin + performance.now();
  let rejoined = Promise.resolve();
  const launch = (node) => {
    const child = spawn(process.env.REDIS_SERVER ?? "redis-server", node.argv, { cwd: node.cwd, stdio: "ignore" });
    child.exited = new Promise((resolve) => child.once("exit", resolve));
    node.child = child;
    node.pid = child.pid;
  };
  const killNode = (node) => {
    try {
      process.kill(node.pid, "SIGKILL");
    } catch {
      // already gone
    }
  };
  const killStarted = () => nodes.forEach((n) => n.child && n.child.exitCode === null && n.child.signalCode === null && killNode(n));
  cleanups.add(killStarted);

  return {
    nodes: nodes.map(({ host, port }) => ({ host, port })),
    persistent: true,
    async failover({ key }) {
      await rejoined;
      const { master, replica } = await pair(key);
      // A manual failover the master does not complete in time is dropped by the replica
      // (silently); it is asked again.
      let asked = 0;
      const t0 = now();
      await until("the replica was not promoted", async () => {
        const role = await ask(replica, "ROLE");
        if (role?.[0] === "master") return true;
        if (asked++ % 100 === 0) await ask(replica, "CLUSTER", "FAILOVER");
        return false;
      });
      const t1 = now();
      rejoined = (async () => {
        await until("the old master did not follow the new one", async () => (await ask(master, "ROLE"))?.[0] === "slave");
        await until("the cluster was not whole after the failover", whole);
      })();
      rejoined.catch(() => {}); // reported by the next fault, which waits for it
      return { persistent: true, t0, t1 };
    },
    async takeover({ key }) {
      await rejoined;
      const { master, replica } = await pair(key);
      const t0 = now();
      const replies = await simpleReplies(replica, [
        ["DEBUG", "SLEEP", String(LAG_MS / 1000)],
        ["CLUSTER", "FAILOVER", "TAKEOVER"],
      ]);
      if (replies.some((r) => r !== "+OK")) throw new Error(`Redis Cluster: the takeover was refused: ${replies.join(" ")}`);
      await until("the old master did not follow the new one", async () => (await ask(master, "ROLE"))?.[0] === "slave");
      const t1 = now();
      rejoined = until("the cluster was not whole after the takeover", whole);
      rejoined.catch(() => {}); // reported by the next fault, which waits for it
      return { persistent: false, t0, t1 };
    },
    async restart({ key }) {
      await rejoined;
      const { master } = await pair(key);
      const node = nodes.find((n) => n.port === master);
      const t0 = now();
      killNode(node);
      await until("the killed master's replica was not promoted", async () => {
        const all = await roles();
        if (all.filter((r) => r.role === "master").length !== 3) return false;
        for (const r of all) if (r.port !== master && !/cluster_state:ok/.test((await ask(r.port, "CLUSTER", "INFO")) ?? "")) return false;
        return true;
      });
      const t1 = now();
      launch(node);
      rejoined = until("the restarted node did not rejoin as a synced replica", whole);
      rejoined.catch(() => {}); // reported by the next fault, which waits for it
      return { persistent: false, t0, t1 };
    },
    async stop() {
      await rejoined.catch(() => {});
      for (const c of admin.values()) c.disconnect();
      killStarted();
      await Promise.all(nodes.map((n) => n.child?.exited));
      await cluster.stop();
      cleanups.delete(killStarted);
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Upstash: the REST fixture (Upstash's HTTP protocol, served from this process) in front of a
// redis-server without persistence. Its clients poll: @upstash/redis has no pub/sub.

export async function startUpstash() {
  const redis = await startRedis({ aof: false });
  const fixture = await startUpstashFixture(redis.port);
  return {
    url: fixture.url,
    token: fixture.token,
    persistent: false,
    async stop() {
      await fixture.stop();
      await redis.stop();
    },
  };
}

// ---------------------------------------------------------------------------------------------
// etcd: three members on loopback ports, a 50 ms heartbeat and a 500 ms election timeout (a new
// leader within a second or two of the old one's death). Raft commits every write on a majority
// before it is answered, so no fault here loses an acknowledged write: each answers
// { persistent: true }, and an overlap or a repeated fence across it is a violation.
//   leader()  the leader is SIGKILLed; once the two left agree on a new leader (every call
//             meanwhile may fail) it is started again on its data dir and rejoins as a follower
//             while the run goes on. The new leader restarts every lease's countdown: a hold
//             whose holder died may outlive its TTL by up to one more TTL (docs/testing.md).
//   member()  a follower is SIGKILLed and started again at once; it rejoins while the run goes on.
// Each first waits (bounded) until the three members agree on a leader again after the last.

export async function startEtcd() {
  const cluster = await startEtcdCluster({ members: 3 });
  const now = () => performance.timeOrigin + performance.now();
  let rejoined = Promise.resolve();
  const whole = () => cluster.leader({ timeoutMs: SETTLE_MS });
  const bounce = async (pick) => {
    await rejoined;
    const leader = await whole();
    const index = pick(leader);
    const member = cluster.members[index];
    const t0 = now();
    await member.kill("SIGKILL");
    // Killing a follower leaves the leader in place; killing the leader waits for the election.
    const next = await cluster.leader({ timeoutMs: SETTLE_MS });
    if (index === leader && next === leader) throw new Error("etcd: the killed leader is still the leader");
    const t1 = now();
    member.start();
    rejoined = (async () => {
      const deadline = Date.now() + SETTLE_MS;
      for (;;) {
        try {
          await cluster.leader({ timeoutMs: 2_000 });
          if (member.running()) return;
        } catch (error) {
          if (Date.now() > deadline) throw error;
        }
        if (!member.running()) throw new Error(`etcd: member ${member.name} did not start again`);
        await sleep(50);
      }
    })();
    rejoined.catch(() => {}); // reported by the next fault, which waits for it
    return { persistent: true, t0, t1, leader: index === leader };
  };
  return {
    endpoints: cluster.endpoints,
    persistent: true,
    leader: () => bounce((leader) => leader),
    member: () => bounce((leader) => (leader + 1) % cluster.members.length),
    async stop() {
      await rejoined.catch(() => {});
      await cluster.stop();
    },
  };
}
