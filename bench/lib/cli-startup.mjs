// (10) The command line's start-up: a whole `keel-lock run KEY -- true` (Node starts, the wasm
// loads, the default store — a SQLite file — is opened, the key taken, `true` run, the key
// released) beside `flock -n LOCKFILE true`, the one-machine tool it stands in for, and a bare
// `node -e ''`, the floor any Node command pays. Fresh processes, interleaved rounds, medians:
// numbers, not a timing test.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { performance } from "node:perf_hooks";
import { median, round } from "./stats.mjs";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const BIN = join(ROOT, "pkg", "bin", "keel-lock.js");

// On Node < 22.13 the default store needs better-sqlite3 from the user's install: the command runs
// in a directory that has one (the cli or store tests' node_modules).
function driverDir() {
  let hasNodeSqlite = false;
  try {
    hasNodeSqlite = spawnSync(process.execPath, ["-e", "require('node:sqlite')"], { stdio: "ignore" }).status === 0;
  } catch {}
  if (hasNodeSqlite) return ROOT;
  return [join(ROOT, "tests", "cli"), join(ROOT, "tests", "stores")].find((dir) => existsSync(join(dir, "node_modules", "better-sqlite3")));
}

export function cliStartup({ quick, log }) {
  const cwd = driverDir();
  if (!cwd) return { measured: false, reason: "no node:sqlite and no better-sqlite3 installed (run scripts/test.d/35-cli.sh once)" };
  const flockBin = spawnSync("sh", ["-c", "command -v flock"], { encoding: "utf8" }).stdout.trim();
  const dir = mkdtempSync(join(tmpdir(), "keel-lock-bench-cli-"));
  const env = { ...process.env, XDG_RUNTIME_DIR: dir, KEEL_LOCK_STORE: "" };
  const commands = [
    ["keel-lock run k -- true (default store)", process.execPath, [BIN, "run", "bench-k", "--", "true"]],
    ["keel-lock --version (no wasm, no store)", process.execPath, [BIN, "--version"]],
    ...(flockBin ? [["flock -n LOCKFILE true", flockBin, ["-n", join(dir, "lockfile"), "true"]]] : []),
    ["node -e ''", process.execPath, ["-e", ""]],
  ];
  const N = quick ? 3 : 15;
  log(`(10) command-line start-up: ${N} rounds of ${commands.length} fresh processes`);
  const walls = commands.map(() => []);
  try {
    // One unrecorded round first: the store's file and table are created then, and the files read
    // are in the page cache for every recorded round alike.
    for (let round_ = -1; round_ < N; round_++) {
      commands.forEach(([name, file, args], i) => {
        const t0 = performance.now();
        const p = spawnSync(file, args, { cwd, env, encoding: "utf8" });
        const wall = performance.now() - t0;
        if (p.status !== 0) throw new Error(`${name} failed (${p.status}): ${p.stderr}`);
        if (round_ >= 0) walls[i].push(wall);
      });
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const floor = median(walls[commands.length - 1]);
  return {
    processes: N,
    measured: "wall time from spawn to exit of a fresh process (spawnSync), median over interleaved rounds; the default store is a SQLite file in a fresh XDG_RUNTIME_DIR",
    sqlite: cwd === ROOT ? "node:sqlite" : "better-sqlite3",
    rows: commands.map(([name], i) => ({
      command: name,
      wallMs: round(median(walls[i]), 1),
      minMs: round(Math.min(...walls[i]), 1),
      overNodeMs: round(median(walls[i]) - floor, 1),
    })),
  };
}

export function cliStartupMarkdown(s) {
  if (!s) return [];
  if (s.measured === false) return ["", `#### 10. Command-line start-up: not measured (${s.reason})`];
  const L = ["", `#### 10. Command-line start-up: ${s.processes} interleaved rounds of fresh processes (default store through ${s.sqlite})`, ""];
  L.push("| command | wall ms (median) | min ms | over `node -e ''` (ms) |", "|---|---:|---:|---:|");
  for (const r of s.rows) L.push(`| ${r.command} | ${r.wallMs} | ${r.minMs} | ${r.overNodeMs} |`);
  return L;
}
