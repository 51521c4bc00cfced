// keel-lock in local workerd for the bench, the way tests/workers/harness.mjs does it: pack ../pkg
// with `npm pack` (only the files the package ships), unpack it as node_modules/keel-lock of a
// temporary project, bundle bench/workers/*.js with wrangler (`deploy --dry-run`, which honours the
// package's `workerd` export condition) and run the bundles in Miniflare. Every Miniflare started
// here is disposed by its caller; anything still open is disposed on exit/signal as a fallback.
import { execFileSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Miniflare } from "miniflare";

const HERE = dirname(fileURLToPath(import.meta.url));
const BENCH = join(HERE, "..");
export const COMPAT_DATE = "2026-04-26";
const env = { ...process.env, WRANGLER_SEND_METRICS: "false", CLOUDFLARE_CF_FETCH_ENABLED: "false", NO_COLOR: "1" };

let built;
/** Bundles keel.js and floor.js once per process; answers their output directories. */
export function buildWorkers() {
  if (built) return built;
  const root = mkdtempSync(join(tmpdir(), "keel-bench-workers-"));
  process.on("exit", () => rmSync(root, { recursive: true, force: true }));
  const pkg = join(BENCH, "..", "pkg");
  execFileSync("npm", ["pack", "--silent", "--pack-destination", root], { cwd: pkg, env, stdio: ["ignore", "ignore", "inherit"] });
  const tgz = readdirSync(root).find((f) => f.endsWith(".tgz"));
  const dest = join(root, "node_modules", "keel-lock");
  mkdirSync(dest, { recursive: true });
  execFileSync("tar", ["xzf", join(root, tgz), "-C", dest, "--strip-components=1"]);
  cpSync(join(BENCH, "workers"), join(root, "src"), { recursive: true });
  const wrangler = join(BENCH, "node_modules", ".bin", "wrangler");
  const out = { root };
  for (const name of ["keel", "floor"]) {
    out[name] = join(root, "out", name);
    execFileSync(wrangler, ["deploy", "--dry-run", "--outdir", out[name], `src/${name}.js`, "--name", name, "--compatibility-date", COMPAT_DATE], {
      cwd: root,
      env,
      stdio: ["ignore", "ignore", "inherit"],
    });
  }
  built = out;
  return built;
}

const modulesRules = [
  { type: "ESModule", include: ["**/*.js", "**/*.mjs"] },
  { type: "CompiledWasm", include: ["**/*.wasm"] },
];
const WORKERS = {
  keel: (dir) => ({ durableObjects: { LOCKS: { className: "LockDurableObject", useSQLite: true } }, dir }),
  floor: (dir) => ({ durableObjects: { FLOOR_LOCKS: { className: "FloorLockObject", useSQLite: true } }, dir }),
};

const open = new Set();
const disposeAll = () => {
  for (const mf of open) mf.dispose().catch(() => {});
  open.clear();
};
process.on("exit", disposeAll);

/** Starts Miniflare with the named bench Workers (first one answers `dispatchFetch`). */
export async function startWorkers(names) {
  const b = buildWorkers();
  const mf = new Miniflare({
    durableObjectsPersist: false,
    workers: names.map((name) => {
      const w = WORKERS[name](b[name]);
      return {
        name,
        modules: true,
        modulesRules,
        modulesRoot: w.dir,
        scriptPath: join(w.dir, `${name}.js`),
        compatibilityDate: COMPAT_DATE,
        durableObjects: w.durableObjects,
      };
    }),
  });
  open.add(mf);
  try {
    await mf.ready;
  } catch (e) {
    open.delete(mf);
    await mf.dispose().catch(() => {});
    throw e;
  }
  const targets = new Map();
  const call = async (name, path, body) => {
    let t = targets.get(name);
    if (!t) targets.set(name, (t = name === names[0] ? mf : await mf.getWorker(name)));
    const init = { method: body === undefined ? "GET" : "POST", body: body === undefined ? undefined : JSON.stringify(body) };
    const url = `http://bench.local${path}`;
    const res = t === mf ? await mf.dispatchFetch(url, init) : await t.fetch(url, init);
    const json = await res.json();
    if (res.status !== 200) throw new Error(`${name} ${path}: ${json.error ?? res.status}`);
    return json;
  };
  return {
    mf,
    call,
    async dispose() {
      open.delete(mf);
      await mf.dispose();
    },
  };
}
