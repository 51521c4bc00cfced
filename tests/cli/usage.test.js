// Help, version and bad input: one line on stderr and exit 64, never a stack trace; a driver
// that is not installed or a server that does not answer: one line and exit 69.
import assert from "node:assert/strict";
import { chmodSync, cpSync, mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { freePort } from "../stores/lib/servers.js";
import { keelDone, tempDir } from "./lib/cli.js";

const codes = ["64", "69", "75", "76"];

test("--help lists the commands and every exit code; each command has its own help", async () => {
  const main = await keelDone(["--help"]);
  assert.equal(main.code, 0);
  for (const word of ["run", "elect", "inspect", "watch", "release --force", "redis://", "postgres://", "sqlite:PATH", ...codes]) {
    assert.ok(main.stdout.includes(word), `--help mentions ${word}`);
  }
  assert.equal(main.stderr, "");
  for (const command of ["run", "elect", "inspect", "watch", "release"]) {
    const help = await keelDone([command, "--help"]);
    assert.equal(help.code, 0, command);
    assert.match(help.stdout, new RegExp(`^Usage: keel-lock ${command}`));
    for (const code of codes) assert.ok(help.stdout.includes(code), `${command} --help names exit ${code}`);
  }
  const run = await keelDone(["run", "--help"]);
  for (const option of ["--ttl", "--timeout", "--limit", "--permits", "--shared", "--metadata", "--grace", "--quiet", "--json", "KEEL_LOCK_FENCE"]) {
    assert.ok(run.stdout.includes(option), `run --help mentions ${option}`);
  }
});

test("--version prints the package's version", async () => {
  const { version } = JSON.parse(readFileSync(new URL("./node_modules/keel-lock/package.json", import.meta.url), "utf8"));
  const out = await keelDone(["--version"]);
  assert.equal(out.code, 0);
  assert.equal(out.stdout, `keel-lock ${version}\n`);
});

const bad = [
  [["run", "--bogus", "k", "--", "true"], /unknown option '--bogus'/i],
  [["run", "--ttl", "5x", "k", "--", "true"], /--ttl.*not a duration/],
  [["run", "--timeout", "-1", "k", "--", "true"], /--timeout/],
  [["run", "--ttl", "0", "k", "--", "true"], /--ttl.*out of range/],
  [["run", "--grace", "20s", "k", "--", "true"], /--grace.*third of --ttl/],
  [["run", "--limit", "0", "k", "--", "true"], /--limit/],
  [["run", "--permits", "2", "k", "--", "true"], /--permits needs --limit/],
  [["run", "--limit", "2", "--permits", "3", "k", "--", "true"], /--permits/],
  [["run", "--shared", "--limit", "2", "k", "--", "true"], /--shared and --limit/],
  [["run", "k", "echo", "hi"], /missing -- between KEY and COMMAND/],
  [["run", "k"], /missing -- COMMAND/],
  [["run", "k", "--"], /missing -- COMMAND/],
  [["run"], /missing KEY/],
  [["frobnicate"], /unknown command/],
  [[], /missing command/],
  [["--store", "foo://x", "run", "k", "--", "true"], /unknown scheme foo:/],
  [["run", "--store", "nonsense", "k", "--", "true"], /not a URL/],
  [["run", "--store", "sqlite:", "k", "--", "true"], /sqlite:PATH needs a PATH/],
  [["release", "k"], /needs --force/],
  [["release", "--force", "k"], /add --yes/],
  [["inspect", "a", "b"], /one KEY/],
  [["run", "", "--", "true"], /bad KEY/],
  [["run", "x".repeat(600), "--", "true"], /bad KEY/],
  [["inspect", "x".repeat(600)], /bad KEY/],
  [["run", "--metadata", "m".repeat(2000), "k", "--", "true"], /--metadata/],
  [["run", "--store", "https://example.invalid", "k", "--", "true"], /KEEL_LOCK_UPSTASH_TOKEN/],
];

test("bad input: one line on stderr, exit 64, nothing on stdout, no stack trace", async () => {
  const dir = tempDir();
  const env = { KEEL_LOCK_STORE: `sqlite:${join(dir, "locks.db")}`, KEEL_LOCK_UPSTASH_TOKEN: "", UPSTASH_REDIS_REST_TOKEN: "" };
  delete process.env.KEEL_LOCK_UPSTASH_TOKEN;
  for (const [args, message] of bad) {
    const out = await keelDone(args, { env });
    const label = JSON.stringify(args).slice(0, 80);
    assert.equal(out.code, 64, `${label}: ${out.stderr}`);
    assert.equal(out.stdout, "", label);
    assert.match(out.stderr, /^keel-lock: [^\n]+\n$/, `${label}: one line: ${out.stderr}`);
    assert.match(out.stderr, message, label);
    assert.doesNotMatch(out.stderr, /\n\s+at /, label);
  }
});

test("a store whose server does not answer: one line, exit 69", async () => {
  const port = await freePort();
  for (const url of [`redis://127.0.0.1:${port}`, `postgres://postgres@127.0.0.1:${port}/postgres`]) {
    const out = await keelDone(["run", "--store", url, "k", "--", "true"]);
    assert.equal(out.code, 69, `${url}: ${out.stderr}`);
    assert.match(out.stderr, /^keel-lock: cannot [^\n]+\n$/);
  }
});

test("the default store's directory writable by others is refused: one line, exit 69", async () => {
  const runtime = tempDir();
  mkdirSync(join(runtime, "keel-lock"), { mode: 0o777 });
  chmodSync(join(runtime, "keel-lock"), 0o777);
  const out = await keelDone(["run", "k", "--", "true"], { env: { XDG_RUNTIME_DIR: runtime, KEEL_LOCK_STORE: "" } });
  assert.equal(out.code, 69, out.stderr);
  assert.match(out.stderr, /^keel-lock: .*keel-lock is not a directory of this user's that only it can write[^\n]*\n$/);
});

test("a driver that is not installed: one line naming the package, exit 69", async () => {
  // keel-lock alone, with no driver beside it nor in the directory it runs in.
  const dir = tempDir();
  mkdirSync(join(dir, "node_modules"));
  cpSync(new URL("./node_modules/keel-lock", import.meta.url), join(dir, "node_modules", "keel-lock"), { recursive: true });
  const bin = join(dir, "node_modules", "keel-lock", "bin", "keel-lock.js");
  const { spawnSync } = await import("node:child_process");
  for (const [url, name] of [
    ["redis://127.0.0.1:1", "ioredis"],
    ["redis+cluster://127.0.0.1:1,127.0.0.1:2", "ioredis"],
    ["postgres://127.0.0.1:1/x", "pg"],
    [`sqlite:${join(dir, "x.db")}`, "better-sqlite3"],
  ]) {
    const env = { ...process.env, KEEL_LOCK_UPSTASH_TOKEN: "t" };
    const out = spawnSync(process.execPath, [bin, "run", "--store", url, "k", "--", "true"], { cwd: dir, env, encoding: "utf8" });
    if (name === "better-sqlite3" && !out.stderr.includes("better-sqlite3")) continue; // Node with node:sqlite needs none
    assert.equal(out.status, 69, `${url}: ${out.stderr}`);
    assert.match(out.stderr, new RegExp(`^keel-lock: .*npm install ${name}\\n$`));
  }
});
