// `keel-lock run` with no store given: every process on this machine shares one SQLite file (here
// under a private XDG_RUNTIME_DIR). Exclusion, waiting, semaphores and read locks are judged by
// the overlap detector the commands write (lib/worker.sh), never by timing.
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { events, keel, readLog, tempDir, until, worker } from "./lib/cli.js";

const runtime = tempDir();
const env = { XDG_RUNTIME_DIR: runtime, KEEL_LOCK_STORE: "" };
const run = (args, options = {}) => keel(["run", ...args], { env, ...options });

test("the default store lives in $XDG_RUNTIME_DIR/keel-lock/locks.db", async () => {
  const out = await run(["k-file", "--", "true"]).done;
  assert.equal(out.code, 0, out.stderr);
  assert.ok(existsSync(join(runtime, "keel-lock", "locks.db")));
});

test("two runs at once: one runs, the other exits 75 at once", async () => {
  const dir = tempDir();
  const first = run(["--json", "k-two", "--", "sh", "-c", `touch ${dir}/started; sleep 30`]);
  await until("the first COMMAND to start", () => existsSync(join(dir, "started")));
  const seen = JSON.parse((await keel(["inspect", "--json", "k-two"], { env }).done).stdout);
  assert.match(seen.holders[0].metadata, new RegExp(`^${hostname()} pid \\d+: sh -c touch ${dir}/started; sleep 30$`), "the default metadata");
  const second = await run(["k-two", "--", "sh", "-c", `touch ${dir}/second`]).done;
  assert.equal(second.code, 75, second.stderr);
  assert.match(second.stderr, /k-two is held by someone else/);
  assert.equal(second.stdout, "");
  assert.ok(!existsSync(join(dir, "second")), "the second COMMAND never ran");
  first.child.kill("SIGTERM");
  const end = await first.done;
  assert.equal(end.code, 128 + 15);
  assert.equal(events(end.stderr)[0].event, "acquired");
});

test("with --timeout, runs take turns, never overlapping, with fences that strictly increase", async () => {
  const dir = tempDir();
  const runs = Array.from({ length: 4 }, () => run(["--timeout", "60s", "k-turns", "--", ...worker(dir, 0.3)]).done);
  const outs = await Promise.all(runs);
  for (const out of outs) assert.equal(out.code, 0, out.stderr);
  const log = readLog(dir);
  assert.equal(log.length, 4);
  for (const entry of log) assert.equal(entry.concurrent, 1, `overlap: ${JSON.stringify(log)}`);
  for (let i = 1; i < log.length; i++) assert.ok(log[i].fence > log[i - 1].fence, `fences ${JSON.stringify(log)}`);
});

test("--limit 2 with five runs: never more than two COMMANDs at once", async () => {
  const dir = tempDir();
  const runs = Array.from({ length: 5 }, () => run(["--limit", "2", "--timeout", "60s", "k-sem", "--", ...worker(dir, 0.5)]).done);
  const outs = await Promise.all(runs);
  for (const out of outs) assert.equal(out.code, 0, out.stderr);
  const log = readLog(dir);
  assert.equal(log.length, 5);
  for (const entry of log) assert.ok(entry.concurrent <= 2, `more than two at once: ${JSON.stringify(log)}`);
});

test("--permits: a holder of 2 of 3 permits leaves room for 1, not for 2", async () => {
  const dir = tempDir();
  const holder = run(["--limit", "3", "--permits", "2", "k-permits", "--", "sh", "-c", `touch ${dir}/ready; sleep 30`]);
  await until("the holder to start", () => existsSync(join(dir, "ready")));
  assert.equal((await run(["--limit", "3", "--permits", "2", "k-permits", "--", "true"]).done).code, 75);
  assert.equal((await run(["--limit", "3", "k-permits", "--", "true"]).done).code, 0);
  holder.child.kill("SIGTERM");
  await holder.done;
});

test("--shared runs share the key with each other, not with a plain run", async () => {
  const dir = tempDir();
  const reader = run(["--shared", "k-rw", "--", "sh", "-c", `touch ${dir}/r1; sleep 30`]);
  await until("the first reader to start", () => existsSync(join(dir, "r1")));
  const second = await run(["--shared", "k-rw", "--", "sh", "-c", `touch ${dir}/r2`]).done;
  assert.equal(second.code, 0, second.stderr);
  assert.ok(existsSync(join(dir, "r2")));
  const writer = await run(["k-rw", "--", "true"]).done;
  assert.equal(writer.code, 75);
  reader.child.kill("SIGTERM");
  await reader.done;
});

test("COMMAND's exit code and signal death come through; stdout is COMMAND's alone", async () => {
  const code = await run(["k-exit", "--", "sh", "-c", "echo out; echo err >&2; exit 7"]).done;
  assert.equal(code.code, 7);
  assert.equal(code.stdout, "out\n");
  assert.equal(code.stderr, "err\n");
  const killed = await run(["k-exit", "--", "sh", "-c", "kill -TERM $$"]).done;
  assert.equal(killed.code, 128 + 15);
  const missing = await run(["k-exit", "--", "/nonexistent/command"]).done;
  assert.equal(missing.code, 127);
  assert.match(missing.stderr, /command not found/);
});

test("a COMMAND running for over two TTLs keeps the key: renewed, never stopped", async () => {
  const dir = tempDir();
  // --grace 0: SIGTERM would come 0.6 s before the hold's end, so a renewal (due every 2 s) may
  // stall 3.4 s before COMMAND is stopped.
  const out = await run(["--ttl", "6s", "--grace", "0", "--json", "k-long", "--", "sh", "-c", `touch ${dir}/ready; sleep 13; echo finished`]).done;
  assert.equal(out.code, 0, out.stderr);
  assert.equal(out.stdout, "finished\n");
  assert.deepEqual(events(out.stderr).map((e) => e.event), ["acquired", "exited"]);
});

test("COMMAND gets KEEL_LOCK_KEY and KEEL_LOCK_FENCE", async () => {
  const out = await run(["k-env", "--", "sh", "-c", 'echo "$KEEL_LOCK_KEY $KEEL_LOCK_FENCE"']).done;
  assert.equal(out.code, 0);
  const [key, fence] = out.stdout.trim().split(" ");
  assert.equal(key, "k-env");
  assert.ok(Number(fence) >= 1);
});

test("SIGTERM (and SIGINT, SIGHUP) to keel-lock reach COMMAND, and the key is free right after", async () => {
  for (const signal of ["SIGTERM", "SIGINT", "SIGHUP"]) {
    const dir = tempDir();
    // COMMAND reports the signal it got, then exits 3.
    const script = `trap 'echo got-${signal} > ${dir}/got; exit 3' ${signal.slice(3)}; touch ${dir}/ready; while :; do sleep 0.05; done`;
    const holder = run(["k-sig", "--", "sh", "-c", script]);
    await until("COMMAND to start", () => existsSync(join(dir, "ready")));
    holder.child.kill(signal);
    const out = await holder.done;
    assert.equal(out.code, 3, out.stderr);
    assert.equal(readFileSync(join(dir, "got"), "utf8").trim(), `got-${signal}`);
    const next = await run(["k-sig", "--", "true"]).done;
    assert.equal(next.code, 0, `the key is free after ${signal}: ${next.stderr}`);
  }
});

test("a signal while waiting stops the wait: exit 128 + signal, the key untouched", async () => {
  const dir = tempDir();
  const holder = run(["k-wait", "--", "sh", "-c", `touch ${dir}/ready; sleep 30`]);
  await until("the holder to start", () => existsSync(join(dir, "ready")));
  const waiter = run(["--json", "--timeout", "60s", "k-wait", "--", "sh", "-c", `touch ${dir}/waiter-ran`]);
  await until("the waiter to wait", () => waiter.output().stderr.includes('"event":"waiting"'));
  waiter.child.kill("SIGINT");
  const out = await waiter.done;
  assert.equal(out.code, 130, out.stderr);
  assert.ok(!existsSync(join(dir, "waiter-ran")));
  holder.child.kill("SIGTERM");
  await holder.done;
});
