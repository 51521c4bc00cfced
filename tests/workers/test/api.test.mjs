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
  it("conformance kit (checkLockStore) passes", async () => {
    const results = await w.call("main", "/conformance");
    assert.ok(results.length >= 5, `only ${results.length} properties ran`);
    const failed = results.filter((r) => !r.ok);
    assert.deepEqual(failed, [], JSON.stringify(failed));
  });
});
