// One OS process of leader-failover.test.js, on keel-lock as installed from the packed tarball and
// its Redis store (keel-lock/redis over ioredis) on the test's redis-server:
//   node leader.js <redis port> '<json config>'
//   config: { role: "campaign" | "observe", id, key, prefix, ttlMs?, intervalMs?, flaw?, killedList? }
//
// role "campaign": campaign(key, fn, { ttlMs, metadata: id }); fn reports that it leads, with its
//   fence, and stays inside until leadership is lost (its signal aborts), so only keep-alive keeps
//   it leader. The store's acquire, acquireOrWait and extend are wrapped to report each request
//   just before it is sent, and its answer, with the time it was sent: a hold set by a request
//   lasts at least the TTL from that time, whatever happens to this process afterwards.
//   Deliberate flaws, only so that the test can show its checks catch them:
//     flaw "steal"  force-release the key before campaigning: take it from a live leader
//     flaw "eager"  force-release the key as soon as the parent pushes to killedList (it does
//                   right after killing the leader): take over without waiting for the TTL
// role "observe": for await (… of observe(key, { intervalMs })), each value reported.
//
// Reports are JSON lines on stdout, { ev, t: Date.now(), … }; a write to a pipe is synchronous on
// Linux, so a line is in the pipe before the request it announces is sent, even if this process is
// SIGKILLed next. The process ends when its stdin closes (the parent is gone).
import IORedis from "ioredis";
import { campaign, observe, setLockStore } from "keel-lock";
import { redisLockStore } from "keel-lock/redis";

const [port, raw] = process.argv.slice(2);
const config = JSON.parse(raw);
const { role, id, key, prefix } = config;

const report = (ev, fields = {}) => process.stdout.write(`${JSON.stringify({ ev, t: Date.now(), ...fields })}\n`);
const connect = () => new IORedis({ host: "127.0.0.1", port: Number(port), maxRetriesPerRequest: 0 });

process.stdin.on("end", () => process.exit(0));
process.stdin.on("error", () => process.exit(0));
process.stdin.resume();

const client = connect();
const store = redisLockStore(client, { prefix });

if (role === "campaign") {
  // The requests that set this process's hold: each announced before it is sent, then answered;
  // every owner token they carry is reported once (so the parent can look for it where none may be).
  const owners = new Set();
  for (const op of ["acquire", "acquireOrWait", "extend"]) {
    const call = store[op];
    store[op] = async (...args) => {
      if (!owners.has(args[1])) {
        owners.add(args[1]);
        report("owner", { owner: args[1] });
      }
      const sentAt = Date.now();
      report("request", { op, sentAt });
      try {
        const answer = await call.apply(store, args);
        report("answer", { op, sentAt, ok: Boolean(answer) });
        return answer;
      } catch (error) {
        report("answer", { op, sentAt, ok: false, error: String(error) });
        throw error;
      }
    };
  }
  setLockStore(store);

  if (config.flaw === "steal") await store.forceRelease(key);
  if (config.flaw === "eager") {
    const waiter = connect();
    waiter.blpop(config.killedList, 0).then(async () => {
      report("forced", { freed: await store.forceRelease(key) });
      waiter.disconnect();
    });
  }

  report("ready", { pid: process.pid });
  try {
    await campaign(
      key,
      async ({ fence, signal }) => {
        report("leading", { fence });
        await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
        report("aborted", { reason: String(signal.reason) });
      },
      { ttlMs: config.ttlMs, metadata: id },
    );
    report("returned");
  } catch (error) {
    report("lost", { error: String(error) });
  }
  // A leader that lost stays alive (and connected) until the parent ends it.
} else if (role === "observe") {
  setLockStore(store);
  report("ready", { pid: process.pid });
  try {
    for await (const value of observe(key, { intervalMs: config.intervalMs })) report("seen", { value });
    report("ended");
  } catch (error) {
    report("failed", { error: String(error) });
    process.exit(1);
  }
} else {
  throw new Error(`unknown role ${role}`);
}
