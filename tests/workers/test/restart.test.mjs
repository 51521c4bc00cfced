// A lock held across a restart of the runtime (storage persisted to a temp dir) is still held,
// and still expires at its original deadline.
import { after, it } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { start } from "../harness.mjs";

const dir = mkdtempSync(join(tmpdir(), "keel-persist-"));
after(() => rmSync(dir, { recursive: true, force: true }));

it("a held lock survives a restart and keeps its deadline", async () => {
  const key = `restart:${crypto.randomUUID()}`;
  const ttl = 15_000; // long enough that a restart on a loaded machine still lands before the deadline
  let w = await start({ persist: dir });
  const held = await w.call("main", "/hold", { key, ttl });
  assert.equal(held.acquired, true);
  assert.ok(Number.isSafeInteger(held.fence), `fence ${held.fence}`);
  const before = await w.call("main", "/state", { key });
  assert.equal(before.isLocked, true);
  const deadline = before.snapshot.rows[0].expiresAt;
  await w.dispose();

  w = await start({ persist: dir });
  try {
    const afterRestart = await w.call("main", "/state", { key });
    assert.equal(afterRestart.snapshot.rows[0]?.expiresAt, deadline, "deadline changed across the restart");
    assert.ok(afterRestart.snapshot.now < deadline, "restart took longer than the TTL; cannot judge");
    assert.equal(afterRestart.isLocked, true);
    assert.equal(afterRestart.acquiredByOther, false, "another caller took the lock after the restart");
    const restored = await w.call("main", "/restore", { serialized: held.serialized });
    assert.equal(restored.isLocked, true);
    assert.equal(restored.fence, held.fence, "the serialized lock carries its fence");

    // Poll until the object's clock says the lock is free: that must not be before the deadline.
    let state = afterRestart;
    while (state.isLocked) {
      await new Promise((r) => setTimeout(r, 100));
      state = await w.call("main", "/state", { key });
    }
    assert.ok(state.snapshot.now >= deadline, `freed at ${state.snapshot.now}, before the deadline ${deadline}`);

    // The fence counter survived the restart and the row's expiry.
    // Waits: the last /state above took the freed key for 100 ms (its acquiredByOther probe).
    const next = await w.call("main", "/hold", { key, ttl: 1_000, timeout: 5_000 });
    assert.equal(next.acquired, true);
    assert.ok(next.fence > held.fence, `fence ${next.fence} after a restart, not above ${held.fence}`);
  } finally {
    await w.dispose();
  }
});
