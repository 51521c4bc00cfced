// Running the installed keel-lock bin (node_modules/.bin/keel-lock, from the packed tarball) as
// a user does, and waiting for states — never for a length of time (docs/testing.md).
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
export const BIN = join(here, "..", "node_modules", ".bin", "keel-lock");
export const WORKER = join(here, "worker.sh");
export const ALIVE = join(here, "alive.sh");

if (!existsSync(BIN)) {
  throw new Error(`${BIN} is missing: run scripts/test.d/35-cli.sh (it packs pkg/ and installs it here)`);
}

const started = new Set();
process.on("exit", () => {
  for (const child of started) {
    try {
      process.kill(child.pid, "SIGKILL");
    } catch {
      // gone
    }
  }
});

/**
 * Starts `keel-lock ...args`; answers `{ child, done }`, `done` resolving to `{ code, signal,
 * stdout, stderr }` once it exits.
 */
export function keel(args, { env = {}, cwd, stdin = "ignore" } = {}) {
  const child = spawn(BIN, args, { cwd, env: { ...process.env, ...env }, stdio: [stdin, "pipe", "pipe"] });
  started.add(child);
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (chunk) => (stdout += chunk));
  child.stderr.on("data", (chunk) => (stderr += chunk));
  // `exited`: keel-lock itself ended (`done` also waits for its stdout and stderr to close, which
  // a COMMAND that outlived it may hold open).
  const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })));
  const done = new Promise((resolve) => {
    child.on("close", (code, signal) => {
      started.delete(child);
      resolve({ code, signal, stdout, stderr });
    });
  });
  return { child, done, exited, output: () => ({ stdout, stderr }) };
}

/** `keel-lock ...args` to its end. */
export function keelDone(args, options) {
  return keel(args, options).done;
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls `check` until it answers something truthy; fails after `timeoutMs` naming `what`. */
export async function until(what, check, { timeoutMs = 20_000, everyMs = 25 } = {}) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}

const dirs = new Set();
process.on("exit", () => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

/** A fresh temporary directory, removed when the process exits. */
export function tempDir(prefix = "keel-lock-cli-") {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  dirs.add(dir);
  return dir;
}

/** Whether `pid` is a running (not zombie) process. */
export function running(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const state = stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0];
    return state !== "Z" && state !== "X";
  } catch {
    return false;
  }
}

/** The overlap log the worker writes: one `fence concurrent` pair per start, in start order. */
export function readLog(dir) {
  const path = join(dir, "log");
  if (!existsSync(path)) return [];
  return readFileSync(path, "utf8")
    .trim()
    .split("\n")
    .filter(Boolean)
    .map((line) => {
      const [fence, concurrent] = line.split(" ").map(Number);
      return { fence, concurrent };
    });
}

/** The worker command: marks itself in `dir` while it runs, logging fence and how many ran. */
export function worker(dir, seconds = 0.3) {
  return ["sh", WORKER, dir, String(seconds)];
}

/** The JSON lines keel-lock wrote on stderr (with --json). */
export function events(stderr) {
  return stderr
    .split("\n")
    .filter((line) => line.startsWith("{"))
    .map((line) => JSON.parse(line));
}
