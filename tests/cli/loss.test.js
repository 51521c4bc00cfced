// A lost lock, against a real redis-server: COMMAND's whole process group is stopped, the
// grandchildren of `sh -c` included, with exit 76 and a message — whether the key was freed from
// elsewhere or the store stopped answering (then before anyone else can be granted the key). And
// keel-lock itself SIGKILLed: the key frees at its TTL, and the next holder's fence is higher.
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import net from "node:net";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { startRedis } from "../stores/lib/servers.js";
import { ALIVE, events, keel, keelDone, running, tempDir, until } from "./lib/cli.js";

let redis;
before(async () => {
  redis = await startRedis();
});
after(async () => {
  await redis?.stop();
});

const env = () => ({ KEEL_LOCK_STORE: redis.url });
const pidIn = (path) => Number(readFileSync(path, "utf8").trim());
const inspect = async (key, store = redis.url) => JSON.parse((await keelDone(["inspect", "--json", "--store", store, key])).stdout);

/** COMMAND: records its shell's pid and its background grandchild's, then waits for it. */
const family = (dir) => ["sh", "-c", `echo $$ > ${dir}/sh; sleep 100 & echo $! > ${dir}/grandchild; wait`];

test("release --force from another process: COMMAND and its grandchild are stopped, exit 76, a message", async () => {
  const dir = tempDir();
  const holder = keel(["run", "--ttl", "6s", "--json", "k-force", "--", ...family(dir)], { env: env() });
  await until("COMMAND's grandchild to start", () => existsSync(join(dir, "grandchild")) && readFileSync(join(dir, "grandchild"), "utf8").trim());
  const [sh, grandchild] = [pidIn(join(dir, "sh")), pidIn(join(dir, "grandchild"))];
  assert.ok(running(sh) && running(grandchild));
  const freed = await keelDone(["release", "--force", "--yes", "k-force"], { env: env() });
  assert.equal(freed.code, 0, freed.stderr);
  assert.match(freed.stderr, /freed k-force/);
  const out = await holder.done;
  assert.equal(out.code, 76, out.stderr);
  assert.match(out.stderr, /keel-lock: lost the lock on k-force .*stopping COMMAND/);
  assert.ok(!running(sh), "COMMAND is gone");
  assert.ok(!running(grandchild), "its grandchild is gone");
  const exited = events(out.stderr).find((e) => e.event === "exited");
  assert.equal(exited.lost, true);
});

test("a COMMAND that ignores SIGTERM is SIGKILLed after --grace, grandchild and all", async () => {
  const dir = tempDir();
  const script = `trap '' TERM; echo $$ > ${dir}/sh; sleep 100 & echo $! > ${dir}/grandchild; wait`;
  const holder = keel(["run", "--ttl", "6s", "--grace", "1s", "k-stubborn", "--", "sh", "-c", script], { env: env() });
  await until("COMMAND's grandchild to start", () => existsSync(join(dir, "grandchild")) && readFileSync(join(dir, "grandchild"), "utf8").trim());
  const grandchild = pidIn(join(dir, "grandchild"));
  await keelDone(["release", "--force", "--yes", "k-stubborn"], { env: env() });
  const out = await holder.done;
  assert.equal(out.code, 76, out.stderr);
  assert.ok(!running(pidIn(join(dir, "sh"))));
  assert.ok(!running(grandchild));
});

/** A TCP proxy in front of redis that can stop passing bytes while keeping every connection open. */
async function freezableProxy(port) {
  const pairs = [];
  let frozen = false;
  const server = net.createServer((client) => {
    if (frozen) return; // accepted, never answered
    const upstream = net.connect(port, "127.0.0.1");
    client.pipe(upstream);
    upstream.pipe(client);
    const drop = () => (client.destroy(), upstream.destroy());
    client.on("error", drop);
    upstream.on("error", drop);
    pairs.push([client, upstream]);
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `redis://127.0.0.1:${server.address().port}`,
    freeze() {
      frozen = true;
      for (const [client, upstream] of pairs) {
        client.unpipe(upstream);
        upstream.unpipe(client);
        client.pause();
        upstream.pause();
      }
    },
    close() {
      for (const [client, upstream] of pairs) client.destroy(), upstream.destroy();
      server.close();
    },
  };
}

test("the store stops answering: COMMAND's group is gone before another holder is granted the key", async () => {
  const dir = tempDir();
  const proxy = await freezableProxy(redis.port);
  try {
    const script = `trap '' TERM; sleep 100 & echo $! > ${dir}/grandchild; wait`;
    const holder = keel(["run", "--ttl", "4s", "--grace", "1s", "--json", "k-frozen", "--", "sh", "-c", script], {
      env: { KEEL_LOCK_STORE: proxy.url },
    });
    await until("COMMAND's grandchild to start", () => existsSync(join(dir, "grandchild")) && readFileSync(join(dir, "grandchild"), "utf8").trim());
    const grandchild = pidIn(join(dir, "grandchild"));
    proxy.freeze();
    // The next holder talks to redis itself, waits for the key, and looks at the first one's
    // grandchild the moment its own COMMAND starts.
    const next = await keelDone(["run", "--timeout", "30s", "k-frozen", "--", ALIVE, String(grandchild), join(dir, "seen")], { env: env() });
    assert.equal(next.code, 0, next.stderr);
    assert.equal(readFileSync(join(dir, "seen"), "utf8").trim(), "gone", "the old holder's COMMAND outlived its hold");
    const out = await holder.done;
    assert.equal(out.code, 76, out.stderr);
    assert.match(out.stderr, /lost the lock on k-frozen \(no renewal of the hold was confirmed in time\)/);
  } finally {
    proxy.close();
  }
});

test("keel-lock SIGKILLed mid-run: COMMAND's group is stopped, the key frees at its TTL, the next fence is higher", async () => {
  const dir = tempDir();
  const holder = keel(["run", "--ttl", "8s", "--json", "k-killed", "--", ...family(dir)], { env: env() });
  await until("COMMAND to start", () => existsSync(join(dir, "grandchild")) && readFileSync(join(dir, "grandchild"), "utf8").trim());
  const killedAt = Date.now();
  holder.child.kill("SIGKILL");
  await holder.exited;
  const fence = events(holder.output().stderr).find((e) => e.event === "acquired").fence;
  // keel-lock's reaper, beside COMMAND, sees it die and stops COMMAND's group.
  const [sh, grandchild] = [pidIn(join(dir, "sh")), pidIn(join(dir, "grandchild"))];
  await until("COMMAND and its grandchild to be stopped", () => !running(sh) && !running(grandchild));
  const early = await keelDone(["run", "k-killed", "--", "true"], { env: env() });
  // Held until its TTL — unless this machine stalled longer than that since the kill.
  if (early.code !== 75) assert.ok(Date.now() - killedAt >= 8_000, `free ${Date.now() - killedAt} ms after the kill: ${early.stderr}`);
  await until("the key to free at its TTL", async () => !(await inspect("k-killed")).held, { timeoutMs: 30_000, everyMs: 200 });
  const next = await keelDone(["run", "k-killed", "--", "sh", "-c", 'echo "$KEEL_LOCK_FENCE"'], { env: env() });
  assert.equal(next.code, 0, next.stderr);
  assert.ok(Number(next.stdout.trim()) > fence, `fence ${next.stdout.trim()} after ${fence}`);
});
