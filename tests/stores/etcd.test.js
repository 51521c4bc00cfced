// etcdLockStore against a real three-member etcd cluster on loopback ports (Debian's etcd-server,
// started here with a 500 ms election timeout): the contract by hand, how ttlMs maps onto whole-
// second leases, extend by keep-alive and by a new lease, fences strictly increasing (also across
// the leader's SIGKILL and a re-election, judged by state), mutual exclusion between many store
// handles and through lock().run, failover to the next endpoint, a write whose reply was lost
// read back and never blindly resent, username/password auth (no secret in any error) and an
// endpoint that is not etcd. The conformance kit runs against the store in conformance.test.js.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import http from "node:http";
import { after, before, describe, test } from "node:test";
import { lock, setLockStore } from "keel-lock";
import { etcdLockStore, etcdLockKeys, leaseSeconds, EtcdStoreError, DEFAULT_PREFIX } from "../../pkg/stores/etcd.js";
import { etcdCall, freePort, sleep, startEtcdCluster, until } from "./lib/servers.js";

let cluster;
const b64 = (text) => Buffer.from(text, "utf8").toString("base64");
let keyNo = 0;
const freshKey = (name) => `etcd-test:${process.pid}:${++keyNo}:${name}`;

before(async () => {
  cluster = await startEtcdCluster();
});
after(async () => {
  await cluster?.stop();
});

/** The raw key-value of `name` (an etcd key) through a member's gateway, or null. */
async function rawKv(name) {
  const reply = await etcdCall(cluster.endpoints[0], "/v3/kv/range", { key: b64(name) });
  return reply.kvs?.[0] ?? null;
}

/** A lease's { ttl, granted } (ttl −1 once it is gone). */
async function leaseOf(id) {
  const reply = await etcdCall(cluster.endpoints[0], "/v3/lease/timetolive", { ID: id });
  return { ttl: Number(reply.TTL), granted: Number(reply.grantedTTL ?? 0) };
}

/** Polls `probe` until it answers truthy; fails after `ms` (a deadline, not a verdict on timing). */

describe("input", () => {
  test("options are checked when the store is made", () => {
    assert.throws(() => etcdLockStore(), TypeError);
    assert.throws(() => etcdLockStore({}), /endpoints must be a non-empty array/);
    assert.throws(() => etcdLockStore({ endpoints: [] }), TypeError);
    assert.throws(() => etcdLockStore({ endpoints: ["127.0.0.1:2379"] }), /is not a URL|must be http/);
    assert.throws(() => etcdLockStore({ endpoints: ["ftp://h:1"] }), /must be http:\/\/ or https:\/\//);
    assert.throws(() => etcdLockStore({ endpoints: ["http://h:1?x=1"] }), /no query/);
    const withSecret = (() => {
      try {
        etcdLockStore({ endpoints: ["http://root:hunter2@h:1"] });
      } catch (error) {
        return error;
      }
    })();
    assert.ok(withSecret instanceof TypeError);
    assert.doesNotMatch(withSecret.message, /hunter2/);
    assert.throws(() => etcdLockStore({ endpoints: "http://h:1", auth: { username: "u" } }), /auth must be/);
    assert.throws(() => etcdLockStore({ endpoints: "http://h:1", prefix: 1 }), /prefix must be a string/);
    assert.throws(() => etcdLockStore({ endpoints: "http://h:1", fetch: "no" }), /fetch must be a function/);
    assert.throws(() => etcdLockStore({ endpoints: "http://h:1", timeoutMs: 0 }), RangeError);
    const store = etcdLockStore({ endpoints: "http://h:1/proxy/" });
    assert.deepEqual(store.endpoints, ["http://h:1/proxy"]);
    assert.equal(store.prefix, DEFAULT_PREFIX);
  });

  test("arguments are checked before any request", async () => {
    let requests = 0;
    const store = etcdLockStore({ endpoints: "http://h:1", fetch: async () => (requests++, new Response("{}")) });
    await assert.rejects(store.acquire("", "o", 1000), TypeError);
    await assert.rejects(store.acquire("k", "", 1000), TypeError);
    await assert.rejects(store.acquire("k", "o", 0), RangeError);
    await assert.rejects(store.acquire("k", "o", 1.5), RangeError);
    await assert.rejects(store.acquire("k", "o", 1000, 7), TypeError);
    await assert.rejects(store.acquire("k", "o", 1000, "x".repeat(1025)), RangeError);
    await assert.rejects(store.release("k", 1), TypeError);
    await assert.rejects(store.extend("k", "o", -1), RangeError);
    await assert.rejects(store.isLocked(null), TypeError);
    assert.equal(requests, 0);
  });
});

describe("the contract on a three-member cluster", () => {
  let store;
  before(() => {
    store = etcdLockStore({ endpoints: cluster.endpoints });
  });

  test("acquire is exclusive; release and extend only by the owner; the key layout", async () => {
    const key = freshKey("basic");
    const names = etcdLockKeys(key);
    assert.deepEqual(store.keys(key), names);
    const got = await store.acquire(key, "alice", 30_000, "host a");
    assert.ok(got && Number.isInteger(got.fence) && got.fence > 0, `granted ${JSON.stringify(got)}`);
    assert.equal(await store.acquire(key, "bob", 30_000), false);
    assert.equal(await store.acquire(key, "alice", 30_000), false, "not re-entrant");
    const kv = await rawKv(names.lock);
    assert.equal(Buffer.from(kv.value, "base64").toString(), "alice");
    assert.equal(Number(kv.create_revision), got.fence, "the fence is the put's revision");
    assert.equal(Buffer.from((await rawKv(names.metadata)).value, "base64").toString(), "host a");
    assert.equal((await rawKv(names.metadata)).lease, kv.lease, "metadata lives on the hold's lease");

    assert.equal(await store.isLocked(key), true);
    const left = await store.remainingTime(key);
    assert.ok(left > 0 && left <= 30_000 && left % 1000 === 0, `remainingTime ${left}`);
    const seen = await store.inspect(key);
    const shown = seen.holders[0]?.remainingMs;
    // Whole seconds, read again: the same, or a second less if one passed in between.
    assert.ok(shown === left || shown === left - 1000, `inspect's remainingMs ${shown} after remainingTime ${left}`);
    assert.deepEqual(seen, { holders: [{ metadata: "host a", fence: got.fence, remainingMs: shown }], waiting: 0 });

    assert.equal(await store.release(key, "bob"), false);
    assert.equal(await store.extend(key, "bob", 30_000), false);
    assert.equal(await store.isLocked(key), true);
    assert.equal(await store.extend(key, "alice", 30_000), true);
    assert.equal(await store.release(key, "alice"), true);
    assert.equal(await store.release(key, "alice"), false, "a second release");
    assert.equal(await store.extend(key, "alice", 30_000), false, "extend after release");
    assert.equal(await store.isLocked(key), false);
    assert.equal(await store.remainingTime(key), null);
    assert.deepEqual(await store.inspect(key), { holders: [], waiting: 0 });
    assert.equal(await rawKv(names.metadata), null, "release deletes the metadata too");
    // The released hold's lease is revoked (not awaited by release: wait for the state).
    await until("the released hold's lease revoked", async () => (await leaseOf(kv.lease)).ttl === -1);
  });

  test("keys are one-to-one names: `/` and `%` are escaped, so no key meets another's metadata", async () => {
    const key = freshKey("a");
    assert.equal(etcdLockKeys("a/m%", "p/").lock, "p/a%2Fm%25");
    assert.ok(await store.acquire(key, "o1", 30_000, "meta"));
    assert.ok(await store.acquire(`${key}/m`, "o2", 30_000), "the key named like a's metadata is its own");
    assert.deepEqual((await store.inspect(key)).holders.map((h) => h.metadata), ["meta"]);
    const other = etcdLockStore({ endpoints: cluster.endpoints, prefix: "elsewhere/" });
    assert.ok(await other.acquire(key, "o3", 30_000), "another prefix does not share the lock");
    for (const [s, k, o] of [[store, key, "o1"], [store, `${key}/m`, "o2"], [other, key, "o3"]]) assert.equal(await s.release(k, o), true);
  });

  test("ttlMs maps onto whole-second leases, rounded up: a 1,500 ms lock is a 2 s lease", async () => {
    assert.deepEqual([1, 999, 1000, 1001, 1500, 2000, 60_000].map(leaseSeconds), [1, 1, 1, 2, 2, 2, 60]);
    // What the store asks etcd for, and what etcd grants, seen on the wire (no timing involved).
    const grants = [];
    const watching = async (url, init) => {
      const response = await fetch(url, init);
      if (url.endsWith("/v3/lease/grant")) {
        const reply = await response.clone().json();
        grants.push([JSON.parse(init.body).TTL, Number(reply.TTL)]);
      }
      return response;
    };
    const seen = etcdLockStore({ endpoints: cluster.endpoints, fetch: watching });
    for (const [ttlMs, seconds] of [[1500, 2], [1, 1], [2001, 3], [60_000, 60]]) {
      const key = freshKey(`ttl-${ttlMs}`);
      grants.length = 0;
      assert.ok(await seen.acquire(key, "o", ttlMs));
      // This cluster's minimum TTL is 1 s (1.5 election timeouts of 500 ms, rounded up).
      assert.deepEqual(grants, [[seconds, seconds]], `${ttlMs} ms`);
      await seen.release(key, "o");
    }
    const long = freshKey("ttl-read");
    assert.ok(await store.acquire(long, "o", 60_000));
    assert.equal((await leaseOf((await rawKv(etcdLockKeys(long).lock)).lease)).granted, 60);
    const left = await store.remainingTime(long);
    assert.ok(left > 0 && left <= 60_000 && left % 1000 === 0, `remainingTime ${left} of a 60 s lease`);
    await store.release(long, "o");
    // A 1,500 ms lock expires by etcd's clock: held now, gone once its lease ran out.
    const key = freshKey("expires");
    assert.ok(await store.acquire(key, "o", 1500));
    assert.equal(await store.isLocked(key), true);
    await until("the 1,500 ms lock expired", async () => !(await store.isLocked(key)), 15_000);
    assert.equal(await store.remainingTime(key), null);
    assert.equal(await store.extend(key, "o", 1500), false, "extend of an expired hold");
    assert.equal(await store.release(key, "o"), false, "release of an expired hold");
    assert.ok(await store.acquire(key, "o2", 30_000), "an expired key is free");
    await store.release(key, "o2");
  });

  test("extend with the lease's TTL keeps the lease alive; another TTL moves the hold to a new lease", async () => {
    const key = freshKey("extend");
    const { lock, metadata } = etcdLockKeys(key);
    const got = await store.acquire(key, "o", 5_000, "kept");
    const first = (await rawKv(lock)).lease;
    assert.equal(await store.extend(key, "o", 4_500), true, "5 s asked again");
    assert.equal((await rawKv(lock)).lease, first, "same TTL: the same lease, kept alive");
    assert.equal(await store.extend(key, "o", 20_000), true);
    const moved = await rawKv(lock);
    assert.notEqual(moved.lease, first, "another TTL: a new lease");
    assert.equal((await leaseOf(moved.lease)).granted, 20);
    assert.equal(Number(moved.create_revision), got.fence, "the fence is unchanged by extend");
    assert.equal((await rawKv(metadata)).lease, moved.lease, "metadata moved with it");
    assert.deepEqual((await store.inspect(key)).holders.map((h) => [h.metadata, h.fence]), [["kept", got.fence]]);
    await until("the old lease revoked", async () => (await leaseOf(first)).ttl === -1);
    // A store that did not grant the lease asks etcd for its TTL, and keeps it alive.
    const other = etcdLockStore({ endpoints: [...cluster.endpoints].reverse() });
    assert.equal(await other.extend(key, "o", 20_000), true);
    assert.equal((await rawKv(lock)).lease, moved.lease);
    assert.equal(await other.extend(key, "stranger", 20_000), false);
    assert.equal(await store.release(key, "o"), true);
  });

  test("forceRelease ends the hold whoever holds it; the old holder's extend then fails", async () => {
    const key = freshKey("force");
    assert.equal(await store.forceRelease(key), false, "nothing to free");
    assert.ok(await store.acquire(key, "holder", 30_000, "m"));
    const { lease } = await rawKv(etcdLockKeys(key).lock);
    assert.equal(await store.forceRelease(key), true);
    assert.equal(await store.isLocked(key), false);
    assert.equal((await leaseOf(lease)).ttl, -1, "the holder's lease is revoked");
    assert.equal(await store.extend(key, "holder", 30_000), false);
    assert.equal(await store.release(key, "holder"), false);
    assert.equal(await rawKv(etcdLockKeys(key).metadata), null);
  });

  test("fences rise strictly: per key across release and expiry, and across keys (one cluster revision)", async () => {
    const fences = [];
    const key = freshKey("fences");
    for (let i = 0; i < 5; i++) {
      const got = await store.acquire(key, `o${i}`, 30_000);
      fences.push(got.fence);
      assert.equal(await store.release(key, `o${i}`), true);
    }
    const brief = await store.acquire(key, "brief", 1000);
    fences.push(brief.fence);
    await until("the brief hold expired", async () => !(await store.isLocked(key)));
    fences.push((await store.acquire(key, "after", 30_000)).fence);
    await store.release(key, "after");
    fences.push((await store.acquire(freshKey("other"), "x", 30_000)).fence);
    for (let i = 1; i < fences.length; i++) assert.ok(fences[i] > fences[i - 1], `fences ${fences.join(", ")}`);
  });
});

describe("mutual exclusion", () => {
  test("24 rounds of 8 store handles racing for one key: exactly one wins each round", async () => {
    const handles = Array.from({ length: 8 }, (_, i) => {
      const endpoints = cluster.endpoints.map((_, j) => cluster.endpoints[(i + j) % cluster.endpoints.length]);
      return etcdLockStore({ endpoints });
    });
    const key = freshKey("race");
    let last = 0;
    for (let round = 0; round < 24; round++) {
      const answers = await Promise.all(handles.map((h, i) => h.acquire(key, `r${round}h${i}`, 30_000)));
      const winners = answers.map((a, i) => (a ? i : -1)).filter((i) => i >= 0);
      assert.equal(winners.length, 1, `round ${round}: ${winners.length} winners`);
      const fence = answers[winners[0]].fence;
      assert.ok(fence > last, `round ${round}: fence ${fence} after ${last}`);
      last = fence;
      // Losers cannot release it; the winner can.
      assert.equal(await handles[(winners[0] + 1) % 8].release(key, `r${round}h${(winners[0] + 1) % 8}`), false);
      assert.equal(await handles[winners[0]].release(key, `r${round}h${winners[0]}`), true);
    }
  });

  test("lock().run with timeouts: 12 callers over 3 handles, every section runs, never two at once", async () => {
    const handles = cluster.endpoints.map((_, i) => etcdLockStore({ endpoints: [cluster.endpoints[i]] }));
    const key = freshKey("sections");
    let inside = 0;
    let overlaps = 0;
    let ran = 0;
    const fences = [];
    // lock() uses the store set last; each caller sets its own handle just before it asks.
    const section = async (h) => {
      setLockStore(handles[h]);
      const [done] = await lock(key, 10_000).run(
        async ({ fence }) => {
          inside++;
          if (inside > 1) overlaps++;
          fences.push(fence);
          await sleep(20);
          inside--;
          ran++;
        },
        { timeout: 60_000, retryDelay: 20 },
      );
      assert.equal(done, true);
    };
    await Promise.all(Array.from({ length: 12 }, (_, i) => section(i % 3)));
    assert.equal(ran, 12);
    assert.equal(overlaps, 0);
    for (let i = 1; i < fences.length; i++) assert.ok(fences[i] > fences[i - 1], `fences in order of entry: ${fences.join(", ")}`);
  });
});

describe("endpoints", () => {
  test("the first endpoint down (nothing listening): every call goes to the next", async () => {
    const dead = `http://127.0.0.1:${await freePort()}`;
    const store = etcdLockStore({ endpoints: [dead, ...cluster.endpoints] });
    const key = freshKey("failover");
    const got = await store.acquire(key, "o", 30_000);
    assert.ok(got);
    assert.equal(await store.isLocked(key), true);
    assert.equal(await store.extend(key, "o", 10_000), true);
    assert.equal(await store.release(key, "o"), true);
  });

  test("only dead endpoints: a clear error naming them, within the call's bound", async () => {
    const dead = [`http://127.0.0.1:${await freePort()}`, `http://127.0.0.1:${await freePort()}`];
    const store = etcdLockStore({ endpoints: dead, timeoutMs: 300 });
    const error = await store.isLocked("k").catch((e) => e);
    assert.ok(error instanceof EtcdStoreError, String(error));
    assert.match(error.message, /no etcd endpoint answered \/v3\/kv\/txn within 900 ms/);
    for (const url of dead) assert.ok(error.message.includes(url), error.message);
  });

  test("an acquire whose reply is lost is read back: granted once, never put twice", async () => {
    // The fetch forwards the first write transaction, then throws as if the reply was lost.
    let txns = 0;
    let lose = true;
    const fetchLosing = async (url, init) => {
      const response = await fetch(url, init);
      if (url.endsWith("/v3/kv/txn") && JSON.parse(init.body).compare?.length) {
        txns++;
        if (lose) {
          lose = false;
          await response.text();
          throw new TypeError("fetch failed: the reply was lost");
        }
      }
      return response;
    };
    const store = etcdLockStore({ endpoints: cluster.endpoints, fetch: fetchLosing });
    const key = freshKey("lost-reply");
    const got = await store.acquire(key, "o", 30_000);
    assert.ok(got, "the applied transaction is found and answered as a grant");
    assert.equal(txns, 1, "the transaction was not sent again");
    assert.equal(Number((await rawKv(etcdLockKeys(key).lock)).create_revision), got.fence);
    assert.equal(await store.release(key, "o"), true);
  });

  test("an acquire whose request is lost: its lease is revoked before a second try with a new one", async () => {
    const revoked = [];
    let lose = true;
    const fetchDropping = async (url, init) => {
      if (url.endsWith("/v3/kv/txn") && JSON.parse(init.body).compare?.length && lose) {
        lose = false;
        throw new TypeError("fetch failed: connection reset");
      }
      if (url.endsWith("/v3/lease/revoke")) revoked.push(JSON.parse(init.body).ID);
      return fetch(url, init);
    };
    const store = etcdLockStore({ endpoints: cluster.endpoints, fetch: fetchDropping });
    const key = freshKey("lost-request");
    const got = await store.acquire(key, "o", 30_000);
    assert.ok(got);
    assert.equal(revoked.length, 1, "the first attempt's lease was revoked");
    assert.notEqual((await rawKv(etcdLockKeys(key).lock)).lease, revoked[0], "held on the second attempt's lease");
    assert.equal(await store.release(key, "o"), true);
  });

  test("release and extend whose replies are lost: read back, and resent only while the compare still guards them", async () => {
    // `lose(n)`: the next n write transactions are forwarded and their replies thrown away.
    let losing = 0;
    let writes = 0;
    const fetchLosing = async (url, init) => {
      const response = await fetch(url, init);
      if (url.endsWith("/v3/kv/txn") && JSON.parse(init.body).compare?.length) {
        writes++;
        if (losing > 0) {
          losing--;
          await response.text();
          throw new TypeError("fetch failed: the reply was lost");
        }
      }
      return response;
    };
    const store = etcdLockStore({ endpoints: cluster.endpoints, fetch: fetchLosing });
    const key = freshKey("lost-ends");
    const { lock } = etcdLockKeys(key);
    const got = await store.acquire(key, "o", 30_000, "m");
    const before = (await rawKv(lock)).lease;
    // extend to another TTL: the move applied, its reply lost; found on the new lease, not resent.
    writes = 0;
    losing = 1;
    assert.equal(await store.extend(key, "o", 10_000), true);
    assert.equal(writes, 1);
    const after = await rawKv(lock);
    assert.notEqual(after.lease, before);
    assert.equal(Number(after.create_revision), got.fence);
    // release: applied, reply lost; the key is found gone and the store cannot tell its own delete
    // from an expiry: false (documented), and nothing is resent.
    writes = 0;
    losing = 1;
    assert.equal(await store.release(key, "o"), false);
    assert.equal(writes, 1);
    assert.equal(await store.isLocked(key), false);
  });

  test("an endpoint that is not etcd says so", async () => {
    const server = http.createServer((req, res) => {
      if (req.url.startsWith("/html")) {
        res.writeHead(200, { "content-type": "text/html" });
        res.end("<html><body>hello</body></html>");
      } else if (req.url.startsWith("/json")) {
        res.writeHead(200, { "content-type": "application/json" });
        res.end('{"ok":true}');
      } else {
        res.writeHead(404, { "content-type": "text/plain" });
        res.end("Not Found");
      }
    });
    await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
    const base = `http://127.0.0.1:${server.address().port}`;
    try {
      for (const path of ["", "/html", "/json"]) {
        const store = etcdLockStore({ endpoints: [base + path, ...cluster.endpoints] });
        const error = await store.acquire(freshKey("not-etcd"), "o", 30_000).catch((e) => e);
        assert.ok(error instanceof EtcdStoreError, String(error));
        assert.match(error.message, /is not etcd's v3 JSON gateway/);
        assert.ok(error.message.includes(base + path), error.message);
      }
    } finally {
      server.close();
    }
  });
});

describe("auth", () => {
  let secured;
  const password = "pa55-Secret-9";
  before(async () => {
    // One member with auth on and tokens that lapse after 2 s idle.
    secured = await startEtcdCluster({ members: 1, args: ["--auth-token", "simple", "--auth-token-ttl", "2"] });
    const url = secured.endpoints[0];
    await etcdCall(url, "/v3/auth/user/add", { name: "root", password });
    await etcdCall(url, "/v3/auth/user/grant", { user: "root", role: "root" });
    await etcdCall(url, "/v3/auth/enable", {});
  });
  after(async () => {
    await secured?.stop();
  });

  test("with the right password the store works, and takes a new token when etcd drops the old one", async () => {
    let authentications = 0;
    const counting = async (url, init) => {
      if (url.endsWith("/v3/auth/authenticate")) authentications++;
      return fetch(url, init);
    };
    const store = etcdLockStore({ endpoints: secured.endpoints, auth: { username: "root", password }, fetch: counting });
    const key = freshKey("auth");
    assert.ok(await store.acquire(key, "o", 30_000));
    assert.equal(await store.isLocked(key), true);
    assert.equal(authentications, 1);
    // Idle past the token's TTL: the next call is refused once, re-authenticates, and works.
    await until(
      "a second token taken",
      async () => {
        await sleep(3_000);
        assert.equal(await store.isLocked(key), true);
        return authentications >= 2;
      },
      30_000,
    );
    assert.equal(await store.release(key, "o"), true);
  });

  test("a wrong password: an error naming the user, never the password", async () => {
    const wrong = "wr0ng-" + password;
    const store = etcdLockStore({ endpoints: secured.endpoints, auth: { username: "root", password: wrong } });
    const error = await store.acquire(freshKey("auth"), "o", 30_000).catch((e) => e);
    assert.ok(error instanceof EtcdStoreError, String(error));
    assert.match(error.message, /refused the credentials of user "root"/);
    const everything = JSON.stringify({ message: error.message, stack: error.stack, cause: String(error.cause), own: { ...error } });
    assert.ok(!everything.includes(wrong) && !everything.includes(password), everything);
  });

  test("no auth against a cluster that requires it: says to pass auth", async () => {
    const store = etcdLockStore({ endpoints: secured.endpoints });
    await assert.rejects(store.isLocked("k"), /requires authentication: pass options\.auth/);
  });
});

// Last: it kills a member (and starts it again).
describe("the leader SIGKILLed", () => {
  test("holds survive, fences keep rising across the re-election; the store fails over", async () => {
    // The leader's URL first, so the store's current endpoint is the member that dies.
    const leader = await cluster.leader();
    const first = cluster.endpoints[leader];
    const answeredBy = new Set();
    let killed = false;
    const noting = async (url, init) => {
      const response = await fetch(url, init);
      if (killed) answeredBy.add(new URL(url).origin);
      return response;
    };
    const endpoints = [first, ...cluster.endpoints.filter((u) => u !== first)];
    const store = etcdLockStore({ endpoints, timeoutMs: 1_000, fetch: noting });
    const held = freshKey("held-across");
    const kept = await store.acquire(held, "survivor", 60_000);
    assert.ok(kept);
    const key = freshKey("leader-kill");
    const fences = [kept.fence];
    const takeOnce = async (i) => {
      const got = await store.acquire(key, `o${i}`, 30_000);
      assert.ok(got, `acquire ${i} refused`);
      fences.push(got.fence);
      assert.equal(await store.release(key, `o${i}`), true);
    };
    for (let i = 0; i < 5; i++) await takeOnce(i);

    await cluster.members[leader].kill("SIGKILL");
    killed = true;
    // Calls during the election may fail (no leader yet): retried until one works, by state.
    let i = 5;
    await until(
      "an acquire after the kill",
      async () => {
        try {
          await takeOnce(i++);
          return true;
        } catch (error) {
          if (!(error instanceof EtcdStoreError)) throw error;
          // An acquire may have been granted with its release lost: free it by the owner's token.
          await store.release(key, `o${i - 1}`).catch(() => {});
          return false;
        }
      },
      30_000,
    );
    const next = await cluster.leader();
    assert.notEqual(next, leader, "a new leader among the two left");
    assert.ok(!answeredBy.has(first) && answeredBy.size > 0, `answered after the kill by ${[...answeredBy].join(", ")}`);
    for (let n = 0; n < 5; n++) await takeOnce(i++);
    for (let n = 1; n < fences.length; n++) assert.ok(fences[n] > fences[n - 1], `fences ${fences.join(", ")}`);

    // The hold taken before the kill is still there, the same one.
    assert.equal(await store.acquire(held, "intruder", 60_000), false);
    assert.deepEqual((await store.inspect(held)).holders.map((h) => h.fence), [kept.fence]);
    assert.equal(await store.extend(held, "survivor", 60_000), true);
    assert.equal(await store.release(held, "survivor"), true);

    // The killed member comes back and the cluster is whole again.
    cluster.members[leader].start();
    await until("three members agree on a leader", async () => {
      try {
        await cluster.leader({ timeoutMs: 2_000 });
        return true;
      } catch {
        return false;
      }
    });
  });
});

// Last too: it kills the leader (and starts it again). A holder's process dies without revoking
// its lease, and the leader dies right after: the new leader restarts every lease's countdown, so
// the key outlives its TTL by up to one more TTL and the election — later, never sooner: no one
// else gets the key before the TTL has run out (docs/testing.md).
describe("a killed holder's lease across a leader change", () => {
  test("the key is free again no sooner than the TTL after the grant, and no later than 2×TTL + 10 s after the holder died", async () => {
    const TTL_MS = 2_000;
    const leader = await cluster.leader();
    const key = freshKey("holder-then-leader-killed");
    // The holder: its own process, which acquires, says so with the time it asked, and waits.
    const holder = spawn(
      process.execPath,
      [
        "--input-type=module",
        "-e",
        `import { etcdLockStore } from ${JSON.stringify(new URL("../../pkg/stores/etcd.js", import.meta.url).href)};
         const store = etcdLockStore({ endpoints: ${JSON.stringify(cluster.endpoints)} });
         const asked = Date.now();
         const got = await store.acquire(${JSON.stringify(key)}, "holder", ${TTL_MS});
         process.stdout.write(JSON.stringify({ asked, fence: got ? got.fence : null }) + "\\n");
         setInterval(() => {}, 1_000);`,
      ],
      { stdio: ["ignore", "pipe", "inherit"] },
    );
    const exited = new Promise((resolve) => holder.once("exit", resolve));
    let line = "";
    const said = await new Promise((resolve, reject) => {
      holder.stdout.on("data", (d) => {
        line += d;
        if (line.includes("\n")) resolve(JSON.parse(line));
      });
      holder.once("exit", (code) => reject(new Error(`the holder exited ${code} before holding`)));
    });
    assert.ok(said.fence, "the holder was granted the key");
    holder.kill("SIGKILL");
    await exited;
    const died = Date.now();
    await cluster.members[leader].kill("SIGKILL");
    const others = cluster.endpoints.filter((_, i) => i !== leader);
    const store = etcdLockStore({ endpoints: others, timeoutMs: 1_000 });

    // Waited for by state: the key held until etcd deletes it with its lease.
    const deadline = died + 2 * TTL_MS + 10_000;
    let free = null;
    let held = 0;
    while (free === null) {
      try {
        if (await store.isLocked(key)) held++;
        else free = Date.now();
      } catch (error) {
        if (!(error instanceof EtcdStoreError)) throw error; // no leader yet: asked again
      }
      if (free === null) {
        assert.ok(Date.now() < deadline, `the key still held ${Date.now() - died} ms after its holder died (TTL ${TTL_MS} ms)`);
        await sleep(50);
      }
    }
    assert.ok(held > 0, "the key was seen held after the leader's death");
    assert.ok(free - said.asked >= TTL_MS, `free ${free - said.asked} ms after the holder asked for a ${TTL_MS} ms lease`);
    const next = await cluster.leader();
    assert.notEqual(next, leader, "a new leader");
    // The next holder takes it, with a higher fence.
    const got = await store.acquire(key, "next", TTL_MS);
    assert.ok(got && got.fence > said.fence, `fences ${said.fence}, ${got?.fence}`);
    assert.equal(await store.release(key, "next"), true);
    console.log(`# lease of ${TTL_MS} ms, holder killed, then the leader: free ${free - died} ms after the holder died (${free - said.asked} ms after it asked)`);

    cluster.members[leader].start();
    await until("three members agree on a leader", async () => {
      try {
        await cluster.leader({ timeoutMs: 2_000 });
        return true;
      } catch {
        return false;
      }
    });
  });
});
