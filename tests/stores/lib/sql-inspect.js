// databaseLockStore's hold metadata and inspect(key), called directly, against each driver.
// `env()` answers what registerSqlTests gets: { dialect, db, stores, raw } (raw runs SQL written
// with `?` directly on the database and answers the rows).
//
// registerPgInspectTests adds what only PostgreSQL has: the waiters' queue (counted in
// `waiting`, and a waiter's metadata becoming its grant's on every kind of hand-over). Its
// `env()` answers { stores, pools, raw }.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { inspect } from "node:util";
import { test } from "node:test";
import { databaseLockStore } from "../../../pkg/stores/sql.js";
import { schemaStatements } from "../../../pkg/stores/sql-schema.js";
import { acquired } from "./contract.js";
import { READ_LIMIT } from "./sql-suite.js";
import { sleep } from "./servers.js";

const LONG = 60_000;
const SHORT = 150;
const SETTLE = 250;
// A holder's TTL that leaves a waiter time to queue behind it on a loaded machine.
const BRIEF = 2_000;
const owner = () => `owner-${randomBytes(12).toString("hex")}`;
const tag = () => randomBytes(4).toString("hex");
const uniqueKey = (label) => `keel-test:inspect:${label}:${tag()}`;

/**
 * Asserts that `answer` is inspect's shape, holds no owner (of `owners`) anywhere, and answers
 * its holders as [metadata, fence] pairs (remainingMs checked to be in 1..ttl).
 */
function holdsOf(answer, { owners = [], ttl = LONG, waiting } = {}) {
  const text = JSON.stringify(answer);
  for (const o of owners) assert.ok(!text.includes(o), `inspect's answer shows an owner: ${text}`);
  assert.ok(!/owner|token/i.test(text), `inspect's answer names an owner or token: ${text}`);
  assert.deepEqual(Object.keys(answer).sort(), ["holders", "waiting"], `inspect answered ${inspect(answer)}`);
  if (waiting !== undefined) assert.equal(answer.waiting, waiting, `waiting in ${text}`);
  assert.ok(answer.waiting === null || (Number.isInteger(answer.waiting) && answer.waiting >= 0), `waiting in ${text}`);
  assert.ok(Array.isArray(answer.holders), `holders in ${text}`);
  for (const h of answer.holders) {
    assert.deepEqual(Object.keys(h).sort(), ["fence", "metadata", "remainingMs"], `a holder is ${inspect(h)}`);
    assert.ok(h.metadata === null || typeof h.metadata === "string", `metadata ${inspect(h.metadata)}`);
    assert.ok(h.fence === null || Number.isSafeInteger(h.fence), `fence ${inspect(h.fence)}`);
    assert.ok(Number.isInteger(h.remainingMs) && h.remainingMs >= 0 && h.remainingMs <= ttl, `remainingMs ${h.remainingMs} (ttl ${ttl})`);
  }
  const fences = answer.holders.map((h) => h.fence);
  assert.deepEqual(fences, [...fences].sort((a, b) => (a ?? 0) - (b ?? 0)), `holders not in fence order: ${text}`);
  return answer.holders.map((h) => [h.metadata, h.fence]);
}

const keySet = (label, count) => {
  const base = `keel-test:inspect:${label}:${tag()}`;
  return Array.from({ length: count }, (_, i) => `${base}:${i}`);
};

// The lock table and its neighbours as the release before hold metadata laid them out: today's
// schema() without the metadata columns (and, Postgres, the lock row's fence and the functions
// that take metadata).
async function createPreMetadataTable(raw, dialect, table) {
  // SQLite: the CREATE TABLEs without their metadata column (an ALTER TABLE … DROP COLUMN would
  // re-read the whole schema, other tests' tables included).
  const withoutMetadata = (statement) => (dialect === "sqlite" ? statement.replace(/,\s*\n\s*metadata\s+TEXT\b/, "") : statement);
  for (const statement of schemaStatements(dialect, table)) await raw(withoutMetadata(statement), []);
  if (dialect === "postgres") {
    await raw(`ALTER TABLE "${table}" DROP COLUMN metadata, DROP COLUMN fence`, []);
    await raw(`ALTER TABLE "${table}_shared" DROP COLUMN metadata`, []);
    await raw(`ALTER TABLE "${table}_waiters" DROP COLUMN metadata`, []);
    await raw(`DROP FUNCTION "${table}_keep_fence"`, []);
    await raw(`DROP FUNCTION "${table}_take_shared"`, []);
    await raw(`DROP FUNCTION "${table}_take_many"`, []);
  }
}

async function dropTables(raw, dialect, table) {
  await raw(`DROP TABLE IF EXISTS "${table}"`, []);
  await raw(`DROP TABLE IF EXISTS "${table}_shared"`, []);
  if (dialect === "sqlite") {
    await raw(`DROP TABLE IF EXISTS "${table}_fence"`, []);
    return;
  }
  await raw(`DROP TABLE IF EXISTS "${table}_waiters"`, []);
  await raw(`DROP TABLE IF EXISTS "${table}_watchers"`, []);
  await raw(`DROP SEQUENCE IF EXISTS "${table}_fence_seq"`, []);
  const fns = await raw("SELECT p.oid::regprocedure::text AS sig FROM pg_proc AS p WHERE p.proname LIKE ?", [`${table}\\_%`]);
  for (const { sig } of fns) await raw(`DROP FUNCTION IF EXISTS ${sig}`, []);
}

export function registerInspectTests(env) {
  // PostgreSQL counts its queue; SQLite and D1 keep none, and cannot count callers that poll.
  const nobody = () => (env().dialect === "postgres" ? 0 : null);
  test("inspect: a free key has no holders and nobody waiting", async () => {
    const { stores } = env();
    const answer = await stores[0].inspect(uniqueKey("free"));
    assert.deepEqual(answer, { holders: [], waiting: nobody() });
  });

  test("inspect: a lock shows its metadata, the grant's fence and the ms left; extend keeps them; release drops them", async () => {
    const { stores } = env();
    const [store, other] = [stores[0], stores[stores.length - 1]];
    const key = uniqueKey("lock");
    const a = owner();
    const grant = await store.acquire(key, a, LONG, "worker 7 on host-a");
    assert.ok(acquired(grant));
    const first = await other.inspect(key);
    assert.deepEqual(holdsOf(first, { owners: [a], waiting: nobody() }), [["worker 7 on host-a", grant.fence]]);
    assert.ok(first.holders[0].remainingMs > LONG - 10_000, `remainingMs ${first.holders[0].remainingMs} right after a ${LONG} ms acquire`);
    await sleep(50);
    assert.equal(await store.extend(key, a, LONG), true);
    const extended = await other.inspect(key);
    assert.deepEqual(holdsOf(extended, { owners: [a] }), [["worker 7 on host-a", grant.fence]], "extend changed the hold's metadata or fence");
    assert.equal(await store.release(key, a), true);
    assert.deepEqual(await other.inspect(key), { holders: [], waiting: nobody() }, "a released hold is still shown");
    // A lock without metadata: null, with its fence.
    const b = owner();
    const plain = await store.acquire(key, b, LONG);
    assert.deepEqual(holdsOf(await other.inspect(key), { owners: [b] }), [[null, plain.fence]]);
    assert.equal(await store.release(key, b), true);
  });

  test("inspect: an expired hold is not shown, and its metadata does not pass to the next holder", async () => {
    const { stores } = env();
    const store = stores[0];
    const key = uniqueKey("expiry");
    const a = owner();
    // Held for the inspects right after it (on a loaded machine too), then given a short TTL
    // that runs out.
    assert.ok(acquired(await store.acquire(key, a, LONG, "short-lived")));
    assert.equal((await store.inspect(key)).holders.length, 1);
    const left = (await store.inspect(key)).holders[0].remainingMs;
    assert.ok(left > LONG - 10_000 && left <= LONG, `remainingMs ${left} of a ${LONG} ms hold`);
    assert.equal(await store.extend(key, a, SHORT), true);
    await sleep(SHORT + SETTLE);
    assert.deepEqual(await store.inspect(key), { holders: [], waiting: nobody() }, "an expired hold is still shown");
    // The expired row is taken over by a holder without metadata: none is shown for it.
    const b = owner();
    const grant = await store.acquire(key, b, LONG);
    assert.deepEqual(holdsOf(await store.inspect(key), { owners: [a, b] }), [[null, grant.fence]], "the expired holder's metadata passed on");
    assert.equal(await store.release(key, b), true);
    // The same for a takeover with metadata of its own.
    assert.ok(acquired(await store.acquire(key, a, SHORT, "first")));
    await sleep(SHORT + SETTLE);
    const second = await store.acquire(key, b, LONG, "second");
    assert.deepEqual(holdsOf(await store.inspect(key), { owners: [a, b] }), [["second", second.fence]]);
    assert.equal(await store.release(key, b), true);
  });

  test("inspect: shared holds are each listed with their own metadata and fence, in fence order", async () => {
    const { stores } = env();
    const [store, other] = [stores[0], stores[stores.length - 1]];
    const key = uniqueKey("shared");
    const [a, b, c] = [owner(), owner(), owner()];
    const ga = await store.acquireShared(key, a, LONG, 1, 3, "permit a");
    const gb = await other.acquireShared(key, b, LONG, 1, 3);
    const gc = await store.acquireShared(key, c, 30_000, 1, 3, "permit c");
    for (const g of [ga, gb, gc]) assert.ok(acquired(g), `a permit was refused: ${inspect(g)}`);
    const owners = [a, b, c];
    assert.deepEqual(holdsOf(await other.inspect(key), { owners, waiting: nobody() }), [
      ["permit a", ga.fence],
      [null, gb.fence],
      ["permit c", gc.fence],
    ]);
    // A lock is refused beside them and shows nowhere.
    assert.equal(await store.acquire(key, owner(), LONG, "a writer"), false);
    assert.equal(await store.extend(key, c, LONG), true);
    assert.equal(await store.release(key, a), true);
    assert.deepEqual(holdsOf(await store.inspect(key), { owners }), [
      [null, gb.fence],
      ["permit c", gc.fence],
    ]);
    // A read lock (weight 1 under READ_LIMIT) is a shared hold like any other.
    const reader = owner();
    const readKey = uniqueKey("read");
    const gr = await store.acquireShared(readKey, reader, LONG, 1, READ_LIMIT, "reader");
    assert.deepEqual(holdsOf(await store.inspect(readKey), { owners: [reader] }), [["reader", gr.fence]]);
    assert.equal(await store.release(readKey, reader), true);
    assert.equal(await store.forceRelease(key), true);
    assert.deepEqual(await store.inspect(key), { holders: [], waiting: nobody() }, "force-released holds are still shown");
  });

  test("inspect: acquireMany keeps each key's metadata; an entry left undefined (or no array) is none", async () => {
    const { stores } = env();
    const store = stores[0];
    const keys = keySet("many", 3);
    const owners = keys.map(owner);
    const grants = await store.acquireMany(keys, owners, LONG, ["first", undefined, "third"]);
    assert.ok(Array.isArray(grants), `acquireMany answered ${inspect(grants)}`);
    const expected = [["first"], [null], ["third"]];
    for (const [i, key] of keys.entries()) {
      assert.deepEqual(holdsOf(await store.inspect(key), { owners }), [[expected[i][0], grants[i].fence]], `key ${i}`);
    }
    for (const [i, key] of keys.entries()) assert.equal(await store.release(key, owners[i]), true);
    const again = keys.map(owner);
    const plain = await store.acquireMany(keys, again, LONG);
    for (const [i, key] of keys.entries()) assert.deepEqual(holdsOf(await store.inspect(key), { owners: again }), [[null, plain[i].fence]]);
    for (const [i, key] of keys.entries()) assert.equal(await store.release(key, again[i]), true);
  });

  test("metadata: 1024 bytes of UTF-8 are kept whole, 1025 refused (RangeError), a non-string refused (TypeError); a refusal writes nothing", async () => {
    const { stores } = env();
    const store = stores[0];
    const cases = ["x".repeat(1024), "é".repeat(512), "😀".repeat(256), "€".repeat(341) + "x"];
    for (const metadata of cases) {
      const key = uniqueKey("limit");
      const o = owner();
      const grant = await store.acquire(key, o, LONG, metadata);
      assert.deepEqual(holdsOf(await store.inspect(key), { owners: [o] }), [[metadata, grant.fence]], `metadata of ${Buffer.byteLength(metadata)} bytes`);
      assert.equal(await store.release(key, o), true);
    }
    const tooLong = ["x".repeat(1025), "é".repeat(512) + "x", "😀".repeat(256) + "x", "€".repeat(342)];
    const notStrings = [null, 42, {}, ["x"], Symbol("x")];
    const key = uniqueKey("refused");
    const keys = keySet("refused", 2);
    for (const bad of tooLong) {
      await assert.rejects(store.acquire(key, owner(), LONG, bad), RangeError);
      await assert.rejects(store.acquireShared(key, owner(), LONG, 1, 2, bad), RangeError);
      await assert.rejects(store.acquireMany(keys, keys.map(owner), LONG, [undefined, bad]), RangeError);
      if (typeof store.acquireOrWait === "function") {
        await assert.rejects(store.acquireOrWait(key, owner(), LONG, 1_000, 50, bad), RangeError);
        await assert.rejects(store.acquireSharedOrWait(key, owner(), LONG, 1, 2, 1_000, 50, bad), RangeError);
      }
    }
    for (const bad of notStrings) {
      await assert.rejects(store.acquire(key, owner(), LONG, bad), TypeError);
      await assert.rejects(store.acquireShared(key, owner(), LONG, 1, 2, bad), TypeError);
      await assert.rejects(store.acquireMany(keys, keys.map(owner), LONG, [bad, undefined]), TypeError);
      if (typeof store.acquireOrWait === "function") {
        await assert.rejects(store.acquireOrWait(key, owner(), LONG, 1_000, 50, bad), TypeError);
      }
    }
    await assert.rejects(store.acquireMany(keys, keys.map(owner), LONG, "one for all"), TypeError);
    await assert.rejects(store.acquireMany(keys, keys.map(owner), LONG, ["only one"]), RangeError);
    for (const k of [key, ...keys]) {
      assert.deepEqual(await store.inspect(k), { holders: [], waiting: nobody() }, "a refused call wrote a hold");
      assert.equal(await store.isLocked(k), false);
    }
  });

  test("inspect: a table from before hold metadata refuses with an error naming createTable(), which upgrades it; held locks stay held", async () => {
    const { db, raw, dialect } = env();
    const table = `pre_metadata_${tag()}`;
    await createPreMetadataTable(raw, dialect, table);
    try {
      const store = databaseLockStore(db, { table });
      const [held, key, a, b] = [uniqueKey("held"), uniqueKey("new"), owner(), owner()];
      const now = await store.now();
      await raw(`INSERT INTO "${table}" (key, owner, expires_at) VALUES (?, ?, ?)`, [held, a, now + LONG]);
      await assert.rejects(store.inspect(held), /createTable\(\)/);
      await assert.rejects(store.acquire(key, b, LONG, "with metadata"), /createTable\(\)/);
      await assert.rejects(store.acquire(key, b, LONG), /createTable\(\)/);
      assert.equal(await store.isLocked(key), false, "a refused acquire left a lock");
      await store.createTable();
      await store.createTable(); // idempotent
      // The lock from before is held as it was; it has no metadata (nor, on Postgres, a fence in its row).
      assert.equal(await store.isLocked(held), true, "the upgrade dropped a live lock");
      const before = holdsOf(await store.inspect(held), { owners: [a] });
      assert.equal(before.length, 1);
      assert.equal(before[0][0], null);
      assert.equal(await store.release(held, a), true);
      const grant = await store.acquire(key, b, LONG, "after the upgrade");
      assert.deepEqual(holdsOf(await store.inspect(key), { owners: [b] }), [["after the upgrade", grant.fence]]);
      const c = owner();
      const permit = await store.acquireShared(held, c, LONG, 1, 2, "a permit");
      assert.deepEqual(holdsOf(await store.inspect(held), { owners: [c] }), [["a permit", permit.fence]]);
      const keys = keySet("upgraded", 2);
      const owners = keys.map(owner);
      const set = await store.acquireMany(keys, owners, LONG, ["one", "two"]);
      assert.deepEqual(holdsOf(await store.inspect(keys[1]), { owners }), [["two", set[1].fence]]);
      await store.close?.();
    } finally {
      await dropTables(raw, dialect, table);
    }
  });
}

export function registerPgInspectTests(env) {
  const waitFor = async (check, what) => {
    const deadline = Date.now() + 10_000;
    for (;;) {
      const value = await check();
      if (value) return value;
      assert.ok(Date.now() < deadline, `timed out waiting for ${what}`);
      await sleep(5);
    }
  };

  test("inspect (pg): queued waiters are counted; one handed the key by a release shows its own metadata and fence", async () => {
    const { pools } = env();
    const holderStore = databaseLockStore(pools[0]);
    const waiters = [databaseLockStore(pools[1]), databaseLockStore(pools[2])];
    try {
      const key = uniqueKey("handover");
      const [a, w1, w2] = [owner(), owner(), owner()];
      const owners = [a, w1, w2];
      const grant = await holderStore.acquire(key, a, LONG, "holder");
      const first = waiters[0].acquireOrWait(key, w1, LONG, 10_000, 60_000, "waiter one");
      await waitFor(async () => (await holderStore.inspect(key)).waiting === 1, "the first waiter");
      const second = waiters[1].acquireSharedOrWait(key, w2, LONG, 1, 2, 10_000, 60_000, "waiter two");
      const queued = await waitFor(async () => {
        const answer = await holderStore.inspect(key);
        return answer.waiting === 2 ? answer : null;
      }, "the second waiter");
      assert.deepEqual(holdsOf(queued, { owners, waiting: 2 }), [["holder", grant.fence]]);
      // The release hands the key to the first waiter, in the same statement.
      assert.equal(await holderStore.release(key, a), true);
      const g1 = await first;
      assert.ok(acquired(g1));
      assert.deepEqual(holdsOf(await holderStore.inspect(key), { owners, waiting: 1 }), [["waiter one", g1.fence]]);
      // Its release hands the key to the shared waiter (through the tick that follows a release).
      assert.equal(await waiters[0].release(key, w1), true);
      const g2 = await second;
      assert.ok(acquired(g2));
      assert.deepEqual(holdsOf(await holderStore.inspect(key), { owners, waiting: 0 }), [["waiter two", g2.fence]]);
      assert.equal(await waiters[1].release(key, w2), true);
      assert.deepEqual(await holderStore.inspect(key), { holders: [], waiting: 0 });
    } finally {
      for (const s of [holderStore, ...waiters]) await s.close();
    }
  });

  test("inspect (pg): a waiter handed the key at the holder's expiry shows its own metadata and fence", async () => {
    const { pools } = env();
    const holderStore = databaseLockStore(pools[0]);
    const waiting = databaseLockStore(pools[1]);
    try {
      const key = uniqueKey("expiry-handover");
      const [a, w] = [owner(), owner()];
      assert.ok(acquired(await holderStore.acquire(key, a, BRIEF, "crashed holder")));
      const pending = waiting.acquireOrWait(key, w, LONG, 10_000, 60_000, "next in line");
      const grant = await pending;
      assert.ok(acquired(grant));
      assert.deepEqual(holdsOf(await holderStore.inspect(key), { owners: [a, w], waiting: 0 }), [["next in line", grant.fence]]);
      assert.equal(await waiting.release(key, w), true);
    } finally {
      await holderStore.close();
      await waiting.close();
    }
  });

  test("inspect (pg): an acquire that finds an expired or free key with waiters queued hands it to the first, with the waiter's metadata", async () => {
    const { stores, raw } = env();
    const store = stores[0];
    const nowMs = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";
    // A waiter whose process is gone: its row is queued, nobody ticks for it.
    const enqueue = (key, w, metadata) =>
      raw(
        `INSERT INTO keel_locks_waiters (key, owner, ttl_ms, enqueued_at, deadline, metadata) VALUES (?, ?, ${LONG}, ${nowMs}, ${nowMs} + 60000, ?)`,
        [key, w, metadata],
      );
    const waiterFence = async (key, w) => Number((await raw("SELECT fence FROM keel_locks_waiters WHERE key = ? AND owner = ?", [key, w]))[0]?.fence);
    // The key's row expired: taken over for the waiter.
    const expired = uniqueKey("expired-with-waiter");
    const [a, w] = [owner(), owner()];
    assert.ok(acquired(await store.acquire(expired, a, SHORT, "gone")));
    await enqueue(expired, w, "queued before");
    assert.equal((await store.inspect(expired)).waiting, 1);
    await sleep(SHORT + SETTLE);
    assert.equal(await store.acquire(expired, owner(), LONG, "newcomer"), false, "a newcomer overtook the queue");
    assert.deepEqual(holdsOf(await store.inspect(expired), { owners: [a, w], waiting: 0 }), [["queued before", await waiterFence(expired, w)]]);
    assert.equal(await store.release(expired, w), true);
    // No row at all: inserted for the waiter.
    const free = uniqueKey("free-with-waiter");
    const v = owner();
    await enqueue(free, v, null);
    assert.equal(await store.acquire(free, owner(), LONG, "newcomer"), false);
    const fence = await waiterFence(free, v);
    assert.ok(Number.isSafeInteger(fence) && fence > 0, `the waiter's grant has fence ${fence}`);
    assert.deepEqual(holdsOf(await store.inspect(free), { owners: [v] }), [[null, fence]]);
    assert.equal(await store.release(free, v), true);
  });

  test("inspect (pg): acquireOrWait on a free or expired key keeps its metadata and the grant's fence in the row", async () => {
    const { stores } = env();
    const store = stores[0];
    try {
      const key = uniqueKey("enqueue");
      const [a, b] = [owner(), owner()];
      const first = await store.acquireOrWait(key, a, LONG, 1_000, 50, "took it free");
      assert.ok(acquired(first));
      assert.deepEqual(holdsOf(await store.inspect(key), { owners: [a, b] }), [["took it free", first.fence]]);
      // Then given a short TTL that runs out.
      assert.equal(await store.extend(key, a, SHORT), true);
      await sleep(SHORT + SETTLE);
      const second = await store.acquireOrWait(key, b, LONG, 1_000, 50, "took it over");
      assert.ok(acquired(second));
      assert.deepEqual(holdsOf(await store.inspect(key), { owners: [a, b] }), [["took it over", second.fence]]);
      assert.equal(await store.release(key, b), true);
    } finally {
      await store.close();
    }
  });
}
