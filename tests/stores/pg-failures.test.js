// keel-lock/sql's Postgres waiting path when the database fails underneath it (a restart: every
// statement times out connecting). No server: a pg-shaped handle whose queries all fail late.
import { test } from "node:test";
import assert from "node:assert/strict";
import { databaseLockStore } from "../../pkg/stores/sql.js";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

test("a wait whose deadline passes while its enqueue is still failing rejects once, and nothing is left unhandled", async () => {
  const unhandled = [];
  const onUnhandled = (reason) => unhandled.push(reason);
  process.on("unhandledRejection", onUnhandled);
  try {
    // Every statement fails 50 ms after it is sent, as a pool does whose server is restarting.
    const db = {
      query: () => new Promise((_, reject) => setTimeout(() => reject(new Error("timeout exceeded when trying to connect")), 50)),
    };
    const store = databaseLockStore(db);
    assert.equal(typeof store.acquireOrWait, "function");
    // The 10 ms deadline fires (and leaving the queue fails) before the enqueue has failed.
    await assert.rejects(store.acquireOrWait("k", "owner-1", 1_000, 10, 1_000), /timeout exceeded/);
    await sleep(200);
    assert.deepEqual(unhandled.map(String), []);
    assert.equal(store.waitingCount, 0);
  } finally {
    process.off("unhandledRejection", onUnhandled);
  }
});
