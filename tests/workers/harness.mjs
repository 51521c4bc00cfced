// Builds what a user would deploy and runs it in real workerd (Miniflare): packs ../../pkg with
// `npm pack` (so only the files the package ships are used), installs the tarball into a
// temporary project, bundles the test Workers with wrangler (`deploy --dry-run`, which honours
// the package's `workerd` export condition) and starts Miniflare on the bundles.
import { execFileSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Miniflare } from "miniflare";

const here = dirname(fileURLToPath(import.meta.url));
export const COMPAT_DATE = "2026-04-26";
const env = { ...process.env, WRANGLER_SEND_METRICS: "false", CLOUDFLARE_CF_FETCH_ENABLED: "false", NO_COLOR: "1" };

let packed;
/** Packs the package and installs it, with the test Workers' sources, into a temporary project (once per process). */
function pack() {
  if (packed) return packed;
  const root = mkdtempSync(join(tmpdir(), "keel-workers-"));
  const pkg = join(here, "..", "..", "pkg");
  execFileSync("npm", ["pack", "--silent", "--pack-destination", root], { cwd: pkg, env, stdio: ["ignore", "ignore", "inherit"] });
  const tgz = readdirSync(root).find((f) => f.endsWith(".tgz"));
  const dest = join(root, "node_modules", "keel-lock");
  mkdirSync(dest, { recursive: true });
  execFileSync("tar", ["xzf", join(root, tgz), "-C", dest, "--strip-components=1"]);
  cpSync(join(here, "workers"), join(root, "src"), { recursive: true });
  // keel-lock/otel's optional peer, and the SDK the test Worker records spans with.
  cpSync(join(here, "node_modules", "@opentelemetry"), join(root, "node_modules", "@opentelemetry"), { recursive: true });
  process.on("exit", () => rmSync(root, { recursive: true, force: true }));
  packed = root;
  return root;
}

const bundled = new Map();
/** Bundles the test Worker `src/<name>.js` once per process; answers its output directory. */
function bundle(name) {
  if (bundled.has(name)) return bundled.get(name);
  const root = pack();
  const out = join(root, "out", name);
  const wrangler = join(here, "node_modules", ".bin", "wrangler");
  execFileSync(
    wrangler,
    ["deploy", "--dry-run", "--outdir", out, `src/${name}.js`, "--name", name, "--compatibility-date", COMPAT_DATE],
    { cwd: root, env, stdio: ["ignore", "ignore", "inherit"] },
  );
  bundled.set(name, out);
  return out;
}

/** Bundles `main.js` and `other.js` once per process; answers their output directories. */
export function build() {
  return { root: pack(), main: bundle("main"), other: bundle("other") };
}

const modulesRules = [
  { type: "ESModule", include: ["**/*.js", "**/*.mjs"] },
  { type: "CompiledWasm", include: ["**/*.wasm"] },
];

/** Worker A ("main", owns LOCKS and COUNTER) and worker B ("other", bound to A's namespaces). */
export async function start({ persist } = {}) {
  const b = build();
  const mf = new Miniflare({
    durableObjectsPersist: persist ?? false,
    workers: [
      {
        name: "main",
        modules: true,
        modulesRules,
        modulesRoot: b.main,
        scriptPath: join(b.main, "main.js"),
        compatibilityDate: COMPAT_DATE,
        durableObjects: {
          LOCKS: { className: "LockDurableObject", useSQLite: true },
          COUNTER: { className: "Counter", useSQLite: true },
          LEDGER: { className: "Ledger", useSQLite: true },
        },
        d1Databases: ["DB"],
      },
      {
        name: "other",
        modules: true,
        modulesRules,
        modulesRoot: b.other,
        scriptPath: join(b.other, "other.js"),
        compatibilityDate: COMPAT_DATE,
        durableObjects: {
          LOCKS: { className: "LockDurableObject", scriptName: "main", useSQLite: true },
          COUNTER: { className: "Counter", scriptName: "main", useSQLite: true },
        },
      },
    ],
  });
  await mf.ready;
  const call = async (worker, path, body) => {
    const init = {
      method: body === undefined ? "GET" : "POST",
      body: body === undefined ? undefined : JSON.stringify(body),
    };
    const url = `http://keel.test${path}`;
    const res = worker === "main" ? await mf.dispatchFetch(url, init) : await (await mf.getWorker(worker)).fetch(url, init);
    const json = await res.json();
    if (res.status !== 200) throw new Error(`${worker} ${path}: ${json.error ?? res.status}`);
    return json;
  };
  return { mf, call, dispose: () => mf.dispose() };
}

/**
 * Worker C ("etcd", no bindings): keel-lock/etcd inside workerd, reaching etcd (on loopback)
 * through the Worker's own fetch. `call(path, body)` POSTs JSON to it and answers the reply.
 */
export async function startEtcdWorker() {
  const out = bundle("etcd");
  const mf = new Miniflare({
    name: "etcd",
    modules: true,
    modulesRules,
    modulesRoot: out,
    scriptPath: join(out, "etcd.js"),
    compatibilityDate: COMPAT_DATE,
  });
  await mf.ready;
  const call = async (path, body) => {
    const res = await mf.dispatchFetch(`http://keel.test${path}`, { method: "POST", body: JSON.stringify(body) });
    const json = await res.json();
    if (res.status !== 200) throw new Error(`etcd ${path}: ${json.error ?? res.status}`);
    return json;
  };
  return { mf, call, dispose: () => mf.dispose() };
}
