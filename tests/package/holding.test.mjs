// Holding a lock for a long time, from the installed package: the loss signal, auto-extend,
// force-release, hold() and `await using` (compiled by TypeScript's own downlevel `using`), with
// no unhandled rejection in any loss scenario and no timer left behind.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import ts from "typescript";
import { lock, setLockStore, MemoryLockStore, LockNotHeldError, LockUnavailableError } from "keel-lock";
import { mapLockStore } from "./stores.mjs";
import { sleep, until } from "./waits.mjs";

let n = 0;
const fresh = (name) => `${name}:${process.pid}:${++n}`;
const aborted = (signal) => new Promise((r) => signal.addEventListener("abort", r, { once: true }));

const unhandled = [];
const onUnhandled = (reason) => unhandled.push(reason);
before(() => process.on("unhandledRejection", onUnhandled));
after(() => process.off("unhandledRejection", onUnhandled));

/** A JS store whose extend can be switched to fail (an outage) or to refuse. */
function flakyStore() {
  const inner = mapLockStore();
  const state = { extend: "ok" };
  return {
    state,
    store: {
      ...inner,
      async extend(key, owner, ttlMs) {
        if (state.extend === "outage") throw new Error("store unreachable");
        if (state.extend === "refuse") return false;
        return inner.extend(key, owner, ttlMs);
      },
    },
  };
}

describe("the loss signal", () => {
  it("aborts at the local deadline when nobody extends; run() still resolves", async () => {
    setLockStore(new MemoryLockStore());
    const key = fresh("deadline");
    const [ran, seen] = await lock(key, 100).run(async ({ signal }) => {
      await aborted(signal);
      return { reason: signal.reason };
    });
    assert.equal(ran, true);
    assert.ok(seen.reason instanceof LockNotHeldError);
    assert.equal(seen.reason.key, key);
    assert.match(seen.reason.message, /TTL passed/);
  });

  it("a store outage during auto-extend that outlasts the TTL aborts the signal and never re-acquires", async () => {
    const { store, state } = flakyStore();
    let acquires = 0;
    setLockStore({ ...store, acquire: (...a) => (acquires++, store.acquire(...a)) });
    const [ran, reason] = await lock(fresh("outage"), 150).run(
      async ({ signal }) => {
        state.extend = "outage";
        await aborted(signal);
        return signal.reason;
      },
      { autoExtend: { every: 30 } },
    );
    assert.equal(ran, true);
    assert.ok(reason instanceof LockNotHeldError);
    assert.equal(acquires, 1, "auto-extend acquired the lock again");
  });

  it("force-release by an operator aborts the holder's signal at its next extend", async () => {
    setLockStore(new MemoryLockStore());
    const key = fresh("force");
    const [, seen] = await lock(key, 10_000).run(
      async ({ signal }) => {
        assert.equal(await lock(key).forceRelease(), true);
        await aborted(signal);
        return signal.reason.message;
      },
      { autoExtend: { every: 20 } },
    );
    assert.match(seen, /no longer records/);
  });

  it("a store without forceRelease rejects clearly", async () => {
    setLockStore(mapLockStore());
    await assert.rejects(lock(fresh("unsupported")).forceRelease(), /does not support forceRelease/);
  });

  it("no loss scenario leaves an unhandled rejection", async () => {
    const { store, state } = flakyStore();
    setLockStore(store);
    // fn ignores the signal; fn throws after the loss; the release after a loss answers false.
    await lock(fresh("ignore"), 80).run(() => sleep(200), { autoExtend: { every: 20 } }).then(() => {
      state.extend = "ok";
    });
    state.extend = "refuse";
    await assert.rejects(
      lock(fresh("throws"), 100).run(
        async ({ signal }) => {
          await aborted(signal);
          throw new Error("fn gave up");
        },
        { autoExtend: { every: 20 } },
      ),
      /fn gave up/,
    );
    state.extend = "outage";
    await lock(fresh("outage-ignored"), 80).run(() => sleep(200), { autoExtend: { every: 20 } });
    await sleep(50);
    assert.deepEqual(unhandled, []);
  });
});

describe("auto-extend", () => {
  it("holds through two TTLs while nobody else gets in", async () => {
    setLockStore(new MemoryLockStore());
    const key = fresh("two");
    // Extended every third of the TTL: a stall of over a second between two extends is survived.
    const ttl = 2_000;
    let rivalWon = false;
    const [, lost] = await lock(key, ttl).run(
      async ({ signal }) => {
        const granted = performance.now();
        while (performance.now() - granted < 2 * ttl) {
          if (await lock(key).acquire()) rivalWon = true;
          await sleep(100);
        }
        return signal.aborted;
      },
      { autoExtend: true },
    );
    assert.equal(lost, false);
    assert.equal(rivalWon, false);
  });

  it("release during an extend in flight never leaves the key held", async () => {
    const inner = mapLockStore();
    let extending = 0;
    let inFlight = 0;
    setLockStore({
      ...inner,
      async extend(...args) {
        extending++;
        inFlight++;
        await sleep(40); // slow extend: the release below arrives while it is in flight
        try {
          return await inner.extend(...args);
        } finally {
          inFlight--;
        }
      },
    });
    for (let round = 0; round < 5; round++) {
      const key = fresh("inflight");
      const l = lock(key, 10_000);
      assert.equal(await l.acquire(), true);
      l.autoExtend({ every: 10 });
      await sleep(15);
      assert.equal(await l.release(), true);
      await until(() => inFlight === 0, `round ${round}: the extend in flight settled`);
      assert.equal(await lock(key).isLocked(), false, `round ${round}: the key stayed held`);
    }
    assert.ok(extending > 0);
  });

  it("1000 run({ autoExtend: true }) calls leave no pending timer", async () => {
    setLockStore(new MemoryLockStore());
    const timers = () => process.getActiveResourcesInfo().filter((r) => r === "Timeout").length;
    await sleep(10);
    const before = timers();
    const runs = [];
    for (let i = 0; i < 1000; i++) {
      runs.push(lock(fresh("many"), 1_000).run(async () => await null, { autoExtend: true }));
    }
    await Promise.all(runs);
    await new Promise((r) => setImmediate(r));
    assert.equal(timers(), before, "timers left behind");
  });
});

describe("hold() and await using", () => {
  it("hold() resolves the lock, or throws LockUnavailableError with the key", async () => {
    setLockStore(new MemoryLockStore());
    const key = fresh("hold");
    const held = await lock(key).hold({ timeout: 10 });
    assert.equal(typeof held.fence, "number");
    const error = await lock(key).hold({ timeout: 20 }).catch((e) => e);
    assert.ok(error instanceof LockUnavailableError);
    assert.equal(error.key, key);
    await held.release();
  });

  it("`await using` (TypeScript's downlevel form, run on this Node) releases on scope exit, even when the block throws", async () => {
    setLockStore(new MemoryLockStore());
    const dir = mkdtempSync(join(tmpdir(), "keel-using-"));
    try {
      const source = `
        import { lock } from "keel-lock";
        export async function normal(key: string) {
          await using held = await lock(key).hold({ timeout: 10 });
          return held.fence;
        }
        export async function throwing(key: string) {
          await using held = await lock(key).hold({ timeout: 10 });
          throw new Error("inside " + held.key);
        }`;
      const { outputText } = ts.transpileModule(source, {
        compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext },
      });
      assert.doesNotMatch(outputText, /await using/, "TypeScript did not downlevel `await using`");
      const file = join(dir, "using.mjs");
      writeFileSync(file, outputText);
      // Resolve "keel-lock" from this test's node_modules.
      writeFileSync(file, outputText.replaceAll('"keel-lock"', JSON.stringify(import.meta.resolve("keel-lock"))));
      const mod = await import(pathToFileURL(file).href);
      const key = fresh("using");
      assert.equal(typeof (await mod.normal(key)), "number");
      assert.equal(await lock(key).isLocked(), false, "not released at scope exit");
      await assert.rejects(mod.throwing(key), /inside/);
      assert.equal(await lock(key).isLocked(), false, "not released when the block threw");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
