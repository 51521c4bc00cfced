// Real servers for the store tests, started by the tests themselves on free ports and stopped by
// PID at the end (and on any exit, so a crashed test leaves nothing running):
//   startRedis()            redis-server, no persistence (optionally with extra redis-server arguments)
//   startRedisReplicated()  a redis-server with replicas of its own (REPLICAOF), once every replica is in sync
//   replicasCaughtUp()      waits until a primary's replicas are online, caught up, and acknowledge a write
//   startRedisCluster()     a Redis Cluster of three masters (redis-server --cluster-enabled yes, redis-cli --cluster create),
//                           optionally with replicas and extra redis-server arguments
//   startPostgres()         a throwaway PostgreSQL cluster (initdb + pg_ctl) in a temp dir
//   startUpstashFixture()   an HTTP server speaking Upstash's REST protocol, forwarding to a real redis-server
//   startD1()               Cloudflare D1 in local workerd through Miniflare
//   startEtcdCluster()      an etcd cluster (three members by default) on loopback ports, temp data dirs
import { spawn, spawnSync, execFile, execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, chownSync } from "node:fs";
import http from "node:http";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

// Cleanups that must run even if the test process dies: synchronous, by PID.
const onExit = new Set();
process.on("exit", () => {
  for (const cleanup of onExit) {
    try {
      cleanup();
    } catch {
      // best effort
    }
  }
});
for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"]) {
  process.once(signal, () => process.exit(130));
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export async function freePort() {
  const server = net.createServer();
  await new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", resolve);
  });
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

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

function which(cmd) {
  const found = spawnSync("sh", ["-c", `command -v ${cmd}`], { encoding: "utf8" });
  return found.status === 0 ? found.stdout.trim() : null;
}

// ---------------------------------------------------------------------------------------------
// redis-server

function redisBin(name, envVar) {
  const bin = process.env[envVar] ?? which(name) ?? `/usr/bin/${name}`;
  if (!existsSync(bin)) throw new Error(`${name} not found (${bin}); run make setup`);
  return bin;
}

// One redis-server in the foreground on a free port, no persistence, plus the arguments
// `extraArgs()` answers (called again on each attempt, so it may take free ports of its own);
// retried when it loses a race for a port.
async function launchRedis(extraArgs = async () => [], { cwd } = {}) {
  const bin = redisBin("redis-server", "REDIS_SERVER");
  for (let attempt = 0; ; attempt++) {
    const port = await freePort();
    const argv = [
      "--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no",
      ...(await extraArgs()),
    ];
    const child = spawn(bin, argv, { stdio: ["ignore", "pipe", "pipe"], cwd });
    // Running until it exits with a code or is ended by a signal (exitCode stays null then).
    const running = () => child.exitCode === null && child.signalCode === null;
    const kill = () => running() && process.kill(child.pid, "SIGKILL");
    onExit.add(kill);
    let output = "";
    child.stdout.on("data", (d) => (output += d));
    child.stderr.on("data", (d) => (output += d));
    const exited = new Promise((resolve) => child.once("exit", resolve));
    const deadline = Date.now() + 10_000;
    let up = false;
    while (Date.now() < deadline && child.exitCode === null) {
      if (output.includes("Ready to accept connections") && (await canConnect(port))) {
        up = true;
        break;
      }
      await sleep(25);
    }
    if (!up) {
      kill();
      onExit.delete(kill);
      if (attempt < 2 && /Address already in use/.test(output)) continue; // lost a port race
      throw new Error(`redis-server did not start on ${port}:\n${output}`);
    }
    return {
      port,
      pid: child.pid,
      url: `redis://127.0.0.1:${port}`,
      argv, // the server's arguments, to start it again the same way (same port, same directory)
      cwd,
      async stop() {
        if (running()) {
          process.kill(child.pid, "SIGTERM");
          await exited;
        }
        onExit.delete(kill);
      },
    };
  }
}

// Sends `commands` on one new connection in one write and answers their replies, each a line
// (`+OK`, `:1`, `-ERR …`): for commands whose replies are single lines.
export function simpleReplies(port, commands) {
  const text = commands.map((c) => `*${c.length}\r\n${c.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join("")}`).join("");
  return new Promise((resolve, reject) => {
    const socket = net.connect({ port, host: "127.0.0.1" });
    let got = "";
    socket.setTimeout(15_000, () => socket.destroy(new Error("no answer within 15 s")));
    socket.once("error", reject);
    socket.on("data", (d) => {
      got += d;
      const lines = got.split("\r\n");
      if (lines.length > commands.length) {
        socket.destroy();
        resolve(lines.slice(0, commands.length));
      }
    });
    socket.write(text);
  });
}

// Sends `command` on a new connection and answers its reply, a bulk string (INFO's, say).
function bulkReply(port, command, { timeoutMs = 15_000 } = {}) {
  const text = `*${command.length}\r\n${command.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join("")}`;
  return new Promise((resolve, reject) => {
    const socket = net.connect({ port, host: "127.0.0.1" });
    let got = Buffer.alloc(0);
    socket.setTimeout(timeoutMs, () => socket.destroy(new Error(`${command.join(" ")} on ${port}: no answer within ${timeoutMs} ms`)));
    socket.once("error", reject);
    socket.on("data", (d) => {
      got = Buffer.concat([got, d]);
      const end = got.indexOf("\r\n");
      if (end < 0) return;
      const head = got.subarray(0, end).toString();
      if (head[0] !== "$") {
        socket.destroy();
        reject(new Error(`${command.join(" ")} answered ${head}`));
        return;
      }
      const length = Number(head.slice(1));
      if (got.length >= end + 2 + length + 2) {
        socket.destroy();
        resolve(got.subarray(end + 2, end + 2 + length).toString());
      }
    });
    socket.write(text);
  });
}

/** INFO `section` of the redis-server on `port`, its lines ending in "\n". */
export async function redisInfo(port, section, { timeoutMs = 15_000 } = {}) {
  return (await bulkReply(port, ["INFO", section], { timeoutMs })).replace(/\r/g, "");
}

/**
 * Resolves once the primary on `primaryPort` is in sync with its replicas on `replicaPorts`: its
 * INFO replication lists each of them `state=online`; each replica's link is up and its offset
 * (slave_repl_offset) has reached the primary's master_repl_offset as the primary answered it
 * just before; and a write followed by `WAIT <replicas> 10000` on one connection to the primary
 * answers that every replica acknowledged it. `syncKey` is the key written (on a cluster, one of
 * the primary's own slots). Throws when that state is not reached within `timeoutMs`.
 */
export async function replicasCaughtUp(primaryPort, replicaPorts, { syncKey = "keel-test:replicas:sync", timeoutMs = 30_000 } = {}) {
  const deadline = Date.now() + timeoutMs;
  const left = () => Math.max(1_000, deadline - Date.now());
  let last = "";
  for (;;) {
    const primary = await redisInfo(primaryPort, "replication", { timeoutMs: left() });
    const target = Number(/^master_repl_offset:(\d+)$/m.exec(primary)?.[1]);
    let inSync = Number.isInteger(target) && replicaPorts.every((port) => new RegExp(`^slave\\d+:ip=[^,]*,port=${port},state=online,`, "m").test(primary));
    last = primary;
    for (const port of inSync ? replicaPorts : []) {
      const replica = await redisInfo(port, "replication", { timeoutMs: left() });
      const offset = Number(/^slave_repl_offset:(\d+)$/m.exec(replica)?.[1]);
      if (!/^master_link_status:up$/m.test(replica) || !(offset >= target)) {
        inSync = false;
        last = `${primary}\nreplica ${port}:\n${replica}`;
      }
    }
    if (inSync) break;
    if (Date.now() > deadline) throw new Error(`the replicas of ${primaryPort} did not catch up within ${timeoutMs} ms:\n${last}`);
    await sleep(20);
  }
  // WAIT counts the replicas that acknowledged this connection's last write.
  const answer = await simpleReplies(primaryPort, [["SET", syncKey, String(Date.now())], ["WAIT", String(replicaPorts.length), "10000"]]);
  if (answer[1] !== `:${replicaPorts.length}`) throw new Error(`the replicas of ${primaryPort} did not acknowledge a write within 10 s: ${answer.join(" ")}`);
}

/**
 * Polls `probe` every `everyMs` until it answers something truthy, and answers that; throws,
 * naming `what`, after `ms` (a deadline far past any stall, not a verdict on timing).
 */
export async function until(what, probe, ms = 20_000, everyMs = 50) {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms`);
    await sleep(everyMs);
  }
}

/** Resolves once process `pid` has stopped (SIGSTOP taken: state T in /proc/<pid>/stat). */
export async function untilStopped(pid, { timeoutMs = 10_000 } = {}) {
  const file = `/proc/${pid}/stat`;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const stat = readFileSync(file, "utf8");
    const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
    if (state === "T" || state === "t") return;
    if (Date.now() > deadline) throw new Error(`process ${pid} did not stop within ${timeoutMs} ms (state ${state})`);
    await sleep(5);
  }
}

export function startRedis({ args = [] } = {}) {
  return launchRedis(async () => args);
}

/**
 * A primary redis-server and `replicas` replicas of it (`--replicaof`; no diskless-sync delay),
 * once they are in sync (replicasCaughtUp). `args` are added to every server's command line.
 * `inSync()` waits for that state again (after a replica was paused, or before a case that needs
 * every replica to acknowledge at once). Each replica answers { port, pid, url, pause(),
 * resume() }: pause() waits until every replica is in sync, then SIGSTOPs this one and resolves
 * once it has stopped (it neither reads the replication stream nor acknowledges it, as a replica
 * that lags does, having acknowledged every write made before); resume() SIGCONTs it.
 */
export async function startRedisReplicated({ replicas = 1, args = [] } = {}) {
  // Each server keeps its files (a replica writes the synced data set to disk) in a temp dir.
  const dir = mkdtempSync(join(tmpdir(), "keel-lock-redis-replicated-"));
  const removeDir = () => rmSync(dir, { recursive: true, force: true });
  onExit.add(removeDir);
  let servers = 0;
  const own = () => {
    const d = join(dir, String(servers++));
    mkdirSync(d);
    return d;
  };
  const common = ["--repl-diskless-sync-delay", "0", ...args];
  const primaryDir = own();
  const primary = await launchRedis(async () => [...common, "--dir", primaryDir]);
  const started = [];
  const stop = async () => {
    for (const r of started) {
      try {
        process.kill(r.pid, "SIGCONT");
      } catch {
        // gone
      }
      await r.stop();
    }
    await primary.stop();
    removeDir();
    onExit.delete(removeDir);
  };
  const inSync = () => replicasCaughtUp(primary.port, started.map((r) => r.port));
  try {
    for (let i = 0; i < replicas; i++) {
      const replicaDir = own();
      started.push(await launchRedis(async () => [...common, "--dir", replicaDir, "--replicaof", "127.0.0.1", String(primary.port)]));
    }
    await inSync();
  } catch (error) {
    await stop();
    throw error;
  }
  return {
    port: primary.port,
    url: primary.url,
    pid: primary.pid,
    inSync,
    replicas: started.map((r) => ({
      port: r.port,
      pid: r.pid,
      url: r.url,
      async pause() {
        await inSync();
        process.kill(r.pid, "SIGSTOP");
        await untilStopped(r.pid);
      },
      resume() {
        process.kill(r.pid, "SIGCONT");
      },
    })),
    stop,
  };
}

// ---------------------------------------------------------------------------------------------
// Redis Cluster: `masters` redis-servers in cluster mode (and `replicas` more per master), each in
// its own directory under one temp dir (where it keeps nodes.conf) with its cluster bus on a second
// free port, joined by `redis-cli --cluster create … --cluster-replicas N --cluster-yes`; `args`
// are added to every server's command line (e.g. a shorter --cluster-node-timeout). Ready once
// every node reports cluster_state:ok with all 16384 slots assigned and every node known. `nodes`
// lists the servers in creation order, each with the arguments and directory it was started with.

async function redisCli(args, { timeout = 60_000 } = {}) {
  const cli = redisBin("redis-cli", "REDIS_CLI");
  return new Promise((resolve, reject) => {
    execFile(cli, args, { encoding: "utf8", timeout }, (error, stdout, stderr) => {
      if (error) reject(new Error(`redis-cli ${args.join(" ")} failed: ${error.message}\n${stdout}${stderr}`));
      else resolve(stdout);
    });
  });
}

export async function startRedisCluster({ masters = 3, replicas = 0, args = [] } = {}) {
  const count = masters * (1 + replicas);
  const dir = mkdtempSync(join(tmpdir(), "keel-lock-redis-cluster-"));
  const nodes = [];
  const removeDir = () => rmSync(dir, { recursive: true, force: true });
  onExit.add(removeDir);
  const stop = async () => {
    for (const node of nodes) await node.stop();
    removeDir();
    onExit.delete(removeDir);
  };
  try {
    for (let i = 0; i < count; i++) {
      const nodeDir = join(dir, `node-${i}`);
      mkdirSync(nodeDir);
      const clusterArgs = async () => [
        "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--dir", nodeDir,
        "--cluster-port", String(await freePort()),
        ...args,
      ];
      nodes.push(await launchRedis(clusterArgs, { cwd: nodeDir }));
    }
    const addresses = nodes.map((n) => `127.0.0.1:${n.port}`);
    await redisCli(["--cluster", "create", ...addresses, "--cluster-replicas", String(replicas), "--cluster-yes"]);
    const deadline = Date.now() + 30_000;
    for (;;) {
      const infos = await Promise.all(nodes.map((n) => redisCli(["-p", String(n.port), "cluster", "info"])));
      const ready = infos.every(
        (info) =>
          /cluster_state:ok/.test(info) &&
          /cluster_slots_ok:16384/.test(info) &&
          new RegExp(`cluster_known_nodes:${count}\\b`).test(info),
      );
      if (ready) break;
      if (Date.now() > deadline) throw new Error(`the cluster did not become ready:\n${infos.join("\n")}`);
      await sleep(100);
    }
  } catch (error) {
    await stop();
    throw error;
  }
  return {
    nodes: nodes.map((n) => ({ host: "127.0.0.1", port: n.port, pid: n.pid, url: n.url, argv: n.argv, cwd: n.cwd })),
    stop,
  };
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL

function postgresBin() {
  if (process.env.PG_BIN) return process.env.PG_BIN;
  const root = "/usr/lib/postgresql";
  if (existsSync(root)) {
    const versions = readdirSync(root)
      .filter((v) => existsSync(join(root, v, "bin", "initdb")))
      .sort((a, b) => Number(b) - Number(a));
    if (versions.length) return join(root, versions[0], "bin");
  }
  const initdb = which("initdb");
  if (initdb) return initdb.replace(/\/initdb$/, "");
  throw new Error("PostgreSQL binaries (initdb, pg_ctl) not found; run make setup or set PG_BIN");
}

/** An ioredis (`Module`: ioredis 5 or 6) Cluster client of `cluster`, once it is ready. */
export async function ioredisCluster(Module, cluster) {
  const Ctor = Module.default ?? Module;
  const client = new Ctor.Cluster(cluster.nodes.map(({ host, port }) => ({ host, port })));
  await new Promise((resolve, reject) => {
    client.once("ready", resolve);
    client.once("error", reject);
  });
  return client;
}

/** A node-redis (`create`: its createCluster) Cluster client of `cluster`, connected. */
export async function nodeRedisCluster(create, cluster) {
  const client = create({ rootNodes: cluster.nodes.map(({ url }) => ({ url })) });
  client.on("error", () => {});
  await client.connect();
  return client;
}

export async function startPostgres() {
  const bin = postgresBin();
  const dir = mkdtempSync(join(tmpdir(), "keel-lock-pg-"));
  const data = join(dir, "data");
  const asRoot = process.getuid?.() === 0;
  let uid;
  let gid;
  if (asRoot) {
    // initdb refuses to run as root: the cluster belongs to the postgres user.
    uid = Number(execFileSync("id", ["-u", "postgres"], { encoding: "utf8" }).trim());
    gid = Number(execFileSync("id", ["-g", "postgres"], { encoding: "utf8" }).trim());
    chownSync(dir, uid, gid);
  }
  const run = (tool, args, opts = {}) => {
    const [cmd, argv] = asRoot ? ["runuser", ["-u", "postgres", "--", join(bin, tool), ...args]] : [join(bin, tool), args];
    const result = spawnSync(cmd, argv, { encoding: "utf8", ...opts });
    if (result.status !== 0 && !opts.allowFailure) {
      throw new Error(`${tool} ${args.join(" ")} failed (${result.status}):\n${result.stdout}\n${result.stderr}`);
    }
    return result;
  };
  run("initdb", ["-D", data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8", "--locale=C"]);
  const stopNow = () => {
    run("pg_ctl", ["-D", data, "-m", "immediate", "-w", "stop"], { allowFailure: true });
    // If pg_ctl could not stop it, kill the postmaster by the PID in its pid file.
    const pidFile = join(data, "postmaster.pid");
    if (existsSync(pidFile)) {
      const pid = Number(readFileSync(pidFile, "utf8").split("\n")[0]);
      if (pid > 0) {
        try {
          process.kill(pid, "SIGQUIT");
        } catch {
          // already gone
        }
      }
    }
    rmSync(dir, { recursive: true, force: true });
  };
  for (let attempt = 0; ; attempt++) {
    const port = await freePort();
    const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=120`;
    const started = run("pg_ctl", ["-D", data, "-o", options, "-l", join(dir, "log"), "-w", "-t", "30", "start"], {
      allowFailure: true,
    });
    if (started.status !== 0) {
      const log = existsSync(join(dir, "log")) ? readFileSync(join(dir, "log"), "utf8") : "";
      if (attempt < 2 && /already in use/.test(log)) continue;
      stopNow();
      throw new Error(`pg_ctl start failed:\n${started.stdout}\n${started.stderr}\n${log}`);
    }
    onExit.add(stopNow);
    return {
      port,
      connectionString: `postgres://postgres@127.0.0.1:${port}/postgres`,
      async stop() {
        run("pg_ctl", ["-D", data, "-m", "fast", "-w", "stop"], { allowFailure: true });
        stopNow();
        onExit.delete(stopNow);
      },
    };
  }
}

// ---------------------------------------------------------------------------------------------
// Upstash REST fixture: Upstash's HTTP protocol in front of a real redis-server.
//   POST /            body ["SET","k","v","PX","100","NX"]        → {"result": …} | 400 {"error": …}
//   POST /pipeline    body [[…], […]]                             → [{"result": …} | {"error": …}, …]
//   POST /multi-exec  body [[…], […]]  (MULTI … EXEC)             → same shape
// With the request header `Upstash-Encoding: base64`, string results are base64 (as Upstash does).
// Commands reach Redis unchanged through a real client connection (ioredis `call`).

export async function startUpstashFixture(redisPort, { token = "keel-lock-test-token", IORedis } = {}) {
  // A suite that installs its own ioredis passes it: this file's import resolves from tests/stores.
  IORedis ??= (await import("ioredis")).default;
  const upstream = new IORedis({ host: "127.0.0.1", port: redisPort, lazyConnect: true });
  await upstream.connect();
  const encode = (value, base64) => {
    if (typeof value === "string") return base64 ? Buffer.from(value, "utf8").toString("base64") : value;
    if (Array.isArray(value)) return value.map((v) => encode(v, base64));
    return value ?? null;
  };
  const errorText = (error) => String(error?.message ?? error);
  const stats = { requests: 0, commands: 0 };
  const server = http.createServer(async (req, res) => {
    const reply = (status, body) => {
      res.writeHead(status, { "content-type": "application/json" });
      res.end(JSON.stringify(body));
    };
    try {
      stats.requests++;
      if (req.method !== "POST") return reply(405, { error: "only POST" });
      if (req.headers.authorization !== `Bearer ${token}`) return reply(401, { error: "Unauthorized" });
      let raw = "";
      for await (const chunk of req) raw += chunk;
      const body = JSON.parse(raw);
      const base64 = String(req.headers["upstash-encoding"] ?? "").toLowerCase() === "base64";
      const path = new URL(req.url, "http://fixture").pathname.replace(/\/+$/, "");
      const toArgs = (command) => command.map((part) => (typeof part === "string" ? part : JSON.stringify(part)));
      if (path === "") {
        stats.commands++;
        try {
          return reply(200, { result: encode(await upstream.call(...toArgs(body)), base64) });
        } catch (error) {
          return reply(400, { error: errorText(error) });
        }
      }
      if (path === "/pipeline" || path === "/multi-exec") {
        stats.commands += body.length;
        const batch = path === "/pipeline" ? upstream.pipeline() : upstream.multi();
        for (const command of body) batch.call(...toArgs(command));
        const results = await batch.exec();
        return reply(
          200,
          results.map(([error, result]) => (error ? { error: errorText(error) } : { result: encode(result, base64) })),
        );
      }
      return reply(404, { error: `no route ${path}` });
    } catch (error) {
      return reply(500, { error: errorText(error) });
    }
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  return {
    url: `http://127.0.0.1:${port}`,
    token,
    stats,
    async stop() {
      server.closeAllConnections?.();
      await new Promise((resolve) => server.close(resolve));
      upstream.disconnect();
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Cloudflare D1 in local workerd (Miniflare). Each call from Node goes to the real D1
// implementation (SQLite in workerd) through Miniflare's proxy.

export async function startD1() {
  const { Miniflare } = await import("miniflare");
  const mf = new Miniflare({
    modules: true,
    script: 'export default { fetch() { return new Response("keel-lock D1 fixture"); } };',
    compatibilityDate: "2026-04-01",
    d1Databases: { DB: "keel-lock-test" },
  });
  const db = await mf.getD1Database("DB");
  return {
    db,
    async stop() {
      await mf.dispose();
    },
  };
}

// ---------------------------------------------------------------------------------------------
// etcd: a cluster of `members` (3) etcd processes on loopback ports, each with its data dir in one
// temp dir, a short heartbeat and election timeout (50 / 500 ms) so a new leader is elected
// within a second or two of the old one's death. Ready once every member answers the JSON
// gateway's status with the same leader and a linearizable read succeeds through each.

function etcdBin() {
  const bin = process.env.ETCD ?? which("etcd") ?? "/usr/bin/etcd";
  if (!existsSync(bin)) throw new Error(`etcd not found (${bin}); run make setup (apt etcd-server)`);
  return bin;
}

/** POSTs `body` as JSON to an etcd member's gateway `path`; answers the parsed reply, or throws. */
export async function etcdCall(url, path, body = {}, { timeoutMs = 5_000 } = {}) {
  const response = await fetch(url + path, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await response.text();
  if (!response.ok) throw new Error(`${path} on ${url}: HTTP ${response.status} ${text}`);
  return JSON.parse(text);
}

/**
 * Starts an etcd cluster (`args` added to every member's command line). Answers { endpoints, members, leader(), waitHealthy(), stop() }:
 * `endpoints` the members' client URLs; each member { name, url, pid, running(), kill(signal),
 * start() } (start() runs it again on its data dir, after a kill); `leader()` waits (up to
 * `timeoutMs`) until the running members agree on a leader and answers its index in `members`.
 */
export async function startEtcdCluster({ members: count = 3, args = [], timeoutMs = 30_000 } = {}) {
  const bin = etcdBin();
  const dir = mkdtempSync(join(tmpdir(), "keel-lock-etcd-"));
  const removeDir = () => rmSync(dir, { recursive: true, force: true });
  const token = `keel-lock-${process.pid}-${Date.now()}`;
  for (let attempt = 0; ; attempt++) {
    const ports = [];
    for (let i = 0; i < count; i++) ports.push({ client: await freePort(), peer: await freePort() });
    const names = ports.map((_, i) => `m${i}`);
    const initialCluster = ports.map((p, i) => `${names[i]}=http://127.0.0.1:${p.peer}`).join(",");
    const members = ports.map((p, i) => {
      const name = names[i];
      const url = `http://127.0.0.1:${p.client}`;
      const argv = [
        "--name", name,
        "--data-dir", join(dir, name),
        "--listen-client-urls", url,
        "--advertise-client-urls", url,
        "--listen-peer-urls", `http://127.0.0.1:${p.peer}`,
        "--initial-advertise-peer-urls", `http://127.0.0.1:${p.peer}`,
        "--initial-cluster", initialCluster,
        "--initial-cluster-state", "new",
        "--initial-cluster-token", token,
        "--heartbeat-interval", "50",
        "--election-timeout", "500",
        "--log-level", "warn",
        "--logger", "zap",
        ...args,
      ];
      let child = null;
      let output = "";
      let kill = null;
      const member = {
        name,
        url,
        get pid() {
          return child?.pid ?? null;
        },
        get output() {
          return output;
        },
        running: () => child !== null && child.exitCode === null && child.signalCode === null,
        start() {
          child = spawn(bin, argv, { stdio: ["ignore", "pipe", "pipe"] });
          const mine = child;
          kill = () => mine.exitCode === null && mine.signalCode === null && process.kill(mine.pid, "SIGKILL");
          onExit.add(kill);
          mine.stdout.on("data", (d) => (output = (output + d).slice(-20_000)));
          mine.stderr.on("data", (d) => (output = (output + d).slice(-20_000)));
          member.exited = new Promise((resolve) => mine.once("exit", resolve));
        },
        /** Sends `signal` (SIGKILL by default) and, unless it is SIGSTOP / SIGCONT, waits for the exit. */
        async kill(signal = "SIGKILL") {
          if (!member.running()) return;
          process.kill(child.pid, signal);
          if (signal !== "SIGSTOP" && signal !== "SIGCONT") await member.exited;
        },
      };
      return member;
    });
    for (const m of members) m.start();
    const cluster = {
      dir,
      members,
      endpoints: members.map((m) => m.url),
      async leader({ timeoutMs: wait = timeoutMs } = {}) {
        const deadline = Date.now() + wait;
        let last = "";
        for (;;) {
          const running = members.filter((m) => m.running());
          try {
            const statuses = await Promise.all(running.map((m) => etcdCall(m.url, "/v3/maintenance/status", {}, { timeoutMs: 2_000 })));
            const leaders = new Set(statuses.map((s) => s.leader));
            const ids = statuses.map((s) => s.header.member_id);
            const [leader] = leaders;
            if (leaders.size === 1 && leader && leader !== "0" && ids.includes(leader)) {
              // A linearizable read through every running member: each can serve the store.
              await Promise.all(running.map((m) => etcdCall(m.url, "/v3/kv/range", { key: "a2VlbC1sb2NrLWhlYWx0aA==" }, { timeoutMs: 2_000 })));
              return members.indexOf(running[ids.indexOf(leader)]);
            }
            last = `leaders ${[...leaders].join(", ")} among ${ids.join(", ")}`;
          } catch (error) {
            last = error.message;
          }
          if (Date.now() > deadline) throw new Error(`etcd cluster has no leader within ${wait} ms (${last})`);
          await sleep(50);
        }
      },
      async stop() {
        for (const m of members) await m.kill("SIGKILL");
        removeDir();
        onExit.delete(removeDir);
      },
    };
    onExit.add(removeDir);
    try {
      await cluster.leader();
      return cluster;
    } catch (error) {
      const inUse = members.some((m) => /address already in use/i.test(m.output));
      for (const m of members) await m.kill("SIGKILL");
      if (attempt < 2 && inUse) {
        rmSync(dir, { recursive: true, force: true });
        mkdirSync(dir);
        continue;
      }
      removeDir();
      throw new Error(`${error.message}\n${members.map((m) => `${m.name}: ${m.output.slice(-2_000)}`).join("\n")}`);
    }
  }
}
