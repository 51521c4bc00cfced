// The documentation's bring-your-own Redis store pattern, written by a user (lib/user-redis-store.js:
// ioredis, SET … PX … NX, Lua compare-and-delete / compare-and-extend), passed to setLockStore in
// TWO separate OS processes (lib/racer.js) that race on one key of a real redis-server, with
// keel-lock installed from the packed tarball. The processes meet at barriers made of Redis lists,
// so nothing here depends on timing:
//   - with timeout 0, in every round exactly one process wins and the other is refused while
//     the winner still holds the lock;
//   - with timeouts, every section runs, and never two at once (an INCR/DECR counter of holders
//     inside, and a log of enter/exit events that must pair up without interleaving).
// Both checks fail when racer.js is given { store: "racy" } (GET then SET, bare DEL) — checked by
// hand; not a test here, since how often that store loses the race is up to the scheduler.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { before, test } from "node:test";
import { useRedis } from "./lib/redis-fixture.js";
import { STORES_DIR, installedKeelLock } from "./lib/installed.js";

const RACER = join(STORES_DIR, "lib", "racer.js");
const WAIT = 120; // s: the longest the parent waits on a barrier before calling it a hang

const children = new Set();

process.on("exit", () => {
  for (const child of children) if (child.exitCode === null) child.kill("SIGKILL");
});

before(() => {
  assert.ok(installedKeelLock().isCopy, "keel-lock must be installed from the tarball");
});

const server = useRedis({ admin: true });
server.closers.push(() => {
  for (const child of children) if (child.exitCode === null) child.kill("SIGKILL");
});

function racer(config) {
  const child = spawn(process.execPath, [RACER, String(server.redis.port), JSON.stringify(config)], {
    cwd: STORES_DIR,
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.add(child);
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d) => (stdout += d));
  child.stderr.on("data", (d) => (stderr += d));
  const done = new Promise((resolve) => {
    child.once("exit", (code, signal) => {
      children.delete(child);
      resolve({ code, signal, stdout, stderr });
    });
  });
  return { child, done };
}

// Waits for one element of `list` (BLPOP on its own connection), or fails after WAIT seconds.
async function pop(list) {
  const conn = server.admin.duplicate();
  try {
    const got = await conn.blpop(list, WAIT);
    assert.ok(got, `nothing arrived on ${list} within ${WAIT} s`);
    return got[1];
  } finally {
    conn.disconnect();
  }
}

async function finished(proc) {
  const { code, signal, stdout, stderr } = await proc.done;
  assert.equal(code, 0, `racer exited ${code ?? signal}:\n${stderr}`);
  return JSON.parse(stdout.trim().split("\n").at(-1));
}

test("two processes with timeout 0: in every round exactly one wins, the other is refused", async () => {
  const ns = `two-proc:once:${randomBytes(4).toString("hex")}`;
  const ROUNDS = 10;
  const ids = ["A", "B"];
  const procs = ids.map((id) => racer({ id, ns, mode: "once", rounds: ROUNDS }));
  for (let i = 0; i < ids.length; i++) await pop(`${ns}:ready`);
  const pids = new Set(procs.map((p) => p.child.pid));
  assert.equal(pids.size, 2, "not two OS processes");
  for (let r = 0; r < ROUNDS; r++) {
    // Both go at once; each answers "won" (while holding) or "lost".
    await server.admin.rpush(`${ns}:go:${r}:A`, "go");
    await server.admin.rpush(`${ns}:go:${r}:B`, "go");
    const outcomes = [await pop(`${ns}:result:${r}`), await pop(`${ns}:result:${r}`)];
    const winners = outcomes.filter((o) => o.startsWith("won:"));
    assert.equal(winners.length, 1, `round ${r}: ${outcomes.join(", ")}`);
    // The winner answered before letting go, so the loser was refused while the lock was held.
    assert.equal(await server.admin.exists(`${ns}:key:${r}`), 1, `round ${r}: the lock is not in Redis`);
    await server.admin.rpush(`${ns}:release:${r}:${winners[0].slice(4)}`, "go");
  }
  const reports = await Promise.all(procs.map(finished));
  assert.equal(reports.reduce((n, r) => n + r.won, 0), ROUNDS);
  assert.equal(reports.reduce((n, r) => n + r.lost, 0), ROUNDS);
  for (let r = 0; r < ROUNDS; r++) assert.equal(await server.admin.exists(`${ns}:key:${r}`), 0, "a lock was left behind");
});

test("two processes with timeouts: every section runs, never two inside at once", async () => {
  const ns = `two-proc:timeouts:${randomBytes(4).toString("hex")}`;
  const ITERATIONS = 25;
  const ids = ["A", "B"];
  const procs = ids.map((id) => racer({ id, ns, mode: "timeouts", iterations: ITERATIONS }));
  for (let i = 0; i < ids.length; i++) await pop(`${ns}:ready`);
  for (const id of ids) await server.admin.rpush(`${ns}:go:${id}`, "go");
  const reports = await Promise.all(procs.map(finished));

  for (const report of reports) {
    assert.equal(report.ran, ITERATIONS, `${report.id}: ${report.notRan} sections did not run`);
    assert.equal(report.notRan, 0);
  }
  assert.equal(Number((await server.admin.get(`${ns}:overlaps`)) ?? 0), 0, "two processes were inside at once");
  assert.equal(Number(await server.admin.get(`${ns}:inside`)), 0);
  // The log pairs up: every enter is followed directly by the same section's exit.
  const log = await server.admin.lrange(`${ns}:log`, 0, -1);
  assert.equal(log.length, ids.length * ITERATIONS * 2);
  for (let i = 0; i < log.length; i += 2) {
    const section = log[i].replace(/:enter$/, "");
    assert.ok(log[i].endsWith(":enter"), `log[${i}] = ${log[i]}`);
    assert.equal(log[i + 1], `${section}:exit`, `sections interleaved at ${i}: ${log.slice(i, i + 4).join(" ")}`);
  }
  // Both processes got in (in whatever order the lock let them).
  for (const id of ids) assert.ok(log.some((e) => e.startsWith(`${id}:`)), `${id} never got in`);
  assert.equal(await server.admin.exists(`${ns}:key`), 0, "the lock was left behind");
});
