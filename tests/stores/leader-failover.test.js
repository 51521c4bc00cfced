// Leader election on Redis across three OS processes (lib/leader.js), with keel-lock installed from
// the packed tarball and its Redis store (keel-lock/redis) on a redis-server started here:
//   A campaigns for a key with metadata "A" and a short TTL and stays inside fn: only keep-alive
//     keeps it leader;
//   B campaigns for the same key with metadata "B" once A leads, and waits in the store's queue;
//   C observes the key (a look every 10 ms) and reports every change it sees.
// The parent SIGKILLs A right after one of A's keep-alives was answered. What must hold:
//   - B leads only after A was killed, and not before A's hold expired: the hold lasts at least
//     the TTL from the sending of the last request of A's that Redis answered (A reports each
//     request before it sends it), so B's start is at least that time plus the TTL (less a small clock
//     tolerance: the processes and Redis read the same machine clock), and within the TTL plus a
//     generous slack of the kill;
//   - A lost nothing while it was alive; B's fence is above A's;
//   - C saw A (its metadata and fence), perhaps nobody, then B, and nothing else; and saw A go no
//     earlier than A's hold expired;
//   - inspect from the parent shows B alone with metadata "B" and B's fence, and neither A's nor
//     B's owner token is in it or in anything C saw (while Redis does keep B's token).
// Times are Date.now() in every process: the wall clock Redis's expiry reads too, read afresh each
// time (performance.now() counts from an origin each process fixes on its own at start).
// The processes meet at barriers (their reports, and inspect's count of queued waiters), so nothing
// waits a fixed time. The checks are one function, also run against deliberate flaws in B (see
// lib/leader.js) that each must fail the checks it breaks: a B that takes the key from a live
// leader, and a B that takes it as soon as A is killed instead of at A's expiry.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { before, describe, test } from "node:test";
import { inspect, setLockStore } from "keel-lock";
import { redisLockStore } from "keel-lock/redis";
import { sleep } from "./lib/servers.js";
import { useRedis } from "./lib/redis-fixture.js";
import { STORES_DIR, installedKeelLock } from "./lib/installed.js";

const LEADER = join(STORES_DIR, "lib", "leader.js");
// ms: the leaders' TTL; keep-alive extends every third of it, so a live leader keeps its hold
// through a stall of more than 2.5 s on a loaded machine
const TTL = 4_000;
const WAIT = 60_000; // ms: the longest a barrier waits before calling it a hang
const CLOCK_TOLERANCE = 25; // ms: Date.now() in four processes (and Redis's clock) are whole ms of one clock
const SLACK = 15_000; // ms: how late after A's expiry B may lead on a loaded machine

const children = new Set();

function killAll() {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
}
process.on("exit", killAll);

before(() => {
  assert.ok(installedKeelLock().isCopy, "keel-lock must be installed from the tarball");
});

const server = useRedis({ admin: true });
server.closers.push(killAll);

/**
 * Starts lib/leader.js with `config`. Its reports (and, last, { ev: "exit", code, signal }) are
 * collected in `events`; `until(what, match, { from })` resolves with the first report from index
 * `from` on that `match` accepts, and rejects if the process ends first or WAIT passes.
 */
function start(config) {
  const proc = spawn(process.execPath, [LEADER, String(server.redis.port), JSON.stringify(config)], {
    cwd: STORES_DIR,
    stdio: ["pipe", "pipe", "pipe"],
  });
  children.add(proc);
  proc.stdin.on("error", () => {});
  const events = [];
  const listeners = new Set();
  let stderr = "";
  let pending = "";
  const push = (event) => {
    events.push(event);
    for (const listener of [...listeners]) listener();
  };
  proc.stdout.setEncoding("utf8");
  proc.stdout.on("data", (chunk) => {
    pending += chunk;
    for (let end; (end = pending.indexOf("\n")) >= 0; pending = pending.slice(end + 1)) {
      const line = pending.slice(0, end);
      try {
        push(JSON.parse(line));
      } catch {
        push({ ev: "garbled", line });
      }
    }
  });
  proc.stderr.on("data", (d) => (stderr += d));
  proc.once("close", (code, signal) => {
    children.delete(proc);
    push({ ev: "exit", code, signal, t: Date.now() });
  });

  function until(what, match, { from = 0, timeoutMs = WAIT } = {}) {
    return new Promise((resolve, reject) => {
      const finish = (settle) => {
        clearTimeout(timer);
        listeners.delete(look);
        settle();
      };
      const look = () => {
        for (let i = from; i < events.length; i++) {
          if (match(events[i])) return finish(() => resolve(events[i]));
          if (events[i].ev === "exit") {
            const { code, signal } = events[i];
            return finish(() => reject(new Error(`${config.id} ended (${code ?? signal}) before ${what}:\n${stderr}`)));
          }
        }
      };
      const timer = setTimeout(
        () => finish(() => reject(new Error(`no ${what} within ${timeoutMs} ms; ${config.id} reported ${JSON.stringify(events)}\n${stderr}`))),
        timeoutMs,
      );
      listeners.add(look);
      look();
    });
  }

  async function stop() {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGKILL");
    await until("its exit", (e) => e.ev === "exit");
  }

  return { proc, events, until, stop, stderr: () => stderr };
}

/** `key`'s live waiters, as inspect counts them, have reached one, or `b` already leads. */
async function queuedOrLeading(key, b) {
  const deadline = Date.now() + WAIT;
  for (;;) {
    if (b.events.some((e) => e.ev === "leading")) return;
    if ((await inspect(key)).waiting >= 1) return;
    const ended = b.events.find((e) => e.ev === "exit");
    assert.ok(!ended, `B ended (${ended?.code ?? ended?.signal}) before it queued:\n${b.stderr()}`);
    assert.ok(Date.now() < deadline, `B neither queued nor led within ${WAIT} ms: ${JSON.stringify(b.events)}`);
    await sleep(20);
  }
}

/**
 * One failover: A leads, C watches, B queues; A is SIGKILLed right after a keep-alive of its own
 * was answered; B leads; C sees B; the parent inspects. `flaw` goes to B (lib/leader.js). Answers
 * everything the checks need.
 */
async function failover(flaw) {
  const ns = `leader:${flaw ?? "sound"}:${randomBytes(4).toString("hex")}`;
  const prefix = `${ns}:`;
  const key = "leader";
  const killedList = `${ns}:killed`;
  const store = redisLockStore(server.admin, { prefix });
  setLockStore(store);

  const procs = [];
  try {
    const a = start({ role: "campaign", id: "A", key, prefix, ttlMs: TTL });
    procs.push(a);
    await a.until("A leading", (e) => e.ev === "leading");
    const c = start({ role: "observe", id: "C", key, prefix, intervalMs: 10 });
    procs.push(c);
    await c.until("C's first look", (e) => e.ev === "seen");
    const b = start({ role: "campaign", id: "B", key, prefix, ttlMs: TTL, flaw, killedList });
    procs.push(b);
    await queuedOrLeading(key, b);

    // Right after one of A's keep-alives was answered (or A learnt it lost, or ended).
    const from = a.events.length;
    await a.until("A's next keep-alive", (e) => (e.ev === "answer" && e.op === "extend") || e.ev === "lost" || e.ev === "exit", { from });
    const killedAt = Date.now();
    a.proc.kill("SIGKILL");
    await server.admin.rpush(killedList, "killed");
    await a.until("A's exit", (e) => e.ev === "exit");

    const bLeads = await b.until("B leading", (e) => e.ev === "leading", { timeoutMs: TTL + WAIT });
    await c.until("C seeing B", (e) => e.ev === "seen" && e.value?.fence === bLeads.fence);
    const answer = await inspect(key);
    const stored = await server.admin.get(store.keys(key).lock);
    return { killedAt, a: a.events, b: b.events, c: c.events, answer, stored, key };
  } finally {
    await Promise.all(procs.map((p) => p.stop()));
  }
}

/**
 * The checks of one failover `run`: the list of those it fails, each { check, detail }, empty
 * when all hold.
 */
function violations(run) {
  const found = [];
  const verify = (check, ok, detail) => {
    if (!ok) found.push({ check, detail });
  };
  const of = (events, ev) => events.filter((e) => e.ev === ev);
  const [aLeads, ...aAgain] = of(run.a, "leading");
  const [bLeads, ...bAgain] = of(run.b, "leading");
  if (!aLeads || !bLeads || aAgain.length || bAgain.length) {
    return [{ check: "A and B each led once", detail: JSON.stringify({ a: run.a, b: run.b }) }];
  }
  const aExit = of(run.a, "exit")[0];

  // The earliest A's hold can expire: the TTL after the sending of A's last answered request.
  const answered = of(run.a, "answer").filter((e) => e.ok && e.t <= run.killedAt);
  const expiresAfter = Math.max(...answered.map((e) => e.sentAt)) + TTL;

  // A keep-alive answered false, an aborted signal, a rejected campaign: A lost its hold.
  const aLosses = run.a.filter((e) => (e.ev === "answer" && e.op === "extend" && !e.ok) || e.ev === "aborted" || e.ev === "lost");
  verify(
    "A was SIGKILLed while leading, having lost nothing",
    aExit?.signal === "SIGKILL" && aLosses.length === 0,
    `A's exit ${JSON.stringify(aExit)}; A's losses ${JSON.stringify(aLosses)}`,
  );
  verify("B led only after A was killed", bLeads.t >= run.killedAt, `B led ${run.killedAt - bLeads.t} ms before the kill`);
  verify(
    "B led only once A's hold had expired",
    bLeads.t >= expiresAfter - CLOCK_TOLERANCE,
    `B led ${expiresAfter - bLeads.t} ms before A's hold could expire (TTL ${TTL} ms; A was killed ${run.killedAt - expiresAfter + TTL} ms after sending its last answered request)`,
  );
  verify(
    "B led within the TTL and slack of the kill",
    bLeads.t - run.killedAt <= TTL + SLACK,
    `B led ${bLeads.t - run.killedAt} ms after the kill`,
  );
  verify("B's fence is above A's", bLeads.fence > aLeads.fence, `A ${aLeads.fence}, B ${bLeads.fence}`);

  const seen = of(run.c, "seen");
  const isA = (v) => v !== null && v.metadata === "A" && v.fence === aLeads.fence;
  const isB = (v) => v !== null && v.metadata === "B" && v.fence === bLeads.fence;
  const values = seen.map((e) => e.value);
  const inOrder =
    values.length >= 2 &&
    isA(values[0]) &&
    isB(values.at(-1)) &&
    (values.length === 2 || (values.length === 3 && values[1] === null));
  verify("C saw A, perhaps nobody, then B, and nothing else", inOrder, JSON.stringify(values));
  const firstNotA = seen.find((e) => !isA(e.value));
  verify(
    "C saw A go only once A's hold had expired",
    firstNotA !== undefined && firstNotA.t >= expiresAfter - CLOCK_TOLERANCE,
    firstNotA ? `C saw ${JSON.stringify(firstNotA.value)} ${expiresAfter - firstNotA.t} ms before A's hold could expire` : "C never saw A go",
  );

  const { answer } = run;
  const holder = answer.holders?.[0];
  verify(
    "inspect shows B alone, with its metadata and fence",
    answer.key === run.key &&
      answer.held === true &&
      answer.waiting === 0 &&
      answer.holders.length === 1 &&
      holder.metadata === "B" &&
      holder.fence === bLeads.fence &&
      holder.remainingMs > 0 &&
      holder.remainingMs <= TTL,
    JSON.stringify(answer),
  );
  const owners = [...of(run.a, "owner"), ...of(run.b, "owner")].map((e) => e.owner);
  const shown = JSON.stringify([answer, seen]);
  verify(
    "no owner token is shown",
    owners.length >= 2 &&
      owners.every((o) => typeof o === "string" && o.length >= 16 && !shown.includes(o)) &&
      JSON.stringify(Object.keys(answer).sort()) === JSON.stringify(["held", "holders", "key", "waiting"]) &&
      answer.holders.every((h) => JSON.stringify(Object.keys(h).sort()) === JSON.stringify(["fence", "metadata", "remainingMs"])),
    `owners ${JSON.stringify(owners)} in ${shown}`,
  );
  // The search above means something only if the tokens are the store's: Redis keeps B's.
  const bOwner = of(run.b, "owner").at(-1)?.owner;
  verify("Redis keeps B's owner token", bOwner !== undefined && run.stored?.includes(bOwner), `${JSON.stringify(run.stored)} vs ${bOwner}`);
  return found;
}

/** The run's reports merged in time order, ms from A's lead, for a failure's message. */
function timeline(run) {
  const t0 = run.a.find((e) => e.ev === "leading")?.t ?? run.killedAt;
  const rows = [{ who: "parent", t: run.killedAt, ev: "SIGKILL A" }];
  for (const who of ["a", "b", "c"]) for (const e of run[who]) rows.push({ who: who.toUpperCase(), ...e });
  rows.sort((x, y) => x.t - y.t);
  return rows.map(({ who, t, ev, ...rest }) => `${String(t - t0).padStart(6)} ${who} ${ev} ${JSON.stringify(rest)}`).join("\n");
}

describe("leader failover on Redis: three OS processes", { timeout: 5 * 60_000 }, () => {
  test("a SIGKILLed leader is replaced by the queued campaigner at its TTL, as a third process observes", async () => {
    const run = await failover();
    const pids = ["a", "b", "c"].map((who) => run[who].find((e) => e.ev === "ready")?.pid);
    assert.equal(new Set([...pids, process.pid]).size, 4, `not three processes of their own: ${pids}`);
    const found = violations(run);
    assert.deepEqual(found, [], `${JSON.stringify(found, null, 2)}\n${timeline(run)}`);
  });

  // The checks can fail. [checks that must fail, checks that may also fail] for each flaw of B.
  const FLAWS = {
    // takes the key from the live leader: A loses it while alive, B leads before the kill
    steal: [
      ["A was SIGKILLed while leading, having lost nothing", "B led only after A was killed", "B led only once A's hold had expired"],
      ["C saw A go only once A's hold had expired", "C saw A, perhaps nobody, then B, and nothing else"],
    ],
    // takes the key as soon as A is killed: B leads before A's hold could have expired
    eager: [["B led only once A's hold had expired"], ["C saw A go only once A's hold had expired", "C saw A, perhaps nobody, then B, and nothing else"]],
  };
  for (const [flaw, [must, may]] of Object.entries(FLAWS)) {
    test(`the checks catch a B that ${flaw === "steal" ? "takes the key from a live leader" : "does not wait for the leader's TTL"} (flaw "${flaw}")`, async () => {
      const run = await failover(flaw);
      const failed = violations(run).map((v) => v.check);
      const message = `failed: ${JSON.stringify(failed)}\n${timeline(run)}`;
      for (const check of must) assert.ok(failed.includes(check), `not caught: ${check}\n${message}`);
      for (const check of failed) assert.ok(must.includes(check) || may.includes(check), `failed as it should not: ${check}\n${message}`);
    });
  }
});
