// Where a hold's terms come from: owner tokens drawn from the platform CSPRNG, and a handed-over
// grant whose TTL runs from the hand-over, not from the request.
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { lock, setLockStore, MemoryLockStore } from "keel-lock";
import { mapLockStore, recording } from "./stores.mjs";

let n = 0;
const fresh = (name) => `${name}:${globalThis.process?.pid ?? 0}:${++n}`;

describe("owner tokens", () => {
  it("are fresh, 128 bits as 32 hex digits, drawn from crypto.getRandomValues", async () => {
    const { store, calls } = recording(mapLockStore());
    setLockStore(store);
    const crypto = globalThis.crypto;
    const own = Object.prototype.hasOwnProperty.call(crypto, "getRandomValues");
    const original = crypto.getRandomValues;
    const spy = { calls: 0, bytes: 0 };
    crypto.getRandomValues = function (array) {
      spy.calls += 1;
      spy.bytes += array.byteLength;
      return original.call(crypto, array);
    };
    const N = 1000;
    try {
      for (let i = 0; i < N; i++) {
        const l = lock(fresh("tokens"));
        assert.equal(await l.acquire(), true);
        assert.equal(await l.release(), true);
      }
    } finally {
      if (own) crypto.getRandomValues = original;
      else delete crypto.getRandomValues;
      setLockStore(new MemoryLockStore());
    }
    const owners = calls.filter((c) => c.name === "acquire").map((c) => c.args[1]);
    assert.equal(owners.length, N);
    assert.equal(new Set(owners).size, N, "owner tokens repeated");
    for (const owner of owners) assert.match(owner, /^[0-9a-f]{32}$/);
    // Every token's 16 bytes came from the CSPRNG; the core may have drawn up to one pool's
    // worth (256 bytes) before the spy was installed.
    assert.ok(spy.calls >= 1, "crypto.getRandomValues was never called");
    assert.ok(spy.bytes >= N * 16 - 256, `only ${spy.bytes} random bytes for ${N} tokens`);
  });
});

describe("the memory store's hash keys", () => {
  it("are drawn before the store changes: a crypto.getRandomValues that reads the store meanwhile finds it whole", async () => {
    const crypto = globalThis.crypto;
    const own = Object.prototype.hasOwnProperty.call(crypto, "getRandomValues");
    const original = crypto.getRandomValues;
    let store;
    let refills = 0;
    const failures = [];
    crypto.getRandomValues = function (array) {
      // The token pool ran out: a token's mint, or a store's first draw of its hash keys, refills
      // it. A synchronous call into the store must not find it borrowed mid-change (that would
      // trap the wasm).
      refills += 1;
      try {
        store.isLocked("probe");
      } catch (e) {
        failures.push(e);
      }
      return original.call(crypto, array);
    };
    try {
      // Draws from the pool (256 per refill): each new store's first run mints a token, then draws
      // the store's hash keys; every other store runs once more (one more token). Five draws per
      // two stores: the refills fall on every position of that pattern, key draws included.
      for (let i = 0; i < 800; i++) {
        store = new MemoryLockStore();
        setLockStore(store);
        assert.deepEqual(await lock("hashed").run(() => i), [true, i]);
        if (i % 2 === 1) assert.deepEqual(await lock("hashed").run(() => i), [true, i]);
      }
    } finally {
      if (own) crypto.getRandomValues = original;
      else delete crypto.getRandomValues;
      setLockStore(new MemoryLockStore());
    }
    assert.ok(refills >= 7, `only ${refills} refills of the token pool`);
    assert.deepEqual(failures, []);
  });
});

describe("a handed-over grant", () => {
  it("has its TTL counted from the hand-over (the store's waitedMs), not from the request", async () => {
    // The store answers after 1600 ms that the grant waited 1550 ms in its queue; the TTL is
    // 1500 ms. Counted from the request the hold would already look expired; from the grant it
    // has over a second to go.
    setLockStore({
      ...mapLockStore(),
      acquireOrWait: () => new Promise((r) => setTimeout(() => r({ fence: 7, waitedMs: 1_550 }), 1_600)),
    });
    try {
      const l = lock(fresh("waited"), 1_500);
      assert.equal(await l.acquire({ timeout: 30_000 }), true);
      assert.equal(l.fence, 7);
      assert.equal(await l.isExpired(), false, "waitedMs was ignored");
    } finally {
      setLockStore(new MemoryLockStore());
    }
  });
});
