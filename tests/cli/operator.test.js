// The operator's view against live holders on a real redis-server: inspect (text and --json),
// watch (observe, pushed by Redis), elect (campaign) with a second candidate waiting its turn,
// and lost leadership stopping COMMAND as a lost lock does.
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { startRedis } from "../stores/lib/servers.js";
import { events, keel, keelDone, running, tempDir, until } from "./lib/cli.js";

let redis;
before(async () => {
  redis = await startRedis();
});
after(async () => {
  await redis?.stop();
});
const env = () => ({ KEEL_LOCK_STORE: redis.url });
const info = async (key) => JSON.parse((await keelDone(["inspect", "--json", key], { env: env() })).stdout);

test("inspect: the holder's metadata, fence and time left, and who waits", async () => {
  const dir = tempDir();
  const holder = keel(["run", "--metadata", "nightly backup", "--json", "k-in", "--", "sh", "-c", `touch ${dir}/ready; sleep 30`], { env: env() });
  await until("COMMAND to start", () => existsSync(join(dir, "ready")));
  const waiter = keel(["run", "--timeout", "60s", "--json", "k-in", "--", "true"], { env: env() });
  await until("one waiter", async () => (await info("k-in")).waiting === 1);
  const text = await keelDone(["inspect", "k-in"], { env: env() });
  assert.equal(text.code, 0);
  const fence = events(holder.output().stderr).find((e) => e.event === "acquired").fence;
  assert.match(text.stdout, new RegExp(`^k-in: held\\n  nightly backup \\(fence ${fence}, \\d+(\\.\\d)?s left\\)\\n  waiting: 1\\n$`));
  assert.equal(text.stderr, "");
  holder.child.kill("SIGTERM");
  await holder.done;
  assert.equal((await waiter.done).code, 0);
  const free = await keelDone(["inspect", "k-in"], { env: env() });
  assert.equal(free.stdout, "k-in: free\n  waiting: 0\n");
});

test("watch: each leader as it comes and goes, until interrupted (exit 0)", async () => {
  const watcher = keel(["watch", "--json", "k-watch"], { env: env() });
  const lines = () => watcher.output().stdout.split("\n").filter(Boolean).map((line) => JSON.parse(line));
  await until("watch's first answer", () => lines().length >= 1);
  assert.equal(lines()[0].leader, null);
  const dir = tempDir();
  const holder = keel(["run", "--metadata", "deploy v2", "k-watch", "--", "sh", "-c", `touch ${dir}/ready; sleep 30`], { env: env() });
  await until("the holder seen", () => lines().some((line) => line.leader?.metadata === "deploy v2"));
  holder.child.kill("SIGTERM");
  await holder.done;
  await until("the holder's end seen", () => lines().at(-1).leader === null);
  watcher.child.kill("SIGINT");
  const out = await watcher.done;
  assert.equal(out.code, 0, out.stderr);
  assert.equal(out.stderr, "");
});

test("elect: one leader runs COMMAND, the next leads when it ends, with a higher fence", async () => {
  const dir = tempDir();
  const first = keel(["elect", "--json", "--metadata", "node a", "k-elect", "--", "sh", "-c", `echo $KEEL_LOCK_FENCE > ${dir}/a; sleep 30`], { env: env() });
  await until("the first leader's COMMAND", () => existsSync(join(dir, "a")));
  const second = keel(["elect", "--json", "--metadata", "node b", "k-elect", "--", "sh", "-c", `echo $KEEL_LOCK_FENCE > ${dir}/b`], { env: env() });
  await until("the second to queue", async () => (await info("k-elect")).waiting === 1);
  assert.ok(!existsSync(join(dir, "b")), "one leader at a time");
  assert.equal((await info("k-elect")).holders[0].metadata, "node a");
  first.child.kill("SIGTERM");
  assert.equal((await first.done).code, 128 + 15);
  const out = await second.done;
  assert.equal(out.code, 0, out.stderr);
  assert.ok(Number(readFileSync(join(dir, "b"), "utf8")) > Number(readFileSync(join(dir, "a"), "utf8")));
});

test("elect: lost leadership stops COMMAND and its grandchild, exit 76", async () => {
  const dir = tempDir();
  const script = `echo $$ > ${dir}/sh; sleep 100 & echo $! > ${dir}/grandchild; wait`;
  const leader = keel(["elect", "--ttl", "6s", "k-lead", "--", "sh", "-c", script], { env: env() });
  await until("the leader's grandchild", () => existsSync(join(dir, "grandchild")) && readFileSync(join(dir, "grandchild"), "utf8").trim());
  const grandchild = Number(readFileSync(join(dir, "grandchild"), "utf8"));
  assert.equal((await keelDone(["release", "--force", "--yes", "--json", "k-lead"], { env: env() })).stdout, '{"key":"k-lead","released":true}\n');
  const out = await leader.done;
  assert.equal(out.code, 76, out.stderr);
  assert.match(out.stderr, /lost the lock on k-lead/);
  assert.ok(!running(grandchild));
});
