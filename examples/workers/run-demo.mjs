// `make demo`: two Workers on local workerd (Miniflare, no account, no network) "charge invoice
// 42" from many concurrent requests through keel-lock's Durable Object store, and a table of
// what happened. The Worker is bundled from the top-level wrangler.toml exactly as
// `wrangler deploy` would bundle it.
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Miniflare } from "miniflare";

const here = dirname(fileURLToPath(import.meta.url));
const top = join(here, "..", "..");
const TRY_ONCE = Number(process.env.DEMO_REQUESTS ?? 40);
const WAITING = Number(process.env.DEMO_WAITING ?? 20);
const PAY_MS = 25;

const out = mkdtempSync(join(tmpdir(), "keel-demo-"));
let mf;
try {
  execFileSync(
    join(here, "node_modules", ".bin", "wrangler"),
    ["deploy", "--dry-run", "--outdir", out, "-c", join(top, "wrangler.toml")],
    {
      cwd: top,
      stdio: ["ignore", "ignore", "inherit"],
      env: { ...process.env, WRANGLER_SEND_METRICS: "false", CLOUDFLARE_CF_FETCH_ENABLED: "false" },
    },
  );
  const worker = (name, owner) => ({
    name,
    modules: true,
    modulesRoot: out,
    scriptPath: join(out, "demo-worker.js"),
    compatibilityDate: "2026-04-26",
    modulesRules: [
      { type: "ESModule", include: ["**/*.js", "**/*.mjs"] },
      { type: "CompiledWasm", include: ["**/*.wasm"] },
    ],
    durableObjects: {
      LOCKS: { className: "LockDurableObject", useSQLite: true, ...(owner ? {} : { scriptName: "billing-east" }) },
      LEDGER: { className: "Ledger", useSQLite: true, ...(owner ? {} : { scriptName: "billing-east" }) },
    },
  });
  mf = new Miniflare({ workers: [worker("billing-east", true), worker("billing-west", false)] });
  await mf.ready;
  const workers = { "billing-east": mf, "billing-west": await mf.getWorker("billing-west") };
  const post = async (name, body) => {
    const target = workers[name];
    const init = { method: "POST", body: JSON.stringify(body) };
    const url = "http://demo.local/charge";
    const res = name === "billing-east" ? await target.dispatchFetch(url, init) : await target.fetch(url, init);
    const json = await res.json();
    if (res.status !== 200) throw new Error(`${name}: ${json.error}`);
    return { worker: name, ...json };
  };
  const ledger = async (run) => (await mf.dispatchFetch(`http://demo.local/ledger?run=${run}`)).json();

  async function scenario(mode, n) {
    const run = `${mode}-${Date.now()}`;
    const names = Object.keys(workers);
    const t0 = performance.now();
    const results = await Promise.all(
      Array.from({ length: n }, (_, i) => post(names[i % 2], { run, mode, expected: n, payMs: PAY_MS })),
    );
    const wall = Math.round(performance.now() - t0);
    return { results, wall, stats: await ledger(run) };
  }

  const pad = (s, w) => String(s).padStart(w);
  const row = (cells, widths) => "  " + cells.map((c, i) => (i === 0 ? String(c).padEnd(widths[0]) : pad(c, widths[i]))).join("  ");

  console.log(`\nkeel-lock on local workerd: 2 Workers (separate isolates), one Durable Object lock store`);
  console.log(`key "invoice:42"; each request runs lock("invoice:42").run(charge)\n`);

  // 1. Try once: exactly one request charges; everyone else is told the invoice is being charged.
  const once = await scenario("immediate", TRY_ONCE);
  console.log(`1) ${TRY_ONCE} concurrent requests, run() without waiting`);
  let w = [14, 9, 8, 30];
  console.log(row(["Worker", "requests", "charged", "told someone else held it"], w));
  for (const name of Object.keys(workers)) {
    const mine = once.results.filter((r) => r.worker === name);
    console.log(row([name, mine.length, mine.filter((r) => r.charged).length, mine.filter((r) => !r.charged).length], w));
  }
  const charged = once.results.filter((r) => r.charged).length;
  console.log(row(["total", TRY_ONCE, charged, TRY_ONCE - charged], w));
  console.log(`  ledger: ${once.stats.charges} charge(s) booked, at most ${once.stats.maxInside} inside at once, ${once.wall} ms wall\n`);

  // 2. Waiting: everyone gets a turn, strictly one at a time.
  const waiting = await scenario("wait", WAITING);
  console.log(`2) ${WAITING} concurrent requests, run(charge, { timeout: 60000 }), each charge takes ${PAY_MS} ms`);
  w = [14, 9, 8, 16, 16];
  console.log(row(["Worker", "requests", "charged", "median wait ms", "longest wait ms"], w));
  const median = (xs) => {
    const s = [...xs].sort((a, b) => a - b);
    return s.length ? s[Math.floor(s.length / 2)] : "-";
  };
  for (const name of [...Object.keys(workers), "total"]) {
    const mine = waiting.results.filter((r) => name === "total" || r.worker === name);
    const waits = mine.filter((r) => r.charged).map((r) => r.waitedMs);
    console.log(row([name, mine.length, waits.length, median(waits), waits.length ? Math.max(...waits) : "-"], w));
  }
  console.log(`  ledger: ${waiting.stats.charges} charge(s) booked, at most ${waiting.stats.maxInside} inside at once, ${waiting.wall} ms wall\n`);

  const ok = charged === 1 && once.stats.charges === 1 && once.stats.maxInside === 1 &&
    waiting.stats.charges === WAITING && waiting.stats.maxInside === 1;
  console.log(ok ? "exactly once across two isolates; waiting callers ran one at a time" : "UNEXPECTED RESULT");
  process.exitCode = ok ? 0 : 1;
} finally {
  await mf?.dispose();
  rmSync(out, { recursive: true, force: true });
}
