// A throwaway redis-server on a free port, no persistence (plus any `args`, e.g. --replicaof),
// stopped by its PID (also on exit, so a crashed bench leaves nothing running).
import { spawn, spawnSync } from "node:child_process";
import { rmSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import { join } from "node:path";

// Signals end the process through process.exit, so the "exit" cleanups below run.
for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"]) process.once(signal, () => process.exit(130));

async function freePort() {
  const server = net.createServer();
  await new Promise((resolve, reject) => server.once("error", reject).listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

export async function startRedis({ args = [] } = {}) {
  const which = spawnSync("sh", ["-c", "command -v redis-server"], { encoding: "utf8" });
  const bin = process.env.REDIS_SERVER ?? (which.status === 0 ? which.stdout.trim() : "/usr/bin/redis-server");
  for (let attempt = 0; attempt < 5; attempt++) {
    const port = await freePort();
    // The data directory is the system's temp dir: a replica writes the data set it syncs there.
    const dir = os.tmpdir();
    const child = spawn(bin, ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", dir, "--dbfilename", `keel-bench-${port}.rdb`, ...args], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    const kill = () => {
      if (child.exitCode === null && child.signalCode === null) process.kill(child.pid, "SIGKILL");
    };
    process.on("exit", kill);
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (out += d));
    const deadline = Date.now() + 10_000;
    while (Date.now() < deadline && child.exitCode === null && !out.includes("Ready to accept connections")) {
      await new Promise((r) => setTimeout(r, 20));
    }
    if (out.includes("Ready to accept connections")) {
      const version = /version=(\d+\.\d+\.\d+)/.exec(out)?.[1] ?? "?";
      return {
        port,
        pid: child.pid,
        version,
        async stop() {
          if (child.exitCode !== null || child.signalCode !== null) return;
          const exited = new Promise((r) => child.once("exit", r));
          process.kill(child.pid, "SIGTERM");
          await Promise.race([exited, new Promise((r) => setTimeout(r, 3000))]);
          kill();
          process.removeListener("exit", kill);
          rmSync(join(dir, `keel-bench-${port}.rdb`), { force: true });
        },
      };
    }
    kill();
  }
  throw new Error("could not start redis-server");
}

/** Total calls per command from INFO commandstats, e.g. { set: 10, evalsha: 10 }. */
export async function commandStats(client) {
  const text = await client.info("commandstats");
  const stats = {};
  for (const m of text.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) stats[m[1]] = Number(m[2]);
  return stats;
}

/** after − before, leaving out the INFO calls the bench itself makes. */
export function statsDelta(before, after) {
  const delta = {};
  let total = 0;
  for (const [cmd, calls] of Object.entries(after)) {
    if (cmd === "info") continue;
    const d = calls - (before[cmd] ?? 0);
    if (d > 0) {
      delta[cmd] = d;
      total += d;
    }
  }
  return { total, byCommand: delta };
}
