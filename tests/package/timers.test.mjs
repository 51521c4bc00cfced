// Timers and the process: a Node process with locks in it exits when they are done, and the
// longest bounds stay within what setTimeout takes. (Node only: each test runs a child process.)
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";

describe("timers", () => {
  it("a process exits once its locks are done: no store-call bound keeps it alive", () => {
    // Its store calls were bounded by a 60 s TTL; the bounds are cancelled when the calls
    // answer, and nothing of them may hold the event loop open afterwards. (The same script
    // runs in Deno and Bun: runtimes.test.mjs.)
    const child = spawnSync(process.execPath, ["runtimes/exit-after-bounded-calls.mjs"], {
      cwd: fileURLToPath(new URL(".", import.meta.url)),
      timeout: 30_000,
    });
    assert.equal(child.stderr.toString(), "");
    assert.deepEqual(JSON.parse(child.stdout.toString()), { ran: true, locked: false });
    assert.equal(child.status, 0, "the process ended on its own, before the 30 s kill");
  });

  it("a process whose only work is a waiter queued in the memory store stays alive until the holder's TTL hands it the key", () => {
    // The queue's timer is all that is pending: if it let the process go, the top-level await
    // would never settle and Node would exit with code 13.
    const script = `
      import { lock } from "keel-lock";
      await lock("k", 150).acquire(); // never released
      console.log(JSON.stringify(await lock("k").run(() => "ran", { timeout: 60_000 })));`;
    const child = spawnSync(process.execPath, ["--input-type=module", "-e", script], {
      cwd: fileURLToPath(new URL(".", import.meta.url)),
      timeout: 30_000,
    });
    assert.equal(child.stderr.toString(), "");
    assert.deepEqual(JSON.parse(child.stdout.toString()), [true, "ran"]);
    assert.equal(child.status, 0);
  });

  it("after the last run on the memory store no timer is left — waited, timed-out, aborted, extended and auto-extended holds alike — except while autoExtend keeps a lock", () => {
    // Node lists the timers that keep the event loop alive in getActiveResourcesInfo(); the
    // script's own sleeps are over by the time it looks.
    const script = `
      import { lock } from "keel-lock";
      const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
      const timers = async () => { await sleep(0); await new Promise((r) => setImmediate(r)); return process.getActiveResourcesInfo().filter((r) => r === "Timeout").length; };
      const seen = {};
      await lock("a").run(() => 1);
      const work = Array.from({ length: 8 }, () => lock("b").run(() => sleep(5), { timeout: 5_000, retryDelay: 10 }));
      await Promise.all(work);
      const holder = lock("c", 10_000);
      await holder.acquire();
      await lock("c").run(() => 1, { timeout: 30 });
      const aborting = new AbortController();
      const waiting = lock("c").run(() => 1, { timeout: 60_000, signal: aborting.signal }).catch((e) => e.name);
      await sleep(10);
      aborting.abort();
      seen.aborted = await waiting;
      await holder.extend(20_000);
      await holder.release();
      const kept = lock("d", 10_000);
      await kept.acquire();
      kept.autoExtend();
      seen.whileAutoExtending = await timers();
      await kept.release();
      const held = await lock("e", 1_000).hold({ autoExtend: true });
      await held.release();
      seen.after = await timers();
      console.log(JSON.stringify(seen));`;
    const child = spawnSync(process.execPath, ["--input-type=module", "-e", script], {
      cwd: fileURLToPath(new URL(".", import.meta.url)),
      timeout: 30_000,
    });
    assert.equal(child.stderr.toString(), "");
    assert.deepEqual(JSON.parse(child.stdout.toString()), { aborted: "AbortError", whileAutoExtending: 1, after: 0 });
    assert.equal(child.status, 0);
  });

  it("the longest wait's bound does not overflow setTimeout", () => {
    // timeout + retryDelay bounds a store's own wait: up to 2^32 ms, past setTimeout's limit
    // (Node then warns and fires at once, over and over).
    const script = `
      import { lock, setLockStore } from "keel-lock";
      setLockStore({
        acquire: async () => false, release: async () => false, extend: async () => false,
        isLocked: async () => true, remainingTime: async () => 1000,
        acquireOrWait: () => new Promise((resolve) => setTimeout(() => resolve(false), 200)),
        withdraw: async () => {},
      });
      console.log(await lock("k").acquire({ timeout: 2 ** 31 - 1, retryDelay: 2 ** 31 - 1 }));`;
    const child = spawnSync(process.execPath, ["--input-type=module", "-e", script], {
      cwd: fileURLToPath(new URL(".", import.meta.url)),
      timeout: 30_000,
    });
    assert.equal(child.stderr.toString(), "", "no TimeoutOverflowWarning");
    assert.equal(child.stdout.toString().trim(), "false");
    assert.equal(child.status, 0);
  });
});
