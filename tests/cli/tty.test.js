// What a person at a terminal sees, through script(1) giving keel-lock a pseudo-terminal: the
// status line while waiting (who holds the key, its fence and time left), and release --force
// asking before it frees a key.
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { BIN, keel, keelDone, tempDir, until } from "./lib/cli.js";

// script(1) (util-linux, on every Debian) gives COMMAND a pseudo-terminal; without it these tests
// fail rather than skip.
const hasScript = spawnSync("sh", ["-c", "command -v script"]).status === 0;
test("script(1) is there to give keel-lock a terminal", () => assert.ok(hasScript, "script(1) not found: install util-linux"));
const env = { XDG_RUNTIME_DIR: tempDir(), KEEL_LOCK_STORE: "" };
const quote = (word) => `'${word.replace(/'/g, "'\\''")}'`;

const terminals = new Set();
process.on("exit", () => {
  for (const child of terminals) child.kill("SIGKILL");
});

/** `keel-lock ...args` on a pseudo-terminal; its output (stdout and stderr together) as it comes. */
function onTerminal(args, { input } = {}) {
  const child = spawn("script", ["-qec", [BIN, ...args].map(quote).join(" "), "/dev/null"], {
    env: { ...process.env, ...env },
    stdio: ["pipe", "pipe", "inherit"],
  });
  terminals.add(child);
  child.on("exit", () => terminals.delete(child));
  let output = "";
  child.stdout.on("data", (chunk) => (output += chunk));
  if (input === undefined) child.stdin.end();
  const done = new Promise((resolve) => child.on("close", (code) => resolve(code)));
  return { child, done, output: () => output };
}

test("waiting on a terminal: one status line, redrawn in place, naming the holder, cleared before COMMAND runs", async () => {
  const dir = tempDir();
  const holder = keel(["run", "--metadata", "job one", "k-tty", "--", "sh", "-c", `touch ${dir}/ready; sleep 30`], { env });
  await until("the holder's COMMAND", () => existsSync(join(dir, "ready")));
  const waiter = onTerminal(["run", "--timeout", "60s", "k-tty", "--", "echo", "ran"]);
  await until("a status line naming the holder", () => /\r\x1b\[Kkeel-lock: waiting [\d.]+s for k-tty: held by job one \(fence \d+, [\d.]+s left\)/.test(waiter.output()));
  holder.child.kill("SIGTERM");
  await holder.done;
  assert.equal(await waiter.done, 0);
  // The line is cleared before COMMAND prints.
  assert.match(waiter.output(), /\r\x1b\[Kran\r\n$/);
});

test("release --force on a terminal asks first, showing the holder", async () => {
  const dir = tempDir();
  const holder = keel(["run", "--ttl", "6s", "--metadata", "job two", "k-ask", "--", "sh", "-c", `touch ${dir}/ready; sleep 30`], { env });
  await until("the holder's COMMAND", () => existsSync(join(dir, "ready")));
  const no = onTerminal(["release", "--force", "k-ask"], { input: true });
  await until("the question", () => /free k-ask, held by job two \(fence \d+, [\d.]+s left\)\? \[y\/N\]/.test(no.output()));
  no.child.stdin.end("n\n");
  assert.equal(await no.done, 1);
  assert.equal(JSON.parse((await keelDone(["inspect", "--json", "k-ask"], { env })).stdout).held, true, "declined: still held");
  const yes = onTerminal(["release", "--force", "k-ask"], { input: true });
  await until("the question", () => /\[y\/N\]/.test(yes.output()));
  yes.child.stdin.end("y\n");
  assert.equal(await yes.done, 0);
  assert.match(yes.output(), /keel-lock: freed k-ask/);
  const out = await holder.done;
  assert.equal(out.code, 76, "the holder learns at its next renewal and stops COMMAND");
});
