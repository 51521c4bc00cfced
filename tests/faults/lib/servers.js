// Servers the fault suite can stop and start again on the same port and data directory:
//   startRedis({ aof })   redis-server; with aof, appendonly + appendfsync always (every acknowledged
//                         write survives a SIGKILL); without, no persistence at all
//   startPg()             a throwaway PostgreSQL cluster (initdb + pg_ctl)
// Each answers { ..., restart(), stop() }; restart() kills the server abruptly (SIGKILL / immediate
// shutdown) and starts it again. Everything is stopped by PID on exit. Free ports come from
// tests/stores/lib/servers.js.
import { spawn, spawnSync, execFileSync } from "node:child_process";
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, sleep } from "../../stores/lib/servers.js";

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
