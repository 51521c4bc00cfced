// checkLockStoreUnderLoad and checkHistory from keel-lock/testing, as users get them (the packed
// package): correct stores pass, and stores with a race or reused fences are caught.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryLockStore } from "keel-lock";
import { checkHistory, checkLockStoreUnderLoad } from "keel-lock/testing";
import { brokenStore } from "../stores/lib/js-stores.js";

const shared = (store) => () => store;
const kinds = (report) => [...new Set(report.violations.map((v) => v.kind))].sort();
// A run as long as a number of store calls, not a time: a slow machine takes longer to make them,
// and they show the same. `durationMs` is only a bound far beyond.
const calls = (seed, maxOperations) => ({ seed, maxOperations, durationMs: 120_000 });

test("keel-lock's MemoryLockStore passes under load", async () => {
  const report = await checkLockStoreUnderLoad(shared(new MemoryLockStore()), calls(1, 15_000));
  assert.deepEqual(report.violations, []);
  assert.equal(report.ok, true);
  assert.ok(report.grants > 100 && report.operations > report.grants, `${report.grants} grants, ${report.operations} operations`);
});

test("a correct store written in JS passes under load", async () => {
  const report = await checkLockStoreUnderLoad(shared(brokenStore([])), calls(2, 15_000));
  assert.deepEqual(report.violations, []);
  assert.ok(report.grants > 100);
});

test("a get-then-set store is caught: two holders at once", async () => {
  const report = await checkLockStoreUnderLoad(shared(brokenStore(["get-then-set"])), calls(3, 6_000));
  assert.equal(report.ok, false);
  assert.ok(kinds(report).includes("mutual_exclusion"), JSON.stringify(kinds(report)));
  const v = report.violations.find((x) => x.kind === "mutual_exclusion");
  assert.ok(v.events.length >= 2 && /two certainly valid leases/.test(v.message), v.message);
});

test("a store that reuses fences is caught", async () => {
  const report = await checkLockStoreUnderLoad(shared(brokenStore(["fence-reused"])), calls(4, 6_000));
  assert.deepEqual(kinds(report), ["fence_order"]);
});

test("owner-blind release and a store that never expires are caught", async () => {
  const blind = await checkLockStoreUnderLoad(shared(brokenStore(["release-any-owner"])), calls(5, 6_000));
  assert.ok(kinds(blind).includes("non_owner_succeeded"), JSON.stringify(kinds(blind)));
  // Refused while certainly free needs an abandoned lease's TTL (200 ms) to pass: 12,000 calls
  // take half a second or more (8 clients, at most 3 calls a round, and but for a stranger's
  // call a round pauses a timer's millisecond or more).
  const forever = await checkLockStoreUnderLoad(shared(brokenStore(["never-expires"])), calls(6, 12_000));
  assert.ok(kinds(forever).includes("refused_while_free"), JSON.stringify(kinds(forever)));
});

test("each client gets its own store from makeStore(i)", async () => {
  const made = [];
  const store = brokenStore([]);
  await checkLockStoreUnderLoad((i) => (made.push(i), store), { clients: 3, durationMs: 50 });
  assert.deepEqual(made, [0, 1, 2]);
});

test("checkHistory: hand-made histories, and bad input is a TypeError or RangeError", () => {
  const ev = (owner, type, t0, extra = {}) => ({ key: "k", owner, type, op: "acquire", t0, ...extra });
  const overlap = [
    ev("a", "invoke", 0, { ttlMs: 1000, immediate: true }),
    ev("a", "ok", 1, { fence: 1 }),
    ev("b", "invoke", 10, { ttlMs: 1000, immediate: true }),
    ev("b", "ok", 11, { fence: 2 }),
  ];
  const report = checkHistory(overlap);
  assert.equal(report.ok, false);
  assert.deepEqual(report.violations.map((v) => v.kind), ["mutual_exclusion"]);
  assert.deepEqual(report.violations[0].events.sort(), [0, 1, 2, 3]);
  // With a release in between, the same grants are fine.
  const fine = [...overlap.slice(0, 2), { key: "k", owner: "a", type: "invoke", op: "release", t0: 5 }, { key: "k", owner: "a", type: "ok", op: "release", t0: 6 }, ...overlap.slice(2)];
  assert.equal(checkHistory(fine).ok, true);
  // Shared holds: two permits of two at once pass; a third is over the limit; a read lock
  // (shared, no limit) beside a lock is not.
  const permit = (owner, t0, fence, extra = {}) => [
    ev(owner, "invoke", t0, { ttlMs: 1000, immediate: true, limit: 2, ...extra }),
    ev(owner, "ok", t0 + 1, { fence }),
  ];
  const two = [...permit("p1", 0, 1), ...permit("p2", 10, 2)];
  assert.equal(checkHistory(two).ok, true, JSON.stringify(checkHistory(two).violations));
  assert.deepEqual(checkHistory([...two, ...permit("p3", 20, 3)]).violations.map((v) => v.kind), ["over_limit"]);
  assert.deepEqual(checkHistory([...two, ...permit("p3", 20, 3, { limit: 3 })]).violations.map((v) => v.kind), ["limit_mismatch"]);
  const readerBesideWriter = [...overlap.slice(0, 2), ev("r", "invoke", 10, { ttlMs: 1000, immediate: true, shared: true }), ev("r", "ok", 11, { fence: 2 })];
  assert.deepEqual(checkHistory(readerBesideWriter).violations.map((v) => v.kind), ["mutual_exclusion"]);
  assert.throws(() => checkHistory([ev("p", "invoke", 0, { weight: 3, limit: 2 })]), TypeError);
  assert.throws(() => checkHistory([ev("p", "invoke", 0, { weight: 2 })]), TypeError);
  assert.throws(() => checkHistory("nope"), TypeError);
  assert.throws(() => checkHistory([{ type: "bogus", t0: 1 }]), TypeError);
  assert.throws(() => checkHistory([{ type: "ok", t0: Number.NaN }]), TypeError);
  assert.throws(() => checkHistory([], { leaseToleranceMs: -1 }), RangeError);
});

test("checkHistory: sets of keys and leaders, as the fault suite records them", () => {
  const on = (key, owner, type, t0, extra = {}) => ({ key, owner, type, op: "acquire", t0, ...extra });
  // One set answered yes on one key and no on the other: not all or nothing.
  const partial = [
    { key: "", owner: "s", type: "set", keys: ["a", "b"], t0: 0 },
    on("a", "s", "invoke", 0, { ttlMs: 1000, immediate: true }),
    on("b", "s", "invoke", 0, { ttlMs: 1000, immediate: true }),
    on("a", "s", "ok", 1, { fence: 1 }),
    on("b", "s", "fail", 1),
  ];
  assert.deepEqual(checkHistory(partial).violations.map((v) => v.kind), ["partial_set"]);
  const whole = [...partial.slice(0, 4), on("b", "s", "ok", 1, { fence: 1 })];
  assert.equal(checkHistory(whole).ok, true, JSON.stringify(checkHistory(whole).violations));
  // Two campaigns answered within each other's term: two leaders.
  const campaign = (owner, t0, fence) => [
    on("k", owner, "invoke", t0, { op: "campaign", ttlMs: 1000 }),
    on("k", owner, "ok", t0 + 1, { op: "campaign", fence }),
  ];
  const kinds = checkHistory([...campaign("x", 0, 1), ...campaign("y", 10, 2)]).violations.map((v) => v.kind);
  assert.ok(kinds.includes("two_leaders"), kinds.join(", "));
  // An observer told an older leader after a newer one.
  const told = (t0, fence) => ({ key: "k", owner: "o", type: "leader", t0, fence });
  assert.deepEqual(checkHistory([told(0, null), told(5, 2), told(9, 1)]).violations.map((v) => v.kind), ["observe_order"]);
  assert.equal(checkHistory([told(0, null), told(5, 1), told(9, null), told(12, 2)]).ok, true);
  assert.throws(() => checkHistory([{ type: "set", keys: "a,b", t0: 0 }]), TypeError);
  assert.throws(() => checkHistory([{ type: "set", keys: [], t0: 0 }]), TypeError);
  assert.throws(() => checkHistory([{ type: "set", keys: ["a", 2], t0: 0 }]), TypeError);
  assert.throws(() => checkHistory([told(0, "2")]), TypeError);
  assert.throws(() => checkHistory([told(0, -1)]), TypeError);
  assert.throws(() => checkHistory([{ type: "invoke", op: "elect", t0: 0 }]), TypeError);
});

test("checkLockStoreUnderLoad rejects unusable arguments", async () => {
  await assert.rejects(checkLockStoreUnderLoad("store"), TypeError);
  await assert.rejects(checkLockStoreUnderLoad(() => ({}), { clients: 0 }), RangeError);
  await assert.rejects(checkLockStoreUnderLoad(() => ({}), { durationMs: Infinity }), RangeError);
});
