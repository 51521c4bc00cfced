// keel-lock/indexeddb in real browsers: pages of tests/package/browser/idb.html, bundled by Vite
// from the installed package, in headless Chromium (playwright-core, one browser context: one
// origin, one profile) and headless Firefox (geckodriver, windows of one session). In each: the
// store's own tests in a page (idb-units.mjs, the conformance kit among them), then three pages
// and a dedicated worker contending for one key with lock(key).run — never two inside, every run
// granted, fences strictly increasing across all of them in the order they ran.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { rmSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { build, preview } from "vite";
import { chromium } from "playwright-core";
import { withFirefox } from "./firefox.mjs";

const root = fileURLToPath(new URL("./browser/", import.meta.url));
const WITHIN_MS = 240_000;
const ROUNDS = 25; // per contender: 100 runs in all
const UNITS = 11;

let server;
let base;

before(async () => {
  const outDir = `${root}dist-indexeddb`;
  rmSync(outDir, { recursive: true, force: true });
  await build({
    root,
    logLevel: "warn",
    worker: { format: "es" },
    build: { outDir, target: "es2022", rollupOptions: { input: { idb: `${root}idb.html` } } },
  });
  server = await preview({ root, logLevel: "warn", build: { outDir }, preview: { host: "127.0.0.1", port: 0 } });
  base = `${server.resolvedUrls.local[0]}idb.html`;
});

after(() => new Promise((r) => server.httpServer.close(r)));

/** Polls `read()` (a page's window.__idbResult, or null) until it answers; its result, or throws its error. */
async function answer(read, what) {
  const until = Date.now() + WITHIN_MS;
  for (;;) {
    const got = await read();
    if (got !== null && got !== undefined) {
      if (!got.ok) throw new Error(`${what}: ${got.error}`);
      return got.result;
    }
    if (Date.now() > until) throw new Error(`${what}: no answer within ${WITHIN_MS} ms`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** The browser-independent part: `open(url)` opens a page of the origin, answering a reader of its result. */
async function scenario(open, browser) {
  const units = await answer(await open(`${base}?role=units`), `${browser} units`);
  const failed = units.filter((r) => !r.ok);
  assert.deepEqual(failed, [], `${browser}: ${failed.length} of ${units.length} failed`);
  assert.ok(units.length >= UNITS, `${browser}: only ${units.length} tests ran`);
  console.log(`# ${browser}: ${units.length} store tests passed`);

  const id = Math.random().toString(36).slice(2);
  const common = `key=contended&rounds=${ROUNDS}&contenders=4&db=keel-lock-contend-${id}&log=keel-lock-log-${id}`;
  const readers = [];
  for (const who of ["page-1", "page-2", "page-3"]) {
    readers.push(await open(`${base}?role=contend&who=${who}&${common}${who === "page-1" ? "&worker=1" : ""}`));
  }
  // One at a time: a WebDriver reader switches windows.
  const contenders = [];
  for (const [i, read] of readers.entries()) contenders.push(...(await answer(read, `${browser} page-${i + 1}`)));
  const log = await answer(await open(`${base}?role=log&log=keel-lock-log-${id}`), `${browser} log`);

  assert.deepEqual(contenders.map((c) => c.who).sort(), ["page-1", "page-1-worker", "page-2", "page-3"]);
  for (const c of contenders) assert.equal(c.ran, ROUNDS, `${c.who} ran every round`);
  assert.deepEqual(log.filter((e) => e.type === "overlap"), [], `${browser}: two contenders inside at once`);
  assert.equal(log.length, 2 * 4 * ROUNDS);
  let last = 0;
  for (let i = 0; i < log.length; i += 2) {
    const [enter, exit] = [log[i], log[i + 1]];
    assert.equal(enter.type, "enter");
    assert.deepEqual(exit, { type: "exit", who: enter.who, fence: enter.fence }, `entry ${i}: the one inside leaves next`);
    assert.ok(enter.fence > last, `${browser}: fence ${enter.fence} after ${last}: fences strictly increase across contexts`);
    last = enter.fence;
  }
  const switches = log.filter((e, i) => e.type === "enter" && i >= 2 && log[i - 2].who !== e.who).length;
  const waited = contenders.reduce((n, c) => n + c.waited, 0);
  assert.ok(switches > 0 && waited > 0, `${browser}: the contexts did contend (${switches} switches, ${waited} waited grants)`);
  console.log(`# ${browser}: ${4 * ROUNDS} contended runs over 3 pages and a worker, ${switches} switches between contexts, ${waited} grants after a wait, fences 1..${last}`);
}

describe("keel-lock/indexeddb across pages and a worker", () => {
  it("headless Chromium", async () => {
    const browser = await chromium.launch({
      executablePath: "/usr/bin/chromium",
      args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-sync"],
    });
    try {
      const context = await browser.newContext();
      const errors = [];
      await scenario(async (url) => {
        const page = await context.newPage();
        page.on("pageerror", (e) => errors.push(String(e)));
        await page.goto(url);
        return () => page.evaluate(() => window.__idbResult ?? null);
      }, "Chromium");
      assert.deepEqual(errors, []);
    } finally {
      await browser.close();
    }
  });

  it("headless Firefox", async () => {
    await withFirefox(async (webdriver, session) => {
      let first = true;
      // WebDriver talks to one window at a time: each reader switches to its window first.
      await scenario(async (url) => {
        let handle = await webdriver("GET", `${session}/window`);
        if (!first) {
          ({ handle } = await webdriver("POST", `${session}/window/new`, { type: "window" }));
          await webdriver("POST", `${session}/window`, { handle });
        }
        first = false;
        await webdriver("POST", `${session}/url`, { url });
        return async () => {
          await webdriver("POST", `${session}/window`, { handle });
          return webdriver("POST", `${session}/execute/sync`, { script: "return window.__idbResult ?? null;", args: [] });
        };
      }, "Firefox");
    });
  });
});
