// One OS process of the fault suite: `clients` concurrent lock users, keel-lock installed from
// the packed tarball, recording every call as history events (one JSON line each, written
// synchronously so a SIGKILL loses nothing already done) for the checker in keel-lock/testing.
//   node lib/client.js '<json config>'
//   config: { id, store: { kind: "memory" | "redis" | "redis-cluster" | "upstash" | "sqlite" | "pg" | "etcd",
//                           port?, nodes?, path?, url?, token?, endpoints? },
//             primitive: "lock" | "semaphore" | "rw" | "multi" | "leader",
//             variant: "correct" | "owner-blind" | "no-expiry" | "fence-reuse" | "limit-blind" | "writer-shares"
//                      | "partial-set" | "two-leaders" | "no-wait" | "no-compare",
//             keys, ttlMs, holdMs, seed, errorRate, clients, history, victim, probe }
// It runs until the runner says stop (the runner goes on until the run has shown what it must),
// or until the runner is gone.
// With primitive "semaphore" every hold is 1 or 2 permits of `semaphore(key, SEMAPHORE_LIMIT)`
// (recorded with its limit and weight); with "rw" half are `readLock(key)` (recorded as shared)
// and half `writeLock(key)`. Only exclusive holds write to the fenced resource: permits and
// readers overlap by design, so a lower fence after a higher one is no stale write there.
// With "multi" every hold is `lock([key 0, key 1])`: each key's acquire, extend and release is
// recorded on that key under the set's one owner label, tied by a `set` event. With "leader"
// users campaign for key 0 — a waiting acquire recorded as op "campaign", kept alive by
// recorded extends every TTL/3, resigned by a release: what `campaign()` does, made by hand
// because its keep-alive extends are not told to `onLockEvent` and the checker must see them —
// and the probing process also records every leader `observe(key 0)` tells it.
// A victim ("kill" | "stop") tells the parent over IPC when it is inside its critical section
// (the key, and its fence there) and waits for "go" before its fenced write: the parent kills it
// there, or stops it until its lease is gone and another holder has written a higher fence, and
// continues it, and then the write must be refused.
import { openSync, writeSync, closeSync } from "node:fs";
import { lock, semaphore, readLock, writeLock, observe, setLockStore, MemoryLockStore, LockNotHeldError } from "keel-lock";
import { redisLockStore, redisLockKeys } from "keel-lock/redis";
import { databaseLockStore, schema } from "keel-lock/sql";
import { etcdLockStore, etcdLockKeys } from "keel-lock/etcd";
import { makeStoreFor } from "./stores.js";
import { generator } from "../workers/random.js";

const config = JSON.parse(process.argv[2]);
const { id, variant, keys: keyCount, ttlMs, holdMs, seed, errorRate = 0, clients = 1, victim = null } = config;
const primitive = config.primitive ?? "lock";
const SEMAPHORE_LIMIT = 3;
// Stamps: the machine's monotonic clock (process.hrtime, one clock for every process) from the
// runner's anchor, so every process's stamps are on the runner's timeline. Each process's own
// performance.timeOrigin is not: Node reads it from two clocks at start, and a process preempted
// between the reads is off by as long (milliseconds on a loaded machine: enough for false
// overlaps). The margin covers the store's clock reading the same machine's time.
const CLOCK_ERROR_MS = 1;

const fd = openSync(config.history, "a");
const now = () => config.clockAnchor + Number(process.hrtime.bigint()) / 1e6;
const record = (event) => {
  const t = event.t0 ?? now();
  const line = { client: id, ...event, t0: t - CLOCK_ERROR_MS, t1: (event.t1 ?? t) + CLOCK_ERROR_MS };
  writeSync(fd, JSON.stringify(line) + "\n");
};
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// A call that never returns is a liveness bug: once told to stop, every user ends its round
// within seconds; one still in a call 20 s later is reported, and the process exits non-zero.
const inFlight = new Map();
let over = false;
const ended = new AbortController(); // aborted when the run is over: ends the observer
const stop = () => {
  if (over) return;
  over = true;
  ended.abort();
  setTimeout(() => {
    process.stderr.write(`hung: ${JSON.stringify([...inFlight.values()])}\n`);
    process.exit(3);
  }, 20_000).unref();
};
const running = () => !over;

let goResolve = null;
// Listening from the start, so that the runner's messages are answered while the store connects.
process.on("message", (m) => {
  if (m?.go && goResolve) goResolve(m.stopped === true);
  if (m?.stop) stop();
  // A cut of the history: every event stamped before this answer is written (each is stamped
  // and written in one synchronous step).
  if (m?.cut !== undefined) process.send({ cut: m.cut, at: now() });
});
process.on("disconnect", stop);
const waitForGo = () => new Promise((resolve) => (goResolve = resolve));

const { store, resource, close } = await makeStoreFor(config.store, {
  variant,
  errorRate,
  random: generator(seed * 7919 + id),
  lib: { MemoryLockStore, redisLockStore, redisLockKeys, databaseLockStore, schema, etcdLockStore, etcdLockKeys },
});
setLockStore(store);
process.send?.({ ready: true }); // the runner starts its clock once every first process is ready

const keys = Array.from({ length: keyCount }, (_, k) => `${config.keyPrefix ?? "fault:"}${k}`);
const stats = { id, grants: 0, refused: 0, errors: 0, staleRefused: 0, ops: 0, refusedEarly: 0 };
let labels = 0;
let offers = 0;
const token = () => Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, "0")).join("");

async function recorded(op, key, label, ttl, immediate, run, holding = {}) {
  stats.ops++;
  const call = Symbol(label);
  inFlight.set(call, { op, key, label, since: Date.now() });
  record({ key, owner: label, type: "invoke", op, ttlMs: ttl, immediate, ...holding });
  try {
    const answer = await run();
    record({ key, owner: label, type: answer.ok ? "ok" : "fail", op, fence: answer.fence ?? null });
    return answer.ok;
  } catch (error) {
    if (error instanceof LockNotHeldError) {
      record({ key, owner: label, type: "fail", op });
      return false;
    }
    stats.errors++;
    record({ key, owner: label, type: "info", op, error: String(error?.message ?? error).slice(0, 200) });
    return null;
  } finally {
    inFlight.delete(call);
  }
}

/** The handle a user takes `key` with, the permits it asks for, and how its hold is recorded. */
function handleFor(key, random) {
  if (primitive === "semaphore") {
    const permits = random() < 0.5 ? 2 : 1;
    return { l: semaphore(key, SEMAPHORE_LIMIT, ttlMs), permits, holding: { limit: SEMAPHORE_LIMIT, weight: permits } };
  }
  if (primitive === "rw") {
    if (random() < 0.5) return { l: readLock(key, ttlMs), permits: undefined, holding: { shared: true } };
    return { l: writeLock(key, ttlMs), permits: undefined, holding: {} };
  }
  return { l: lock(key, ttlMs), permits: undefined, holding: {} };
}

/**
 * A victim inside its section tells the parent, which kills it or stops it, then says go;
 * answers whether it was stopped.
 */
async function offer(key, label, fence) {
  offers++;
  process.send({ inside: key, label, fence });
  return waitForGo();
}

/**
 * A holder's fenced write to the key's resource, recorded for the checker. After a stop past
 * its TTL the lease is gone and a later holder has written a higher fence: it must be refused.
 */
async function fencedWrite(key, label, fence, afterStop) {
  if (fence == null) return;
  const t0 = now();
  try {
    const accepted = await resource.write(key, fence);
    record({ key, owner: label, type: "write", t0, t1: now(), fence, accepted, afterStop });
    if (afterStop && !accepted) stats.staleRefused++;
  } catch {
    stats.errors++;
  }
}

// The keys sets are drawn from: any two of three, so that sets overlap on one key only and a
// set that does not hold a key it was granted meets another set on it.
const setPool = [...keys, `${config.keyPrefix ?? "fault:"}${keyCount}`];

/**
 * One set of two keys taken, held and released, each key's calls recorded under one label.
 * Answers true when a victim's turn was granted (and offered).
 */
async function setRound(random, label, victimTurn) {
  const skip = Math.floor(random() * setPool.length);
  const keys = setPool.filter((_, i) => i !== skip);
  const l = lock(keys, ttlMs);
  const each = (type, op, extra = {}) => {
    for (const key of keys) record({ key, owner: label, type, op, ...extra(key) });
  };
  const call = async (op, ttl, run) => {
    stats.ops++;
    for (const key of keys) record({ key, owner: label, type: "invoke", op, ttlMs: ttl, immediate: op === "acquire" });
    try {
      const ok = await run();
      each(ok ? "ok" : op === "release" ? "info" : "fail", op, (key) => ({ fence: ok && op === "acquire" ? (l.fences?.[key] ?? null) : null }));
      return ok;
    } catch (error) {
      if (error instanceof LockNotHeldError) {
        each("fail", op, () => ({}));
        return false;
      }
      stats.errors++;
      each("info", op, () => ({ error: String(error?.message ?? error).slice(0, 200) }));
      return null;
    }
  };
  record({ key: "", owner: label, type: "set", keys });
  const got = await call("acquire", ttlMs, () => l.acquire({ timeout: 0 }));
  if (!got) {
    if (got === false) stats.refused++;
    await sleep(random() * 10);
    return;
  }
  stats.grants++;
  each("enter", undefined, () => ({}));
  const stopped = victimTurn && (await offer(keys[0], label, l.fences?.[keys[0]] ?? null));
  for (const key of keys) await fencedWrite(key, label, l.fences?.[key], stopped);
  await sleep(random() * holdMs);
  if (random() < 0.15) await call("extend", ttlMs, async () => (await l.extend(), true));
  each("exit", undefined, () => ({}));
  // A release answering false is no refusal of every key: some may have been released.
  await call("release", 0, () => l.release());
  return victimTurn;
}

/**
 * One campaign for key 0: wait to lead, keep it with recorded extends, write, resign. Answers
 * true when a victim's turn was granted (and offered).
 */
async function campaignRound(random, label, victimTurn) {
  const key = keys[0];
  const l = lock(key, ttlMs);
  const wait = 20 * ttlMs;
  const asked = now();
  const got = await recorded("campaign", key, label, ttlMs, false, async () => {
    const ok = await l.acquire({ timeout: wait, retryDelay: 10 });
    return { ok, fence: ok ? l.fence : null };
  });
  if (!got) {
    if (got === false) stats.refused++;
    // A waiting acquire answers no only once its timeout has run out.
    if (got === false && now() - asked < wait - 50) stats.refusedEarly++;
    await sleep(random() * 3);
    return;
  }
  stats.grants++;
  record({ key, owner: label, type: "enter" });
  if (victimTurn && (await offer(key, label, l.fence))) {
    // Stopped past its TTL: no longer the leader, whatever it believes. It writes as one that
    // does, and then resigns.
    await fencedWrite(key, label, l.fence, true);
    record({ key, owner: label, type: "exit" });
    await recorded("release", key, label, 0, false, async () => ({ ok: await l.release() }));
    return true;
  }
  // Most terms are short; a fifth last one to two and a half keep-alive periods, so that leaders
  // are kept by extends and campaigners wait behind them.
  const term = random() < 0.2 ? (ttlMs / 3) * (1 + random() * 1.5) : random() * 3 * holdMs;
  const until = now() + term;
  let kept = true;
  while (kept && now() < until) {
    await sleep(Math.min(ttlMs / 3, until - now()));
    if (now() < until) kept = (await recorded("extend", key, label, ttlMs, false, async () => (await l.extend(), { ok: true }))) === true;
  }
  if (kept) await fencedWrite(key, label, l.fence, false);
  record({ key, owner: label, type: "exit" });
  await recorded("release", key, label, 0, false, async () => ({ ok: await l.release() }));
  return victimTurn;
}

/** Records every leader `observe` tells about key 0, until the run ends. */
async function observer() {
  // One observer label per observation: a failing store call ends one, and the next starts
  // afresh (its first report is the state it finds, which may repeat the last one told).
  while (running()) {
    const owner = `observer${id}:${labels++}`;
    try {
      for await (const leader of observe(keys[0], { intervalMs: 20, signal: ended.signal })) {
        record({ key: keys[0], owner, type: "leader", fence: leader === null ? null : leader.fence });
      }
    } catch {
      stats.errors++;
      await sleep(10);
    }
  }
}

async function user(cid) {
  const random = generator(seed * 104729 + id * 31 + cid);
  if (primitive === "multi" || primitive === "leader") {
    // A victim offers itself at its first grant, and again at the first grant after the round
    // that follows an offer (a victim's turn is kept until it is granted: on a polling store
    // with many campaigners a term may be hard to win).
    let rested = true;
    for (let round = 0; running() && round < 1_000_000; round++) {
      const label = `p${id}.${cid}:${labels++}`;
      const victimTurn = victim !== null && cid === 0 && rested;
      const offered = await (primitive === "multi" ? setRound(random, label, victimTurn) : campaignRound(random, label, victimTurn));
      rested = offered !== true;
    }
    return;
  }
  let victimTurn = victim !== null && cid === 0;
  for (let round = 0; running() && round < 1_000_000; round++) {
    const key = keys[Math.floor(random() * keys.length)];
    const roll = random();
    if (roll < 0.04) {
      // A stranger (a fresh owner that never acquired) tries to release or extend the key.
      const op = roll < 0.02 ? "release" : "extend";
      const owner = token();
      await recorded(op, key, `stranger:${id}:${labels++}`, ttlMs, false, async () => ({
        ok: (await (op === "release" ? store.release(key, owner) : store.extend(key, owner, ttlMs))) === true,
      }));
      continue;
    }
    // Waiting acquires only on the first key: on the others every refusal is one store call, so
    // a key left held for ever (the no-expiry store) shows up as refusals while certainly free.
    const immediate = key !== keys[0] || random() < 0.6;
    const { l, permits, holding } = handleFor(key, random);
    const label = `p${id}.${cid}:${labels++}`;
    const got = await recorded("acquire", key, label, ttlMs, immediate, async () => {
      const waiting = immediate ? { timeout: 0 } : { timeout: ttlMs, retryDelay: 10 };
      const ok = await l.acquire(permits === undefined ? waiting : { ...waiting, permits });
      return { ok, fence: ok ? l.fence : null };
    }, holding);
    if (!got) {
      if (got === false) stats.refused++;
      await sleep(random() * 3);
      continue;
    }
    stats.grants++;
    record({ key, owner: label, type: "enter" });
    // A victim's first offer (every other stop; every other killed process) is on the last key,
    // which has no waiters: a broken store that keeps it held for ever is then refused in plain
    // sight. The others may be on any key, waiters included.
    const onLastKey = victim === "kill" ? id % 2 === 0 : offers % 2 === 0;
    // A victim stopped for its fenced write offers itself only while it holds alone (a writer).
    const alone = holding.limit === undefined && !holding.shared;
    const offered = victimTurn && (!onLastKey || key === keys[keys.length - 1]) && (victim === "kill" || alone);
    let stopped = false;
    if (offered) {
      offers++;
      victimTurn = false;
      process.send({ inside: key, label, fence: l.fence });
      stopped = await waitForGo(); // a "kill" victim never gets here
    }
    if (l.fence !== null && holding.limit === undefined && !holding.shared) {
      const t0 = now();
      let accepted = null;
      try {
        accepted = await resource.write(key, l.fence);
      } catch {
        stats.errors++;
      }
      if (accepted !== null) {
        record({ key, owner: label, type: "write", t0, t1: now(), fence: l.fence, accepted, afterStop: stopped });
        if (stopped && !accepted) stats.staleRefused++;
      }
    }
    const fate = random();
    await sleep(random() * holdMs);
    if (fate < 0.15) await recorded("extend", key, label, ttlMs, false, async () => (await l.extend(), { ok: true }));
    if (await l.isExpired().catch(() => false)) record({ key, owner: label, type: "expired" });
    record({ key, owner: label, type: "exit" });
    if (offered) victimTurn = true; // a victim offers itself again at its next grant
    if (fate > 0.97) continue; // abandoned: the lease must expire on its own
    await recorded("release", key, label, 0, false, async () => ({ ok: await l.release() }));
  }
}

// The prober: a key of its own that nobody else uses. It takes the key, lets a stranger try to
// release it while it is held (an owner-blind store lets it), abandons the lease, and asks again
// (immediately) only once that lease has certainly run out, so every answer is decided while the
// key is certainly free: a correct store grants it, a store that never expires refuses it in
// plain sight, whatever the other clients' unknown outcomes do to the shared keys.
async function prober() {
  const key = `${config.keyPrefix ?? "fault:"}probe`;
  while (running()) {
    const l = lock(key, ttlMs);
    const label = `probe${id}:${labels++}`;
    const got = await recorded("acquire", key, label, ttlMs, true, async () => {
      const ok = await l.acquire({ timeout: 0 });
      return { ok, fence: ok ? l.fence : null };
    });
    if (got) {
      stats.grants++;
      record({ key, owner: label, type: "enter" });
      const stranger = token();
      await recorded("release", key, `stranger:${id}:${labels++}`, ttlMs, false, async () => ({
        ok: (await store.release(key, stranger)) === true,
      }));
      record({ key, owner: label, type: "exit" });
    } else if (got === false) stats.refused++;
    // Past the TTL (and the checker's tolerance) from this answer, whatever it was.
    await sleep(ttlMs + 50);
  }
}

await Promise.all([
  ...Array.from({ length: clients }, (_, c) => user(c)),
  ...(config.probe ? [prober()] : []),
  ...(config.probe && primitive === "leader" ? [observer()] : []),
]);
closeSync(fd);
process.stdout.write(JSON.stringify(stats) + "\n");
await Promise.race([close(), sleep(5_000)]);
process.exit(0);
