// Hold metadata and inspect on the Durable Object store in real workerd: the cases in
// workers/inspect.js (one isolate), and leader election across two isolates — two Worker
// scripts bound to one LOCKS namespace campaign for one key, a third request observes.
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { start } from "../harness.mjs";

const uuid = () => crypto.randomUUID();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

describe("hold metadata and inspect on the Durable Object", { concurrency: false }, async () => {
  const w = await start();
  after(() => w.dispose());

  for (const name of await w.call("main", "/inspect-cases")) {
    it(name, async (t) => {
      const { report } = await w.call("main", "/inspect-case", { name });
      if (report) t.diagnostic(JSON.stringify(report));
    });
  }

  it("two isolates campaign for one key: A leads, then B, in queue order, never both, as an observer sees", async () => {
    const key = `leader:${uuid()}`;
    const runId = `${key}:run`;
    // The observer, in worker B's isolate, from before anyone leads until it sees B lead.
    const observed = w.call("other", "/observe", { key, until: "b", intervalMs: 20 });
    // A campaigns from worker A's isolate and, once leading, stays until B is queued behind it.
    const a = w.call("main", "/campaign", { key, runId, metadata: "a", waitFor: 1, holdMs: 300 });
    const deadline = Date.now() + 20_000;
    let info;
    while ((info = await w.call("main", "/inspect", { key })).holders[0]?.metadata !== "a") {
      assert.ok(Date.now() < deadline, `A never led: ${JSON.stringify(info)}`);
      await sleep(10);
    }
    assert.equal(info.waiting, 0, "nobody queued before B campaigns");
    // B campaigns from worker B's isolate: it queues in the object's FIFO behind A.
    const b = w.call("other", "/campaign", { key, runId, metadata: "b", holdMs: 300 });
    const [{ fence: fenceA }, { fence: fenceB }, { seen }] = await Promise.all([a, b, observed]);

    assert.ok(Number.isSafeInteger(fenceA) && fenceB > fenceA, `fences: A ${fenceA}, B ${fenceB}`);
    // The observer's first value may be "nobody" (it started before A led); after that A, then
    // B, with nobody between them: the object granted B in the turn A's release freed the key.
    const leaders = seen[0] === null ? seen.slice(1) : seen;
    assert.deepEqual(leaders, [
      { metadata: "a", fence: fenceA },
      { metadata: "b", fence: fenceB },
    ]);
    // The Counter saw every leader enter and leave: A first, B only after A had left.
    const stats = await w.call("main", "/stats", { runId });
    assert.deepEqual(stats.order, ["a", "b"]);
    assert.deepEqual(stats.fences, [fenceA, fenceB]);
    assert.equal(stats.clashes, 0, "B entered while A's fn ran");
    assert.equal(stats.maxInside, 1);
    assert.equal(stats.inside, 0);
    const end = await w.call("main", "/inspect", { key });
    assert.deepEqual(end, { key, held: false, holders: [], waiting: 0 });
  });

  it("the object pushes every change to an observer in another isolate: a leader gone at once, a force-release, an expiry", async () => {
    const key = `pushed:${uuid()}`;
    const ready = `${key}:ready`;
    // No poll in the test's time (60 s): only what the object pushes, and the expiry the
    // observer looks for when the holder's time runs out, can be seen.
    const observed = w.call("other", "/observe", { key, count: 7, ready, intervalMs: 60_000 });
    const deadline = Date.now() + 20_000;
    while (!(await w.call("main", "/inspect", { key: ready })).held) {
      assert.ok(Date.now() < deadline, "the observer never subscribed");
      await sleep(10);
    }
    const { fences } = await w.call("main", "/leader-changes", { key });
    const { seen } = await observed;
    // The last null is c's 300 ms hold running out, which no store reports.
    assert.deepEqual(seen, [
      null,
      { metadata: "a", fence: fences[0] },
      null,
      { metadata: "b", fence: fences[1] },
      null,
      { metadata: "c", fence: fences[2] },
      null,
    ]);
  });

  it("an observer whose object restarts subscribes again and sees the leader after it", async () => {
    const key = `restarted:${uuid()}`;
    const ready = `${key}:ready`;
    const observed = w.call("other", "/observe", { key, count: 2, ready, intervalMs: 60_000 });
    const deadline = Date.now() + 20_000;
    while (!(await w.call("main", "/inspect", { key: ready })).held) {
      assert.ok(Date.now() < deadline, "the observer never subscribed");
      await sleep(10);
    }
    await w.call("main", "/crash", { key }); // the watch goes with the object's memory
    await sleep(50);
    // c's hold lasts 10 s: the observer, however slow to subscribe again, finds it there.
    const { fences } = await w.call("main", "/leader-changes", { key, lastTtlMs: 10_000 });
    const { seen } = await observed;
    // Subscribed again, it looks: c's hold — or, if the look came before c, one of the three,
    // and never an older one after a newer.
    assert.equal(seen[0], null);
    const i = ["a", "b", "c"].indexOf(seen[1]?.metadata);
    assert.ok(i >= 0, `seen ${JSON.stringify(seen)}`);
    assert.equal(seen[1].fence, fences[i]);
  });
});
