// keel-lock/etcd inside workerd: the packed store, bundled into a Worker, calls a real
// three-member etcd cluster (started here, on loopback ports) through the Worker's fetch.
// Contenders in two concurrent Worker requests and in Node, on the same key at once, run
// `lock(key).run` waiting by hand-over: a ledger in this process sees every critical section's
// enter and exit and must never see two inside, and the fences it is shown must strictly increase
// in the order the sections ran. `acquireOrWait` inside the Worker waits on etcd's watch stream
// (a streamed fetch response) and is handed the key on release, without polling: its requests
// are counted. Every wait for a state has a 20 s deadline.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { startEtcdWorker } from "../harness.mjs";
import { sleep, startEtcdCluster, until } from "../../stores/lib/servers.js";
import { lock, onLockEvent, setLockStore } from "../../../pkg/node/index.mjs";
import { etcdLockStore } from "../../../pkg/stores/etcd.js";

const LONG = 30_000;
const key = (name) => `workerd:${process.pid}:${name}:${crypto.randomUUID()}`;

/** The protected resource: counts who is inside and checks each entrant's fence against the last. */
function startLedger() {
  const state = { inside: 0, most: 0, entered: 0, fences: [], order: [], decreases: 0 };
  const server = http.createServer(async (req, res) => {
    let body = "";
    for await (const chunk of req) body += chunk;
    const { fence, who } = JSON.parse(body || "{}");
    if (req.url === "/enter") state.enter(fence, who);
    else if (req.url === "/exit") state.exit();
    res.setHeader("content-type", "application/json");
    res.end("{}");
  });
  state.enter = (fence, who) => {
    state.inside += 1;
    state.entered += 1;
    state.most = Math.max(state.most, state.inside);
    if (state.fences.length > 0 && !(fence > state.fences.at(-1))) state.decreases += 1;
    state.fences.push(fence);
    state.order.push(who);
  };
  state.exit = () => {
    state.inside -= 1;
  };
  return new Promise((resolve) => {
    server.listen(0, "127.0.0.1", () => {
      state.url = `http://127.0.0.1:${server.address().port}`;
      state.close = () => new Promise((r) => server.close(r));
      resolve(state);
    });
  });
}


describe("keel-lock/etcd inside workerd", { concurrency: false }, () => {
  let cluster;
  let worker;
  before(async () => {
    cluster = await startEtcdCluster();
    worker = await startEtcdWorker();
  });
  after(async () => {
    await worker?.dispose();
    await cluster?.stop();
  });

  it("contenders in two Worker requests and in Node never overlap; fences strictly increase", async (t) => {
    const ledger = await startLedger();
    try {
      const k = key("contend");
      const perSide = 6;
      // Node holds the key until every Worker contender has queued behind it, so each of those
      // is handed the key by etcd's watch (none finds it free); Node's own contenders then join.
      const holder = etcdLockStore({ endpoints: cluster.endpoints });
      const held = await holder.acquire(k, "node-holder", LONG);
      assert.ok(held && held.fence > 0);
      const body = (label) => ({ endpoints: cluster.endpoints, key: k, runs: perSide, ledgerUrl: ledger.url, label, safetyNetMs: 60_000 });
      const fromWorker = [worker.call("/contend", body("workerA")), worker.call("/contend", body("workerB"))];
      await until("the Worker's contenders queued", async () => (await holder.inspect(k)).waiting === 2 * perSide);
      const via = {};
      const stop = onLockEvent((e) => {
        if (e.type === "granted" && e.key === k) via[e.via] = (via[e.via] ?? 0) + 1;
      });
      setLockStore(etcdLockStore({ endpoints: cluster.endpoints }));
      const fromNode = Array.from({ length: perSide }, (_, i) =>
        lock(k, LONG).run(
          async ({ fence }) => {
            ledger.enter(fence, `node:${i}`);
            await sleep(5);
            ledger.exit();
          },
          { timeout: 120_000 },
        ),
      );
      await until("Node's contenders queued", async () => (await holder.inspect(k)).waiting === 3 * perSide);
      assert.equal(await holder.release(k, "node-holder"), true);
      const [a, b] = await Promise.all(fromWorker);
      const nodeResults = await Promise.all(fromNode);
      stop();
      t.diagnostic(JSON.stringify({ workerA: a, workerB: b, node: via, order: ledger.order.join(" ") }));
      assert.equal(a.ran, perSide);
      assert.equal(b.ran, perSide);
      assert.ok(nodeResults.every(([ran]) => ran === true), "a Node contender did not run");
      assert.equal(ledger.entered, 3 * perSide);
      assert.equal(ledger.most, 1, "two contenders were inside at once");
      assert.equal(ledger.inside, 0);
      assert.ok(ledger.fences.every(Number.isSafeInteger), `fences ${ledger.fences}`);
      assert.equal(ledger.decreases, 0, `fences not strictly increasing: ${ledger.fences}`);
      assert.ok(ledger.fences[0] > held.fence);
      // Every contender queued behind the holder, so each was handed the key by etcd's watch.
      assert.deepEqual(await worker.call("/grants", { key: k }), { "hand-over": 2 * perSide }, "Worker grants");
      // A waited acquisition costs 6 requests (grant, join, take, keep-alive, release, revoke)
      // besides its watch: none is spent asking again. (Each waiter's safety net, a look after a
      // silent minute, stays out of the count.)
      for (const side of [a, b]) {
        const { "/v3/watch": watches = 0, ...rest } = side.requests;
        assert.ok(watches >= perSide, `the Worker's watches: ${JSON.stringify(side.requests)}`);
        assert.equal(Object.values(rest).reduce((x, y) => x + y, 0), 6 * perSide, JSON.stringify(side.requests));
      }
      assert.deepEqual(via, { "hand-over": perSide }, "Node grants");
    } finally {
      await ledger.close();
    }
  });

  it("acquireOrWait in the Worker is handed the key on release by the watch stream, without polling", async () => {
    const k = key("wait");
    const node = etcdLockStore({ endpoints: cluster.endpoints });
    const held = await node.acquire(k, "node-holder", LONG);
    assert.ok(held && held.fence > 0);
    // The waiter's safety net (a look after a silent minute) stays out of the count.
    const waited = worker.call("/wait", { endpoints: cluster.endpoints, key: k, owner: "worker-waiter", safetyNetMs: 60_000 });
    await until("the Worker's waiter queued", async () => (await node.inspect(k)).waiting === 1);
    assert.equal(await node.release(k, "node-holder"), true);
    const { grant, released, requests } = await waited;
    assert.ok(grant && grant.fence > held.fence, `grant ${JSON.stringify(grant)} after fence ${held.fence}`);
    assert.equal(released, true);
    // A waited acquisition: lease grant, the joining transaction, the take, keep-alive, release, revoke,
    // plus the watch stream(s) it waited on.
    const txns = requests["/v3/kv/txn"] ?? 0;
    assert.ok(requests["/v3/watch"] >= 1, `no watch: ${JSON.stringify(requests)}`);
    assert.ok(txns <= 4, `transactions ${txns} (a poller asks again and again): ${JSON.stringify(requests)}`);
    assert.equal(await node.isLocked(k), false);
  });
});
