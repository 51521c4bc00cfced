// keel-lock/testing itself, from the packed tarball: its API, and that it CATCHES broken stores
// — each deliberate flaw must fail exactly the properties it breaks, and nothing else — while
// the memory store and a correct JS store pass. Without this file the kit would prove nothing.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { inspect } from "node:util";
import { before, describe, test } from "node:test";
import { MemoryLockStore } from "keel-lock";
import { checkLockStore, lockStoreResults, LockStoreConformanceError } from "keel-lock/testing";
import * as testingModule from "keel-lock/testing";
import { brokenStore, jsMapStore, racyRedisStore } from "./lib/js-stores.js";
import { installedKeelLock } from "./lib/installed.js";
import { useRedis } from "./lib/redis-fixture.js";

// The core's properties (src/conformance/), in the order it runs them.
const PROPERTIES = [
  "acquire_is_exclusive",
  "concurrent_acquires_have_one_winner",
  "concurrent_acquires_of_expired_key_have_one_winner",
  "release_requires_owner",
  "extend_requires_owner",
  "released_key_is_free",
  "expired_key_is_free",
  "extend_after_expiry_fails",
  "late_release_keeps_new_holder",
  "extend_pushes_expiry_out",
  "inspection_agrees",
  "keys_are_independent",
  "shared_holds_stay_within_the_limit",
  "each_permit_is_its_own_lease",
  "shared_and_exclusive_holds_exclude",
  "a_second_limit_is_refused",
  "shared_fences_increase",
  "nobody_passes_a_queued_waiter",
  "several_keys_all_or_nothing",
  "opposite_order_sets_complete",
  "sets_taken_in_one_step_are_atomic",
  "inspect_agrees_with_the_holds",
  "metadata_is_kept_per_hold",
  "fences_increase",
  // The kit's own, in JS: watch reports through a callback.
  "watch_reports_every_change_in_order",
];
// The ones a store without shared holds (no acquireShared) answers as not applicable.
const SHARED = PROPERTIES.filter((p) => p.includes("shared") || p.includes("permit") || p.includes("limit") || p.startsWith("nobody"));

const failedOf = (results) => results.filter((r) => !r.ok).map((r) => r.property).sort();

test("keel-lock/testing is the packed tarball's copy, exported by the package's exports map", () => {
  const { entry, root, isCopy } = installedKeelLock();
  assert.ok(isCopy, `keel-lock/testing resolved to ${entry}, not a copy installed from the tarball`);
  const manifest = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
  assert.deepEqual(manifest.exports["./testing"], { types: "./testing.d.ts", default: "./testing.js" });
  for (const file of ["testing.js", "testing.d.ts"]) assert.ok(manifest.files.includes(file), `${file} not in files`);
  assert.deepEqual(Object.keys(testingModule).sort(), [
    "LockStoreConformanceError",
    "checkHistory",
    "checkLockStore",
    "checkLockStoreUnderLoad",
    "lockStoreResults",
  ]);
});

describe("stores that are locks pass", () => {
  test("MemoryLockStore: every property holds; checkLockStore resolves the results", async () => {
    const results = await checkLockStore(new MemoryLockStore());
    assert.deepEqual(results.map((r) => r.property), PROPERTIES);
    for (const r of results) {
      // Its JS face has no acquireSharedOrWait (lock() waits in its queue inside the wasm); it
      // has watch, so every other property applies.
      if (r.property === "nobody_passes_a_queued_waiter") {
        assert.deepEqual([r.ok, r.applicable], [true, false]);
        continue;
      }
      assert.deepEqual(r, { property: r.property, ok: true, applicable: true, message: null });
    }
  });

  test("a correct store written in JS (async, over a Map)", async () => {
    const results = await checkLockStore(jsMapStore());
    assert.deepEqual(failedOf(results), []);
    assert.equal(results.length, PROPERTIES.length);
  });

  test("a store without fences passes, with fences_increase reported as not applicable", async () => {
    const results = await checkLockStore(brokenStore(["no-fences"]));
    assert.deepEqual(failedOf(results), []);
    const fences = results.find((r) => r.property === "fences_increase");
    assert.equal(fences.ok, true);
    assert.equal(fences.applicable, false);
    assert.match(fences.message, /no fences/);
    const others = results.filter(
      (r) =>
        ![
          "fences_increase",
          "sets_taken_in_one_step_are_atomic",
          "inspect_agrees_with_the_holds",
          "metadata_is_kept_per_hold",
          "watch_reports_every_change_in_order",
        ].includes(r.property) && !SHARED.includes(r.property),
    );
    assert.ok(others.every((r) => r.applicable));
    assert.ok(results.filter((r) => SHARED.includes(r.property)).every((r) => r.ok && !r.applicable));
  });

  test("a store that takes a set of keys in one step (acquireMany) is held to it, and passes", async () => {
    const results = await checkLockStore(brokenStore(["many"]));
    assert.deepEqual(failedOf(results), []);
    const many = results.find((r) => r.property === "sets_taken_in_one_step_are_atomic");
    assert.deepEqual([many.ok, many.applicable], [true, true]);
    const without = await checkLockStore(jsMapStore());
    const absent = without.find((r) => r.property === "sets_taken_in_one_step_are_atomic");
    assert.deepEqual([absent.ok, absent.applicable], [true, false]);
    assert.match(absent.message, /no acquireMany/);
  });

  test("a store that pushes holder changes (watch) is held to it, and passes", async () => {
    const results = await checkLockStore(brokenStore(["watch"]));
    assert.deepEqual(failedOf(results), []);
    const watch = results.find((r) => r.property === "watch_reports_every_change_in_order");
    assert.deepEqual([watch.ok, watch.applicable], [true, true]);
    const without = (await checkLockStore(jsMapStore())).find((r) => r.property === watch.property);
    assert.deepEqual([without.ok, without.applicable], [true, false]);
    assert.match(without.message, /no watch/);
  });

  test("lockStoreResults answers the same without throwing", async () => {
    const results = await lockStoreResults(new MemoryLockStore());
    assert.deepEqual(results.map((r) => [r.property, r.ok]), PROPERTIES.map((p) => [p, true]));
  });
});

// flaw(s) → the properties they must break (and only those).
const RACES = [
  "concurrent_acquires_have_one_winner",
  "concurrent_acquires_of_expired_key_have_one_winner",
  "fences_increase",
];
const BROKEN = [
  [["get-then-set"], RACES],
  [["release-any-owner"], ["keys_are_independent", "late_release_keeps_new_holder", "release_requires_owner"]],
  [["extend-any-owner"], ["extend_requires_owner", "keys_are_independent", "late_release_keeps_new_holder"]],
  [["extend-revives"], ["extend_after_expiry_fails", "extend_requires_owner"]],
  [
    ["never-expires"],
    [
      "concurrent_acquires_of_expired_key_have_one_winner",
      "expired_key_is_free",
      "extend_after_expiry_fails",
      "fences_increase",
      "late_release_keeps_new_holder",
    ],
  ],
  [["fence-reused"], ["fences_increase"]],
  [["watch-drops-ends"], ["watch_reports_every_change_in_order"]],
  [["watch-leaks-owner"], ["watch_reports_every_change_in_order"]],
  [["watch-ignores-stop"], ["watch_reports_every_change_in_order"]],
  // Its partial sets stay held; overlapping sets that happen to collide then wait on them, so
  // the deadlock property may fail too.
  [["many-key-by-key"], ["several_keys_all_or_nothing", "sets_taken_in_one_step_are_atomic"], ["opposite_order_sets_complete"]],
  [
    ["get-then-set", "release-any-owner"],
    [...RACES, "keys_are_independent", "late_release_keeps_new_holder", "release_requires_owner"],
  ],
];

describe("broken stores are caught", () => {
  for (const [flaws, expected, mayAlso = []] of BROKEN) {
    test(`${flaws.join(" + ")}: fails ${expected.join(", ")}`, async () => {
      const error = await checkLockStore(brokenStore(flaws)).then(
        () => assert.fail(`checkLockStore accepted a store with ${flaws.join(" + ")}`),
        (e) => e,
      );
      assert.ok(error instanceof LockStoreConformanceError, `rejected with ${error}`);
      assert.ok(error instanceof Error);
      assert.equal(error.name, "LockStoreConformanceError");
      const failed = error.failures.map((f) => f.property);
      assert.deepEqual(failed.filter((p) => !mayAlso.includes(p)).sort(), [...expected].sort());
      assert.equal(error.results.length, PROPERTIES.length);
      for (const f of error.failures) {
        assert.equal(f.ok, false);
        assert.equal(typeof f.message, "string");
        assert.ok(f.message.length > 0);
        // The thrown message names every failed property with what was observed.
        assert.ok(error.message.includes(`${f.property}: ${f.message.split("\n")[0]}`), error.message);
      }
      assert.match(error.message, new RegExp(`${failed.length} of ${PROPERTIES.length} LockStore properties failed`));
      // Printed (as a test runner reports it), the error ends with the failures it names, not
      // with a dump of every result; the arrays stay readable and read-only.
      const printed = inspect(error);
      assert.ok(printed.includes(error.failures.at(-1).message.split("\n")[0]), printed);
      assert.ok(!printed.includes("results:") && !printed.includes("failures:"), printed);
      assert.throws(() => {
        error.failures = [];
      }, TypeError);
    });
  }

  test("the non-atomic store's failure says how many won", async () => {
    const results = await lockStoreResults(brokenStore(["get-then-set"]), { contenders: 20 });
    const race = results.find((r) => r.property === "concurrent_acquires_have_one_winner");
    assert.equal(race.ok, false);
    assert.match(race.message, /^20 concurrent acquires of one free key: (\d+) won, expected exactly 1$/);
    assert.ok(Number(/(\d+) won/.exec(race.message)[1]) > 1);
  });

  test("lockStoreResults reports a broken store's failures without throwing", async () => {
    const results = await lockStoreResults(brokenStore(["release-any-owner"]));
    assert.deepEqual(failedOf(results), ["keys_are_independent", "late_release_keeps_new_holder", "release_requires_owner"]);
  });

  test("a store that throws fails the properties it throws in, with the store's error", async () => {
    const store = jsMapStore();
    store.extend = async () => {
      throw new Error("extend is down");
    };
    const error = await checkLockStore(store).catch((e) => e);
    assert.ok(error instanceof LockStoreConformanceError);
    assert.deepEqual(
      error.failures.map((f) => f.property).sort(),
      [
        "extend_after_expiry_fails",
        "extend_pushes_expiry_out",
        "extend_requires_owner",
        "keys_are_independent",
        "late_release_keeps_new_holder",
      ],
    );
    for (const f of error.failures) assert.match(f.message, /store\.extend failed: .*extend is down/s);
  });

  test("what is not a store, and bad options, are refused (TypeError / RangeError), not reported", async () => {
    await assert.rejects(checkLockStore({}), TypeError);
    await assert.rejects(checkLockStore(null), TypeError);
    await assert.rejects(lockStoreResults({ acquire() {} }), TypeError);
    await assert.rejects(checkLockStore(new MemoryLockStore(), { contenders: -1 }), RangeError);
    await assert.rejects(checkLockStore(new MemoryLockStore(), "fast"), TypeError);
  });
});

describe("a racy store against a real redis-server is caught", () => {
  let client;
  useRedis({ admin: true, ready: (server) => (client = server.admin) });

  test("GET-then-SET acquire and bare DEL release: the race and both owner checks fail", async () => {
    const error = await checkLockStore(racyRedisStore(client, "racy:"), { shortTtlMs: 300, settleMs: 200 }).catch(
      (e) => e,
    );
    assert.ok(error instanceof LockStoreConformanceError, `not caught: ${error}`);
    assert.deepEqual(error.failures.map((f) => f.property).sort(), [
      "concurrent_acquires_have_one_winner",
      "concurrent_acquires_of_expired_key_have_one_winner",
      "keys_are_independent",
      "late_release_keeps_new_holder",
      "release_requires_owner",
    ]);
  });
});
