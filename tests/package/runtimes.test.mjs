// The installed package in Deno 2 and Bun (both from their npm platform packages).
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { SMOKE } from "./smoke.mjs";

const here = fileURLToPath(new URL(".", import.meta.url));
const bin = {
  deno: `${here}node_modules/@deno/linux-x64-glibc/deno`,
  bun: `${here}node_modules/@oven/bun-linux-x64/bin/bun`,
};

// Deno keeps compiled code in DENO_DIR by file path: a package rebuilt in place could run from a
// stale compile of its old glue. Each run of this file gets a cache of its own.
const denoDir = mkdtempSync(join(tmpdir(), "keel-deno-"));
process.on("exit", () => rmSync(denoDir, { recursive: true, force: true }));

function runIn(runtime, args, timeout = 120_000) {
  chmodSync(bin[runtime], 0o755); // npm does not keep the executable bit of platform packages
  const out = execFileSync(bin[runtime], args, {
    cwd: here,
    encoding: "utf8",
    env: {
      ...process.env,
      DENO_DIR: denoDir,
      DENO_NO_UPDATE_CHECK: "1",
      DENO_NO_PROMPT: "1",
      BUN_RUNTIME_TRANSPILER_CACHE_PATH: "0",
    },
    timeout,
  });
  return JSON.parse(out.trim().split("\n").pop());
}

test("Deno 2 runs the package", () => {
  const version = execFileSync(bin.deno, ["--version"], { encoding: "utf8" });
  assert.match(version, /^deno 2\./);
  const r = runIn("deno", ["run", "--allow-read", "--allow-env", "--node-modules-dir=manual", "runtimes/run-smoke.mjs"]);
  assert.deepEqual(r, SMOKE);
});

test("Bun runs the package", () => {
  const r = runIn("bun", ["runtimes/run-smoke.mjs"]);
  assert.deepEqual(r, SMOKE);
});

test("Deno and Bun processes end on their own once their locks are done", () => {
  // Every store call here was bounded by a 60 s TTL: killed at 30 s means a bound kept it alive.
  const deno = ["run", "--allow-read", "--allow-env", "--node-modules-dir=manual", "runtimes/exit-after-bounded-calls.mjs"];
  assert.deepEqual(runIn("deno", deno, 30_000), { ran: true, locked: false });
  assert.deepEqual(runIn("bun", ["runtimes/exit-after-bounded-calls.mjs"], 30_000), { ran: true, locked: false });
});
