// databaseLockStore.acquireMany, called directly, against each driver. `env()` answers what
// registerSqlTests gets: { dialect, db, stores, raw } (raw runs SQL written with `?` directly on
// the database and answers the rows). Every check reads the table's rows itself: a set must be
// granted whole, exactly as acquire grants a key, or leave every row as it was.
//
// registerPgAcquireManyTests adds what only PostgreSQL has: sets racing from many connections
// at once, the waiters' queue, and a table createTable() has not upgraded.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { inspect } from "node:util";
import { test } from "node:test";
import { databaseLockStore, schema } from "../../../pkg/stores/sql.js";
import { MAX_FENCE } from "../../../pkg/stores/args.js";
import { acquired } from "./contract.js";
import { fenceLedger, READ_LIMIT } from "./sql-suite.js";
import { sleep } from "./servers.js";

const LONG = 60_000;
const SHORT = 150;
const SETTLE = 250;
// A holder's TTL that leaves a waiter time to queue behind it on a loaded machine.
const BRIEF = 2_000;
const owner = () => randomBytes(16).toString("hex");
const tag = () => randomBytes(4).toString("hex");
/** `count` fresh keys sharing one prefix, sorted by code point (plain ASCII: as JS sorts them). */
const keySet = (label, count) => {
  const base = `keel-test:many:${label}:${tag()}`;
  return Array.from({ length: count }, (_, i) => `${base}:${String(i).padStart(2, "0")}`);
};
const ownersFor = (keys) => keys.map(owner);
const placeholders = (n) => Array.from({ length: n }, () => "?").join(", ");

/** The lock rows of `keys` as the table has them, by key: { owner, expires_at, fence? } (numbers). */
async function lockRows(raw, keys, table = "keel_locks") {
  const rows = await raw(`SELECT * FROM "${table}" WHERE key IN (${placeholders(keys.length)}) ORDER BY key`, keys);
  return Object.fromEntries(
    rows.map((r) => [r.key, { owner: r.owner, expires_at: Number(r.expires_at), ...(r.fence === undefined ? {} : { fence: r.fence === null ? null : Number(r.fence) }) }]),
  );
}

/** Shared holds of `key`, by owner. */
async function sharedRows(raw, key) {
  const rows = await raw("SELECT owner, expires_at, fence FROM keel_locks_shared WHERE key = ? ORDER BY owner", [key]);
  return rows.map((r) => ({ owner: r.owner, expires_at: Number(r.expires_at), fence: Number(r.fence) }));
}

/** Asserts that `answer` grants every key of the set: an array of { fence }, one per key, all distinct. */
function assertGranted(answer, keys, when) {
  assert.ok(Array.isArray(answer), `acquireMany answered ${inspect(answer)}, not an array (${when})`);
  assert.equal(answer.length, keys.length, `acquireMany answered ${answer.length} grants for ${keys.length} keys (${when})`);
  for (const grant of answer) {
    assert.deepEqual(Object.keys(grant), ["fence"], `a grant is ${inspect(grant)} (${when})`);
    assert.ok(Number.isSafeInteger(grant.fence) && grant.fence >= 1 && grant.fence <= MAX_FENCE, `fence ${grant.fence} (${when})`);
  }
  assert.equal(new Set(answer.map((g) => g.fence)).size, keys.length, `a fence was handed out twice in one set (${when})`);
}

export function registerAcquireManyTests(env) {
  test("acquireMany: free keys are all granted, as acquire grants them; each is released by its own owner", async () => {
    const { stores, raw, dialect } = env();
    const [store, other] = [stores[0], stores[stores.length - 1]];
    const keys = keySet("free", 5);
    const owners = ownersFor(keys);
    const before = await store.now();
    const answer = await store.acquireMany(keys, owners, LONG);
    const after = await store.now();
    assertGranted(answer, keys, "free keys");
    const rows = await lockRows(raw, keys);
    assert.deepEqual(Object.keys(rows), keys, "not every key has its row");
    keys.forEach((key, i) => {
      const row = rows[key];
      assert.equal(row.owner, owners[i], `${key} is held by another owner than the one given for it`);
      assert.ok(row.expires_at >= before + LONG && row.expires_at <= after + LONG, `${key}: expires_at ${row.expires_at} is not the database's now + ttl`);
      if (dialect === "sqlite") assert.equal(row.fence, answer[i].fence, `${key}: the row's fence is not the one answered`);
    });
    // Fences rise in key order, from the table's one counter.
    for (let i = 1; i < answer.length; i++) assert.ok(answer[i].fence > answer[i - 1].fence, `fences not in key order: ${inspect(answer)}`);
    // Each key behaves as a lock acquire took: held, extendable and released by its owner only.
    for (const [i, key] of keys.entries()) {
      assert.equal(await other.isLocked(key), true);
      assert.equal(await other.acquire(key, owner(), LONG), false, `${key} was acquired while the set held it`);
      assert.equal(await other.release(key, owners[(i + 1) % keys.length]), false, `${key} was released by another key's owner`);
      assert.equal(await other.extend(key, owners[i], LONG), true);
    }
    assert.equal(await other.acquireMany(keys, ownersFor(keys), LONG), false, "a held set was granted again");
    for (const [i, key] of keys.entries()) assert.equal(await other.release(key, owners[i]), true, `${key}: its owner could not release it`);
    assert.deepEqual(await lockRows(raw, keys), {}, "released keys left rows");
  });

  test("acquireMany: one key held refuses the set and changes nothing — first, middle or last key", async () => {
    const { stores, raw } = env();
    const store = stores[0];
    for (const at of [0, 2, 4]) {
      const keys = keySet(`held-${at}`, 5);
      const holder = owner();
      // Some keys have expired rows: they must stay exactly as they were too.
      const now = await store.now();
      await raw("INSERT INTO keel_locks (key, owner, expires_at) VALUES (?, ?, ?)", [keys[(at + 1) % 5], "stale", now - 1_000]);
      assert.ok(acquired(await store.acquire(keys[at], holder, LONG)));
      const before = await lockRows(raw, keys);
      const owners = ownersFor(keys);
      assert.equal(await store.acquireMany(keys, owners, LONG), false, `key ${at} held: the set was not refused`);
      assert.deepEqual(await lockRows(raw, keys), before, `key ${at} held: a refused set changed rows`);
      for (const [i, key] of keys.entries()) {
        assert.equal(await store.release(key, owners[i]), false, `key ${at} held: ${key} was held by the refused set's owner`);
      }
      // Once the holder leaves, the same set is granted.
      assert.equal(await store.release(keys[at], holder), true);
      assertGranted(await store.acquireMany(keys, owners, LONG), keys, `key ${at} released`);
      for (const [i, key] of keys.entries()) assert.equal(await store.release(key, owners[i]), true);
    }
  });

  test("acquireMany: a key the same owner already holds refuses the set, as acquire would", async () => {
    const { stores, raw } = env();
    const store = stores[0];
    const keys = keySet("own", 3);
    const owners = ownersFor(keys);
    assert.ok(acquired(await store.acquire(keys[1], owners[1], LONG)));
    const before = await lockRows(raw, keys);
    assert.equal(await store.acquireMany(keys, owners, LONG), false);
    assert.deepEqual(await lockRows(raw, keys), before);
    assert.equal(await store.release(keys[1], owners[1]), true);
  });

  test("acquireMany: a key with a live shared hold refuses the set; the hold stays", async () => {
    const { stores, raw } = env();
    const store = stores[0];
    const keys = keySet("shared", 3);
    const [reader, permit] = [owner(), owner()];
    assert.ok(acquired(await store.acquireShared(keys[1], reader, LONG, 1, READ_LIMIT)));
    const shared = await sharedRows(raw, keys[1]);
    const before = await lockRows(raw, keys);
    assert.equal(await store.acquireMany(keys, ownersFor(keys), LONG), false, "a set was granted beside a read hold");
    assert.deepEqual(await lockRows(raw, keys), before, "a refused set changed rows");
    assert.deepEqual(await sharedRows(raw, keys[1]), shared, "a refused set changed the shared holds");
    assert.equal(await store.release(keys[1], reader), true);
    // A semaphore's permit refuses too; once it has expired the key is free for the set.
    // Held for the refusal (on a loaded machine too), then given a short TTL that runs out.
    assert.ok(acquired(await store.acquireShared(keys[2], permit, LONG, 1, 3)));
    assert.equal(await store.acquireMany(keys, ownersFor(keys), LONG), false, "a set was granted beside a live permit");
    assert.equal(await store.extend(keys[2], permit, SHORT), true);
    await sleep(SHORT + SETTLE);
    const owners = ownersFor(keys);
    assertGranted(await store.acquireMany(keys, owners, LONG), keys, "after the permit expired");
    assert.equal((await lockRows(raw, keys))[keys[2]].owner, owners[2]);
    assert.equal(await store.release(keys[2], permit), false, "the expired permit released as live");
    for (const [i, key] of keys.entries()) assert.equal(await store.release(key, owners[i]), true);
  });

  test("acquireMany: expired rows count as free — rows written directly, and locks that ran out", async () => {
    const { stores, raw } = env();
    const [store, other] = [stores[0], stores[stores.length - 1]];
    const keys = keySet("expired", 4);
    const now = await store.now();
    await raw("INSERT INTO keel_locks (key, owner, expires_at) VALUES (?, ?, ?)", [keys[0], "stale", now - 1]);
    await raw("INSERT INTO keel_locks (key, owner, expires_at) VALUES (?, ?, ?)", [keys[3], "stale", 0]);
    const gone = owner();
    assert.ok(acquired(await store.acquire(keys[1], gone, SHORT)));
    await sleep(SHORT + SETTLE);
    const owners = ownersFor(keys);
    assertGranted(await other.acquireMany(keys, owners, LONG), keys, "expired rows");
    const rows = await lockRows(raw, keys);
    assert.deepEqual(keys.map((k) => rows[k].owner), owners, "an expired row was not taken over by its key's owner");
    assert.equal(await store.release(keys[1], gone), false, "the expired holder released the set's key");
    assert.equal(await store.extend(keys[1], gone, LONG), false, "the expired holder extended the set's key");
    for (const [i, key] of keys.entries()) assert.equal(await store.release(key, owners[i]), true);
  });

  test("acquireMany: fences rise per key across acquire, acquireMany, release and expiry", async () => {
    const { stores } = env();
    const [store, other] = [stores[0], stores[stores.length - 1]];
    const keys = keySet("fences", 3);
    const ledger = fenceLedger();
    const one = owner();
    ledger.take(keys[1], await store.acquire(keys[1], one, LONG), "acquire before the set");
    assert.equal(await store.release(keys[1], one), true);
    let owners = ownersFor(keys);
    let answer = await other.acquireMany(keys, owners, SHORT);
    assertGranted(answer, keys, "the first set");
    keys.forEach((key, i) => ledger.take(key, answer[i], "the first set"));
    await sleep(SHORT + SETTLE);
    // Expired: taken over one key at a time, then again as a set.
    const next = owner();
    ledger.take(keys[2], await store.acquire(keys[2], next, LONG), "acquire of an expired key of the set");
    assert.equal(await store.release(keys[2], next), true);
    owners = ownersFor(keys);
    answer = await store.acquireMany(keys, owners, LONG);
    assertGranted(answer, keys, "the second set");
    keys.forEach((key, i) => ledger.take(key, answer[i], "the second set"));
    for (const [i, key] of keys.entries()) assert.equal(await other.release(key, owners[i]), true);
    for (const key of keys) {
      const after = owner();
      ledger.take(key, await other.acquire(key, after, LONG), "acquire after the set");
      assert.equal(await other.release(key, after), true);
    }
  });

  test("acquireMany: keys of every kind of text, and 64 at once", async () => {
    const { stores, raw } = env();
    const store = stores[0];
    const t = tag();
    // Quotes, separators, an array's braces, JSON and SQL syntax, "NULL", accents, an astral
    // character: each key must reach the table as acquire writes it.
    const odd = ['a"b', "a'b", "a,b", "{a}", "[1]", "NULL", "a\\b", "ä", "😀", "x y", " ", "\t"].map((k) => `${t}${k}`);
    const keys = [...odd].sort((a, b) => (a < b ? -1 : 1)); // no unit from U+E000 up: code-unit order is code-point order
    const owners = ownersFor(keys);
    assertGranted(await store.acquireMany(keys, owners, LONG), keys, "odd keys");
    for (const [i, key] of keys.entries()) {
      assert.equal(await store.isLocked(key), true, `${inspect(key)} was not locked under its own name`);
      assert.equal(await store.release(key, owners[i]), true, `${inspect(key)}: its owner could not release it`);
    }
    const many = keySet("max", 64);
    const manyOwners = ownersFor(many);
    assertGranted(await store.acquireMany(many, manyOwners, LONG), many, "64 keys");
    assert.equal(Object.keys(await lockRows(raw, many)).length, 64);
    for (const [i, key] of many.entries()) assert.equal(await store.release(key, manyOwners[i]), true);
  });

  test("acquireMany: bad arguments are refused with TypeError or RangeError naming acquireMany, before any SQL runs", async () => {
    const { stores, raw } = env();
    const store = stores[0];
    const keys = keySet("args", 3);
    const owners = ownersFor(keys);
    const cases = [
      [TypeError, "k", owners, LONG],
      [TypeError, null, owners, LONG],
      [RangeError, [], [], LONG],
      [RangeError, keySet("too-many", 65), ownersFor(keySet("x", 65)), LONG],
      [TypeError, keys, "o", LONG],
      [RangeError, keys, owners.slice(1), LONG],
      [TypeError, [keys[0], "", keys[2]], owners, LONG],
      [TypeError, [keys[0], 7, keys[2]], owners, LONG],
      [TypeError, keys, [owners[0], "", owners[2]], LONG],
      [TypeError, keys, [owners[0], owners[0], owners[2]], LONG],
      [TypeError, [keys[0], keys[0], keys[2]], owners, LONG],
      [TypeError, [keys[1], keys[0], keys[2]], owners, LONG],
      // U+FFFD after U+1F600 by code units, before it by code points.
      [TypeError, [`${keys[0]}😀`, `${keys[0]}\ufffd`], owners.slice(0, 2), LONG],
      [RangeError, keys, owners, 0],
      [RangeError, keys, owners, 1.5],
      [RangeError, keys, owners, 2 ** 31],
      [RangeError, keys, owners, "1000"],
    ];
    for (const [kind, k, o, ttl] of cases) {
      await assert.rejects(
        store.acquireMany(k, o, ttl),
        (error) => error instanceof kind && /acquireMany/.test(error.message),
        `acquireMany(${inspect(k)}, ${inspect(o)}, ${inspect(ttl)}) was not refused with ${kind.name}`,
      );
    }
    assert.deepEqual(await lockRows(raw, keys), {}, "a refused call wrote rows");
    // In code-point order the astral character comes last: accepted.
    const astral = [`${keys[0]}\ufffd`, `${keys[0]}😀`];
    const astralOwners = ownersFor(astral);
    assertGranted(await store.acquireMany(astral, astralOwners, LONG), astral, "code-point order");
    for (const [i, key] of astral.entries()) assert.equal(await store.release(key, astralOwners[i]), true);
  });

  test("acquireMany: a custom, schema-qualified table keeps its own rows and counter", async () => {
    const { db, raw, dialect } = env();
    const table = dialect === "sqlite" ? `main.many_${tag()}` : `public.many_${tag()}`;
    const last = table.split(".")[1];
    const store = databaseLockStore(db, { table });
    await store.createTable();
    try {
      const keys = keySet("custom", 3);
      const owners = ownersFor(keys);
      const answer = await store.acquireMany(keys, owners, LONG);
      assertGranted(answer, keys, "custom table");
      // A fresh table counts from 1.
      assert.deepEqual(answer.map((g) => g.fence), [1, 2, 3]);
      const rows = await lockRows(raw, keys, last);
      assert.deepEqual(keys.map((k) => rows[k]?.owner), owners);
      assert.deepEqual(await lockRows(raw, keys), {}, "the set wrote into the default table");
      assert.equal(await store.acquireMany(keys, ownersFor(keys), LONG), false);
      for (const [i, key] of keys.entries()) assert.equal(await store.release(key, owners[i]), true);
    } finally {
      await dropTable(raw, dialect, last);
    }
  });

  test("acquireMany: a fence counter that runs out part way through a set leaves none of it held", async () => {
    const { db, raw, dialect } = env();
    const table = `many_max_${tag()}`;
    const store = databaseLockStore(db, { table });
    await store.createTable();
    try {
      const keys = keySet("max-fence", 3);
      if (dialect === "sqlite") await raw(`UPDATE "${table}_fence" SET value = ?`, [MAX_FENCE - 2]);
      else await raw(`ALTER SEQUENCE "${table}_fence_seq" RESTART WITH ${MAX_FENCE - 1}`, []);
      await assert.rejects(store.acquireMany(keys, ownersFor(keys), LONG), dialect === "sqlite" ? /CHECK constraint failed/ : /maximum value of sequence/);
      assert.deepEqual(await lockRows(raw, keys, table), {}, "a failed set left rows");
      // Two keys still fit: the last two fences, exactly.
      const two = keys.slice(0, 2);
      const owners = ownersFor(two);
      if (dialect === "postgres") await raw(`ALTER SEQUENCE "${table}_fence_seq" RESTART WITH ${MAX_FENCE - 1}`, []);
      assert.deepEqual(await store.acquireMany(two, owners, LONG), [{ fence: MAX_FENCE - 1 }, { fence: MAX_FENCE }]);
      for (const [i, key] of two.entries()) assert.equal(await store.release(key, owners[i]), true);
    } finally {
      await dropTable(raw, dialect, table);
    }
  });
}

// Drops a lock table made here and what createTable() made next to it.
async function dropTable(raw, dialect, last) {
  await raw(`DROP TABLE IF EXISTS "${last}"`, []);
  await raw(`DROP TABLE IF EXISTS "${last}_shared"`, []);
  if (dialect === "sqlite") {
    await raw(`DROP TABLE IF EXISTS "${last}_fence"`, []);
    return;
  }
  await raw(`DROP TABLE IF EXISTS "${last}_waiters"`, []);
  await raw(`DROP TABLE IF EXISTS "${last}_watchers"`, []);
  await raw(`DROP SEQUENCE IF EXISTS "${last}_fence_seq"`, []);
  for (const fn of ["take_shared", "release_shared", "extend_shared", "hand_over", "tick", "take_many", "keep_fence", "watch", "unwatch", "watch_report"]) {
    await raw(`DROP FUNCTION IF EXISTS "${last}_${fn}"`, []);
  }
}

/**
 * PostgreSQL only. `env()` answers { stores, pools, raw }: stores over separate pools of one
 * database (several processes, in effect), the pools, and raw as above.
 */
export function registerPgAcquireManyTests(env) {
  test("acquireMany (pg): overlapping sets racing from 40 connections — never a key granted twice, never part of a set, no deadlock", { timeout: 120_000 }, async () => {
    const { stores, raw } = env();
    const base = keySet("race", 8);
    const holders = new Map(); // key -> owner, while a caller holds it
    let grants = 0;
    let refusals = 0;
    let singles = 0;
    const caller = async (c) => {
      const store = stores[c % stores.length];
      for (let round = 0; round < 12; round++) {
        if (c % 8 === 7) {
          // Some callers take one key at a time, through acquire, beside the sets.
          const key = base[(c + round) % base.length];
          const me = owner();
          if (acquired(await store.acquire(key, me, LONG))) {
            assert.ok(!holders.has(key), `${key} granted to acquire while ${holders.get(key)} held it`);
            holders.set(key, me);
            singles++;
            await sleep(2);
            holders.delete(key);
            assert.equal(await store.release(key, me), true);
          }
          continue;
        }
        // A subset of 2..5 keys, sorted as the core sends them.
        const size = 2 + ((c + round) % 4);
        const keys = [...new Set(Array.from({ length: size }, (_, i) => base[(c * 3 + round * 5 + i * (1 + (c % 3))) % base.length]))].sort();
        const owners = ownersFor(keys);
        const answer = await store.acquireMany(keys, owners, LONG);
        if (answer === false) {
          refusals++;
          const left = await raw(`SELECT key FROM keel_locks WHERE owner IN (${placeholders(owners.length)})`, owners);
          assert.deepEqual(left, [], "a refused set left some of its keys held");
          continue;
        }
        assertGranted(answer, keys, `caller ${c}, round ${round}`);
        for (const key of keys) assert.ok(!holders.has(key), `${key} granted to a set while ${holders.get(key)} held it`);
        keys.forEach((key, i) => holders.set(key, owners[i]));
        const rows = await lockRows(raw, keys);
        assert.deepEqual(keys.map((k) => rows[k]?.owner), owners, "a granted set's rows are not its owners'");
        grants++;
        await sleep(2);
        for (const key of keys) holders.delete(key);
        for (const [i, key] of keys.entries()) assert.equal(await store.release(key, owners[i]), true);
      }
    };
    await Promise.all(Array.from({ length: 40 }, (_, c) => caller(c)));
    assert.ok(grants > 0 && refusals > 0, `${grants} sets granted, ${refusals} refused: the sets did not contend`);
    assert.ok(singles > 0, "no single acquire got in");
    assert.deepEqual(await raw(`SELECT key FROM keel_locks WHERE key IN (${placeholders(base.length)}) AND owner <> ''`, base), [], "keys left held");
  });

  test("acquireMany (pg): sets over identical keys from 40 connections at once — one wins, in one order whatever the callers'", { timeout: 60_000 }, async () => {
    const { stores, raw } = env();
    for (let round = 0; round < 5; round++) {
      const keys = keySet(`same-${round}`, 6);
      // Half the rows exist (expired), half do not: both ways of locking a key are raced.
      const now = await stores[0].now();
      for (const key of keys.filter((_, i) => i % 2 === 0)) {
        await raw("INSERT INTO keel_locks (key, owner, expires_at) VALUES (?, ?, ?)", [key, "stale", now - 1]);
      }
      const attempts = Array.from({ length: 40 }, () => ownersFor(keys));
      const answers = await Promise.all(attempts.map((owners, i) => stores[i % stores.length].acquireMany(keys, owners, LONG)));
      const winners = answers.flatMap((a, i) => (a === false ? [] : [i]));
      assert.equal(winners.length, 1, `round ${round}: ${winners.length} sets won`);
      for (const a of answers) if (a !== false) assertGranted(a, keys, `round ${round}`);
      const rows = await lockRows(raw, keys);
      assert.deepEqual(keys.map((k) => rows[k]?.owner), attempts[winners[0]], `round ${round}: the rows are not the winner's`);
      for (const [i, key] of keys.entries()) assert.equal(await stores[0].release(key, attempts[winners[0]][i]), true);
    }
  });

  test("acquireMany (pg): a live waiter is never overtaken — a queued row, a real acquireOrWait, and the holder's expiry", { timeout: 60_000 }, async () => {
    const { stores, raw } = env();
    const [store, other] = [stores[0], stores[1]];
    // A waiter the hand-over would serve first, on a key with no row and on a key whose row has
    // expired (its store has not looked yet): the set is refused, and nothing moves.
    const keys = keySet("queued", 3);
    const now = await store.now();
    await raw("INSERT INTO keel_locks (key, owner, expires_at) VALUES (?, ?, ?)", [keys[2], "gone", now - 1]);
    for (const key of [keys[1], keys[2]]) {
      await raw("INSERT INTO keel_locks_waiters (key, owner, ttl_ms, enqueued_at, deadline) VALUES (?, ?, ?, ?, ?)", [key, "queued", LONG, now, now + LONG]);
      const before = await lockRows(raw, keys);
      assert.equal(await store.acquireMany(keys, ownersFor(keys), LONG), false, `${key}: a set overtook a queued waiter`);
      assert.deepEqual(await lockRows(raw, keys), before, `${key}: a refused set changed rows`);
      const [w] = await raw("SELECT granted_at FROM keel_locks_waiters WHERE key = ? AND owner = 'queued'", [key]);
      assert.equal(w.granted_at, null, `${key}: the refused set changed the waiter`);
      await raw("DELETE FROM keel_locks_waiters WHERE key = ?", [key]);
    }
    // A waiter whose deadline has passed is no waiter.
    await raw("INSERT INTO keel_locks_waiters (key, owner, ttl_ms, enqueued_at, deadline) VALUES (?, ?, ?, ?, ?)", [keys[1], "late", LONG, now - 10, now - 1]);
    const owners = ownersFor(keys);
    assertGranted(await store.acquireMany(keys, owners, LONG), keys, "a lapsed waiter");
    for (const [i, key] of keys.entries()) assert.equal(await store.release(key, owners[i]), true);
    await raw("DELETE FROM keel_locks_waiters WHERE key = ?", [keys[1]]);

    // A real waiter: the holder's release hands the key to it, not to a set.
    const set = keySet("waiter", 2);
    const holder = owner();
    assert.ok(acquired(await store.acquire(set[0], holder, LONG)));
    const waiter = owner();
    const waiting = other.acquireOrWait(set[0], waiter, LONG, 20_000, 60_000);
    await queuedFor(raw, set[0]);
    assert.equal(await store.acquireMany(set, ownersFor(set), LONG), false);
    assert.equal(await store.release(set[0], holder), true);
    assert.ok(acquired(await waiting), "the waiter was not handed the key");
    assert.equal(await store.acquireMany(set, ownersFor(set), LONG), false, "a set took the waiter's key");
    assert.equal(await other.release(set[0], waiter), true);

    // The holder's TTL runs out while a waiter is queued: sets hammering the key meanwhile never
    // get it before the waiter does.
    const expiring = keySet("expiry", 2);
    assert.ok(acquired(await store.acquire(expiring[0], holder, BRIEF)));
    const late = owner();
    const waited = other.acquireOrWait(expiring[0], late, LONG, 20_000, 60_000);
    await queuedFor(raw, expiring[0]);
    let settled = false;
    waited.finally(() => (settled = true)).catch(() => {});
    let tries = 0;
    while (!settled) {
      const answer = await store.acquireMany(expiring, ownersFor(expiring), LONG);
      assert.equal(answer, false, "a set took the key before the queued waiter was handed it");
      tries++;
    }
    assert.ok(acquired(await waited), "the waiter was not handed the key at the holder's expiry");
    assert.ok(tries > 1);
    assert.equal(await other.release(expiring[0], late), true);
    await store.close();
    await other.close();
  });

  test("acquireMany (pg): on a table createTable() has not upgraded it answers null and changes nothing", async () => {
    const { pools, raw } = env();
    const table = `many_old_${tag()}`;
    const store = databaseLockStore(pools[0], { table });
    await store.createTable();
    try {
      await raw(`DROP FUNCTION "${table}_take_many"`, []);
      const keys = keySet("old", 2);
      const owners = ownersFor(keys);
      assert.equal(await store.acquireMany(keys, owners, LONG), null);
      assert.deepEqual(await lockRows(raw, keys, table), {});
      // Single keys still work; createTable() brings the set back.
      assert.ok(acquired(await store.acquire(keys[0], owners[0], LONG)));
      assert.equal(await store.release(keys[0], owners[0]), true);
      await store.createTable();
      assert.match(schema({ dialect: "postgres", table }), new RegExp(`CREATE OR REPLACE FUNCTION "${table}_take_many"\\(`));
      assertGranted(await store.acquireMany(keys, owners, LONG), keys, "after createTable()");
      for (const [i, key] of keys.entries()) assert.equal(await store.release(key, owners[i]), true);
    } finally {
      await dropTable(raw, "postgres", table);
    }
  });
}

/** Resolves once an ungranted waiter is queued for `key`. */
async function queuedFor(raw, key) {
  const deadline = Date.now() + 10_000;
  while ((await raw("SELECT 1 FROM keel_locks_waiters WHERE key = ? AND granted_at IS NULL", [key])).length === 0) {
    assert.ok(Date.now() < deadline, `nobody queued for ${key}`);
    await sleep(5);
  }
}
