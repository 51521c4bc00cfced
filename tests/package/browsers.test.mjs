// The API tests that need nothing of Node (browser/main.mjs lists them), bundled by Vite from
// the installed package's browser build and run in real headless Chromium (through
// playwright-core) and headless Firefox (through geckodriver's WebDriver).
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { rmSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { build, preview } from "vite";
import { chromium } from "playwright-core";
import { withFirefox } from "./firefox.mjs";

const root = fileURLToPath(new URL("./browser/", import.meta.url));
const shim = (name) => fileURLToPath(new URL(`./browser/${name}`, import.meta.url));
// Long enough for every test in the page, on a busy machine.
const RESULTS_WITHIN_MS = 180_000;

let server;
let url;

before(async () => {
  const outDir = `${root}dist`;
  rmSync(outDir, { recursive: true, force: true });
  const resolve = {
    alias: {
      "node:test": shim("node-test.mjs"),
      "node:assert/strict": shim("assert.mjs"),
      "node:module": shim("node-module.mjs"),
    },
  };
  await build({ root, logLevel: "warn", resolve, build: { outDir, target: "es2022" } });
  server = await preview({ root, logLevel: "warn", build: { outDir }, preview: { host: "127.0.0.1", port: 0 } });
  url = server.resolvedUrls.local[0];
});

after(() => new Promise((r) => server.httpServer.close(r)));

/** Every test passed, and there were as many as the page declares at least. */
function check(results, browser) {
  assert.ok(Array.isArray(results), `${browser}: no results (${JSON.stringify(results)})`);
  const failed = results.filter((r) => !r.ok);
  assert.deepEqual(failed, [], `${browser}: ${failed.length} of ${results.length} failed`);
  assert.equal(results.filter((r) => r.skipped).length, 0, `${browser}: tests were skipped`);
  // A page that stopped early or imported nothing must not pass.
  assert.ok(results.length >= 190, `${browser}: only ${results.length} tests ran`);
  const shared = results.filter((r) => r.name.startsWith("shared holds")).length;
  assert.ok(shared >= 19, `${browser}: only ${shared} shared-hold tests ran`);
  console.log(`# ${browser}: ${results.length} tests passed`);
}

describe("the API in browsers", () => {
  it("headless Chromium", async () => {
    const browser = await chromium.launch({
      executablePath: "/usr/bin/chromium",
      args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-sync"],
    });
    try {
      const page = await browser.newPage();
      const errors = [];
      page.on("pageerror", (e) => errors.push(String(e)));
      await page.goto(url);
      await page.waitForFunction(() => window.__keelResults !== undefined, null, { timeout: RESULTS_WITHIN_MS });
      assert.deepEqual(errors, []);
      check(await page.evaluate(() => window.__keelResults), "Chromium");
    } finally {
      await browser.close();
    }
  });

  it("headless Firefox", async () => {
    await withFirefox(async (webdriver, session) => {
      await webdriver("POST", `${session}/url`, { url });
      const until = Date.now() + RESULTS_WITHIN_MS;
      let results = null;
      while (results === null && Date.now() < until) {
        results = await webdriver("POST", `${session}/execute/sync`, {
          script: "return window.__keelResults ?? null;",
          args: [],
        });
        if (results === null) await new Promise((r) => setTimeout(r, 250));
      }
      const agent = await webdriver("POST", `${session}/execute/sync`, { script: "return navigator.userAgent;", args: [] });
      assert.match(agent, /Firefox/);
      check(results, "Firefox");
    });
  });
});
