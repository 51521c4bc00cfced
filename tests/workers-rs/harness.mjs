// Builds what users would deploy and runs it in real workerd (Miniflare):
// * the Rust Worker: `wrangler deploy --dry-run` on examples/workers-rs/wrangler.toml, which runs
//   its [build] command (`worker-build --release`) and bundles entry.js with the build output;
// * a JS Worker (workers/js.js) on the packed npm package: `npm pack` of ../../pkg, installed into
//   a temporary project and bundled by wrangler under the package's `workerd` export condition.
import { execFileSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { homedir, tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Miniflare } from "miniflare";

const here = dirname(fileURLToPath(import.meta.url));
const top = join(here, "..", "..");
const bin = (name) => join(here, "node_modules", ".bin", name);
export const COMPAT_DATE = "2026-04-26";
const env = {
  ...process.env,
  PATH: `${join(homedir(), ".cargo", "bin")}:${process.env.PATH}`,
  // worker-build would download these from GitHub / npm; use the ones already installed.
  WASM_BINDGEN_BIN: process.env.WASM_BINDGEN_BIN ?? join(homedir(), ".cargo", "bin", "wasm-bindgen"),
  WASM_OPT_BIN: process.env.WASM_OPT_BIN ?? bin("wasm-opt"),
  ESBUILD_BIN: process.env.ESBUILD_BIN ?? bin("esbuild"),
  WRANGLER_SEND_METRICS: "false",
  CLOUDFLARE_CF_FETCH_ENABLED: "false",
  NO_COLOR: "1",
};

let built;
/** Builds both Workers once per process; answers their bundle directories. */
export function build() {
  if (built) return built;
  const root = mkdtempSync(join(tmpdir(), "keel-workers-rs-"));
  process.on("exit", () => rmSync(root, { recursive: true, force: true }));
  const quiet = { env, stdio: ["ignore", "ignore", "inherit"] };

  const rust = join(root, "out", "rust");
  const example = join(top, "examples", "workers-rs");
  execFileSync(bin("wrangler"), ["deploy", "--dry-run", "--outdir", rust, "-c", join(example, "wrangler.toml")], {
    ...quiet,
    cwd: example,
  });

  execFileSync("npm", ["pack", "--silent", "--pack-destination", root], { ...quiet, cwd: join(top, "pkg") });
  const tgz = readdirSync(root).find((f) => f.endsWith(".tgz"));
  const dest = join(root, "node_modules", "keel-lock");
  mkdirSync(dest, { recursive: true });
  execFileSync("tar", ["xzf", join(root, tgz), "-C", dest, "--strip-components=1"]);
  cpSync(join(here, "workers"), join(root, "src"), { recursive: true });
  const js = join(root, "out", "js");
  execFileSync(
    bin("wrangler"),
    ["deploy", "--dry-run", "--outdir", js, "src/js.js", "--name", "js", "--compatibility-date", COMPAT_DATE],
    { ...quiet, cwd: root },
  );
  built = { root, rust, js };
  return built;
}

const modulesRules = [
  { type: "ESModule", include: ["**/*.js", "**/*.mjs"] },
  { type: "CompiledWasm", include: ["**/*.wasm"] },
];

/**
 * Miniflare with three scripts, each its own isolate: "rust" (the example, owner of LEDGER),
 * "rust-b" (the same bundle again) and "js". `lockHost` names the script whose
 * LockDurableObject class serves the LOCKS namespace ("rust": the example's JS shim over its
 * own wasm; "js": the npm package's class); the others bind it by scriptName. `persist` keeps
 * Durable Object storage in that directory; the lock namespace's storage is keyed the same
 * whichever script hosts it, so a restart can switch hosts.
 */
export async function start({ lockHost = "rust", persist = false } = {}) {
  const b = build();
  const locks = (name) => ({
    className: "LockDurableObject",
    useSQLite: true,
    unsafeUniqueKey: "keel-lock-LOCKS",
    ...(name === lockHost ? {} : { scriptName: lockHost }),
  });
  const ledger = (name) => ({ className: "Ledger", useSQLite: true, ...(name === "rust" ? {} : { scriptName: "rust" }) });
  const worker = (name, dir, entry) => ({
    name,
    modules: true,
    modulesRules,
    modulesRoot: dir,
    scriptPath: join(dir, entry),
    compatibilityDate: COMPAT_DATE,
    durableObjects: { LOCKS: locks(name), LEDGER: ledger(name) },
  });
  const mf = new Miniflare({
    durableObjectsPersist: persist,
    workers: [worker("rust", b.rust, "entry.js"), worker("rust-b", b.rust, "entry.js"), worker("js", b.js, "js.js")],
  });
  try {
    await mf.ready;
  } catch (e) {
    await mf.dispose().catch(() => {});
    throw e;
  }
  const targets = { rust: mf };
  for (const name of ["rust-b", "js"]) targets[name] = await mf.getWorker(name);
  /** A request to one script; answers { status, body } (body parsed as JSON when it is JSON). */
  const request = async (name, path, body) => {
    const init = body === undefined ? {} : { method: "POST", body: JSON.stringify(body) };
    const url = `http://keel.test${path}`;
    const res = name === "rust" ? await mf.dispatchFetch(url, init) : await targets[name].fetch(url, init);
    const text = await res.text();
    let parsed = text;
    try {
      parsed = JSON.parse(text);
    } catch {}
    return { status: res.status, body: parsed };
  };
  const call = async (name, path, body) => {
    const { status, body: out } = await request(name, path, body);
    if (status !== 200) throw new Error(`${name} ${path}: HTTP ${status}: ${JSON.stringify(out)}`);
    return out;
  };
  return { mf, call, request, dispose: () => mf.dispose() };
}

/**
 * `n` concurrent `POST /charge` on one key, request i sent to `names[i % names.length]`; answers
 * the per-request outcomes and the ledger's view of the run.
 */
export async function race(w, names, { mode, n, key = `invoice:${crypto.randomUUID()}` }) {
  const run = `${mode}:${crypto.randomUUID()}`;
  const results = await Promise.all(
    Array.from({ length: n }, (_, i) => w.call(names[i % names.length], "/charge", { run, mode, key, expected: n, payMs: 10 })),
  );
  const ledger = await w.call("rust", `/ledger?run=${encodeURIComponent(run)}`);
  return { results, ledger, charged: results.filter((r) => r.charged), key };
}
