// etcdLockStore's watch against a real three-member etcd cluster: every change of a key's
// exclusive holder pushed by an etcd watch, in order, with fences and metadata and no owner token
// (a grant, a hand-over, a force-release, an extend onto a new lease that is no change, an
// expiry, a release), another key whose name starts the same is not told, nothing after stop(),
// a stream cut mid-way resumes from the next revision and misses nothing, and observe() through
// keel-lock sees a leader come and go while polling only once a minute. Every wait for a state
// has a 20 s deadline.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { observe, setLockStore, lock } from "keel-lock";
import { etcdLockStore } from "../../pkg/stores/etcd.js";
import { freePort, sleep, startEtcdCluster, until } from "./lib/servers.js";

let cluster;
let store;
const LONG = 30_000;
let keyNo = 0;
const freshKey = (name) => `etcd-watch:${process.pid}:${++keyNo}:${name}`;

before(async () => {
  cluster = await startEtcdCluster();
  store = etcdLockStore({ endpoints: cluster.endpoints });
});
after(async () => {
  await cluster?.stop();
});


const plain = (reports) => reports.map((r) => (r && r.held ? { fence: r.fence, held: true, metadata: r.metadata } : r));

test("every holder change in order: grant, hand-over, force-release, expiry, release; not an extend; nothing after stop()", async () => {
  const key = freshKey("changes");
  const reports = [];
  const stop = await store.watch(key, (change) => reports.push(change));
  await store.acquire(`${key}-other`, "someone", LONG, "another key"); // its name starts like key's
  const a = await store.acquire(key, "owner-a", LONG, "holder a");
  const waiting = store.acquireOrWait(key, "owner-b", LONG, LONG, 50, "holder b");
  await until("b queued", async () => (await store.inspect(key)).waiting === 1);
  await store.release(key, "owner-a");
  const b = await waiting;
  assert.equal(await store.forceRelease(key), true);
  const c = await store.acquire(key, "owner-c", LONG);
  assert.equal(await store.extend(key, "owner-c", 45_000), true, "an extend onto a new lease");
  assert.equal(await store.extend(key, "owner-c", 1_000), true, "shortened, to be waited out");
  await until("c's hold expired", async () => !(await store.isLocked(key)));
  const d = await store.acquire(key, "owner-d", LONG, "holder d");
  await store.release(key, "owner-d");
  const expected = [
    { fence: a.fence, held: true, metadata: "holder a" },
    { fence: a.fence, held: false },
    { fence: b.fence, held: true, metadata: "holder b" },
    { fence: b.fence, held: false },
    { fence: c.fence, held: true, metadata: null },
    { fence: c.fence, held: false },
    { fence: d.fence, held: true, metadata: "holder d" },
    { fence: d.fence, held: false },
  ];
  await until("every change told", () => reports.length >= expected.length);
  await stop();
  assert.deepEqual(plain(reports), expected);
  for (const r of reports) if (r.held) assert.ok(r.remainingMs > 0 && r.remainingMs <= LONG, `remainingMs ${r.remainingMs}`);
  assert.doesNotMatch(JSON.stringify(reports), /owner-/);
  const told = reports.length;
  await store.acquire(key, "owner-e", LONG);
  await store.release(key, "owner-e");
  await sleep(200);
  assert.equal(reports.length, told, "told after stop()");
});

test("a stream cut mid-way is opened again from the next revision: nothing is missed", async () => {
  const key = freshKey("cut");
  const streams = [];
  const cutting = async (url, init) => {
    const response = await fetch(url, init);
    if (!url.endsWith("/v3/watch")) return response;
    // A body we can break, as a dropped connection would.
    let fail;
    const broken = new Promise((_, reject) => (fail = reject));
    const reader = response.body.getReader();
    const body = new ReadableStream({
      async pull(controller) {
        try {
          const { value, done } = await Promise.race([reader.read(), broken]);
          if (done) controller.close();
          else controller.enqueue(value);
        } catch (error) {
          reader.cancel().catch(() => {});
          controller.error(error);
        }
      },
      cancel: () => reader.cancel(),
    });
    streams.push(() => fail(new TypeError("terminated")));
    return new Response(body, { status: response.status, headers: response.headers });
  };
  const watching = etcdLockStore({ endpoints: cluster.endpoints, fetch: cutting });
  const reports = [];
  const stop = await watching.watch(key, (change) => reports.push(change));
  const first = await store.acquire(key, "o1", LONG, "one");
  await until("the first grant told", () => reports.length === 1);
  streams[0](); // cut
  await store.release(key, "o1"); // while no stream is open, perhaps
  const second = await store.acquire(key, "o2", LONG, "two");
  await until("the changes made around the cut told", () => reports.length >= 3);
  await stop();
  assert.ok(streams.length >= 2, "the watch was opened again");
  assert.deepEqual(plain(reports), [
    { fence: first.fence, held: true, metadata: "one" },
    { fence: first.fence, held: false },
    { fence: second.fence, held: true, metadata: "two" },
  ]);
  await store.release(key, "o2");
});

test("observe, through keel-lock, sees a leader come and go while polling once a minute", async () => {
  setLockStore(store);
  const key = freshKey("observe");
  const controller = new AbortController();
  const seen = [];
  const iterating = (async () => {
    for await (const leader of observe(key, { signal: controller.signal, intervalMs: 60_000 })) seen.push(leader);
  })();
  await until("observe's first look", () => seen.length >= 1);
  const held = lock(key, LONG);
  assert.ok(await held.acquire({ metadata: "leader one" }));
  const fence = held.fence;
  await held.release();
  await until("the leader came and went", () => seen.length >= 3);
  controller.abort();
  await iterating;
  assert.deepEqual(seen, [null, { metadata: "leader one", fence }, null]);
});

test("a watch etcd never creates (no endpoint answers) rejects, and leaves nothing running", async () => {
  const dead = etcdLockStore({ endpoints: [`http://127.0.0.1:${await freePort()}`], timeoutMs: 300 });
  await assert.rejects(dead.watch("k", () => {}), /ECONNREFUSED|fetch failed|did not create/);
  await assert.rejects(dead.watch("k", "not a function"), TypeError);
});
