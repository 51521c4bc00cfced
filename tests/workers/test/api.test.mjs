// The lock API, the conformance kit and bad input, inside a Worker on DurableObjectLockStore.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { start } from "../harness.mjs";

const w = await start();
const cases = await w.call("main", "/suite");

describe("lock API inside workerd on DurableObjectLockStore", { concurrency: false }, () => {
  after(() => w.dispose());
  for (const name of cases) {
    it(name, async () => {
      assert.deepEqual(await w.call("main", "/case", { name }), { ok: true });
    });
  }
  it("conformance kit (checkLockStore) passes, every property applying but the one-step set", async () => {
    const results = await w.call("main", "/conformance");
    assert.equal(results.length, 25, `${results.length} properties ran`);
    const failed = results.filter((r) => !r.ok);
    assert.deepEqual(failed, [], JSON.stringify(failed));
    // The store has inspect (so it keeps metadata) and hands over shared holds; it has no
    // acquireMany (one object per key).
    const notApplicable = results.filter((r) => !r.applicable).map((r) => r.property);
    assert.deepEqual(notApplicable, ["sets_taken_in_one_step_are_atomic"]);
    // It pushes holder changes (watch), which the kit's JS property holds to every change.
    for (const property of ["inspect_agrees_with_the_holds", "metadata_is_kept_per_hold", "watch_reports_every_change_in_order"]) {
      assert.ok(results.some((r) => r.property === property && r.ok && r.applicable), `${property} did not apply`);
    }
  });
  it("lock events and keel-lock/otel spans: a waiter handed the key by the object, then a refusal", async () => {
    const { told, spans } = await w.call("main", "/events", { key: `events:${crypto.randomUUID()}` });
    const granted = told.filter((e) => e.type === "granted");
    assert.deepEqual(granted.map((e) => e.via), ["immediate", "hand-over", "immediate", "immediate"]);
    assert.ok(told.every((e) => e.store === "DurableObjectLockStore"), JSON.stringify(told));
    assert.equal(told.filter((e) => e.type === "refused").length, 1, JSON.stringify(told));
    const runs = spans.filter((s) => s.name === "keel-lock.run");
    assert.deepEqual(runs.map((s) => s.outcome).sort(), ["ran", "ran", "refused"]);
    const handed = runs.find((s) => s.via === "hand-over");
    assert.ok(Number.isSafeInteger(handed?.fence), JSON.stringify(spans));
    assert.equal(spans.filter((s) => s.name === "keel-lock.release").length, 2);
  });
});
