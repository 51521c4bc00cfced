// The installed package bundled by Vite (production build), served over HTTP and run in real
// headless Chromium.
import { test } from "node:test";
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { rmSync } from "node:fs";
import { build, preview } from "vite";
import { chromium } from "playwright-core";
import { SMOKE } from "./smoke.mjs";

const root = fileURLToPath(new URL("./vite/", import.meta.url));

test("a Vite bundle runs the package in headless Chromium", async () => {
  const outDir = `${root}dist`;
  rmSync(outDir, { recursive: true, force: true });
  await build({ root, logLevel: "warn", build: { outDir, target: "es2022" } });
  const server = await preview({ root, logLevel: "warn", build: { outDir }, preview: { host: "127.0.0.1", port: 0 } });
  const browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync"],
  });
  try {
    const page = await browser.newPage();
    const errors = [];
    page.on("pageerror", (e) => errors.push(String(e)));
    await page.goto(server.resolvedUrls.local[0]);
    await page.waitForFunction(() => window.__keelResult !== undefined, null, { timeout: 180_000 });
    const result = await page.evaluate(() => window.__keelResult);
    assert.deepEqual(errors, []);
    assert.deepEqual(result, SMOKE);
    assert.match(await page.evaluate(() => navigator.userAgent), /Chrome/);
  } finally {
    await browser.close();
    await new Promise((r) => server.httpServer.close(r));
  }
});
