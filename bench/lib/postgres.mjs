// A throwaway PostgreSQL cluster for the bench: initdb into a temp dir, pg_ctl start on a free
// port (127.0.0.1 only, fsync off, trust auth), stopped by pg_ctl and, failing that, by the
// postmaster's PID; the directory is removed. Also stopped on exit, so a crashed bench leaves
// nothing running. Run as root, the cluster belongs to the `postgres` user (initdb refuses root).
// Answers null with a reason when no PostgreSQL binaries are installed.
import { spawnSync, execFileSync } from "node:child_process";
import { chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

function binDir() {
  if (process.env.PG_BIN) return process.env.PG_BIN;
  const root = "/usr/lib/postgresql";
  if (!existsSync(root)) return null;
  const versions = readdirSync(root)
    .filter((v) => existsSync(join(root, v, "bin", "initdb")))
    .sort((a, b) => Number(b) - Number(a));
  return versions.length ? join(root, versions[0], "bin") : null;
}

async function freePort() {
  const server = net.createServer();
  await new Promise((resolve, reject) => server.once("error", reject).listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** { port, connectionString, version, stop() } or { unavailable: reason }. */
export async function startPostgres() {
  const bin = binDir();
  if (bin === null) return { unavailable: "no PostgreSQL binaries (initdb, pg_ctl) under /usr/lib/postgresql; set PG_BIN" };
  const dir = mkdtempSync(join(tmpdir(), "keel-bench-pg-"));
  const data = join(dir, "data");
  const asRoot = process.getuid?.() === 0;
  if (asRoot) {
    const id = (flag) => Number(execFileSync("id", [flag, "postgres"], { encoding: "utf8" }).trim());
    chownSync(dir, id("-u"), id("-g"));
  }
  const tool = (name, args) => {
    const [cmd, argv] = asRoot ? ["runuser", ["-u", "postgres", "--", join(bin, name), ...args]] : [join(bin, name), args];
    return spawnSync(cmd, argv, { encoding: "utf8" });
  };
  let stopped = false;
  const stopNow = () => {
    if (stopped) return;
    stopped = true;
    tool("pg_ctl", ["-D", data, "-m", "fast", "-w", "-t", "10", "stop"]);
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
  process.on("exit", stopNow);
  const init = tool("initdb", ["-D", data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8", "--locale=C"]);
  if (init.status !== 0) {
    stopNow();
    throw new Error(`initdb failed: ${init.stderr}`);
  }
  const version = /\d+(\.\d+)?/.exec(tool("postgres", ["--version"]).stdout)?.[0] ?? "?";
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freePort();
    const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c max_connections=50`;
    const started = tool("pg_ctl", ["-D", data, "-o", options, "-l", join(dir, "log"), "-w", "-t", "30", "start"]);
    if (started.status === 0) {
      return {
        port,
        version,
        connectionString: `postgres://postgres@127.0.0.1:${port}/postgres`,
        async stop() {
          stopNow();
          process.removeListener("exit", stopNow);
        },
      };
    }
    const log = existsSync(join(dir, "log")) ? readFileSync(join(dir, "log"), "utf8") : "";
    if (!/already in use/.test(log)) {
      stopNow();
      throw new Error(`pg_ctl start failed: ${started.stderr}\n${log}`);
    }
  }
  stopNow();
  throw new Error("pg_ctl start: no free port after 3 attempts");
}
