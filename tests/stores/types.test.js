// The stores' .d.ts files type-check against the package's LockStore (pkg/index.d.ts) and the
// real client libraries' types, including the misuses they must reject (@ts-expect-error).
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { test } from "node:test";

const here = fileURLToPath(new URL(".", import.meta.url));

test("pkg/stores/*.d.ts type-check with tsc --strict", { timeout: 120_000 }, () => {
  assert.ok(existsSync(new URL("../../pkg/index.d.ts", import.meta.url)), "pkg/index.d.ts (LockStore) is missing");
  const tsc = spawnSync(process.execPath, ["node_modules/typescript/bin/tsc", "-p", "types/tsconfig.json"], {
    cwd: here,
    encoding: "utf8",
  });
  assert.equal(tsc.status, 0, `tsc failed:\n${tsc.stdout}${tsc.stderr}`);
});

test("keel-lock/testing's types, from the installed tarball, type-check with tsc --strict", { timeout: 120_000 }, () => {
  assert.ok(existsSync(new URL("./node_modules/keel-lock/testing.d.ts", import.meta.url)), "keel-lock is not installed from the tarball");
  const tsc = spawnSync(process.execPath, ["node_modules/typescript/bin/tsc", "-p", "types/tsconfig.kit.json"], {
    cwd: here,
    encoding: "utf8",
  });
  assert.equal(tsc.status, 0, `tsc failed:\n${tsc.stdout}${tsc.stderr}`);
});
