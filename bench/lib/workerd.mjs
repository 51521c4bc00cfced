// keel-lock in local workerd for the bench, the way tests/workers/harness.mjs does it: pack ../pkg
// with `npm pack` (only the files the package ships), unpack it as node_modules/keel-lock of a
// temporary project, bundle bench/workers/*.js with wrangler (`deploy --dry-run`, which honours the
// package's `workerd` export condition) and run the bundles in Miniflare. Every Miniflare started
// here is disposed by its caller; anything still open is disposed on exit/signal as a fallback.
import { execFileSync, spawn } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
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

const WORKERD_BIN = join(BENCH, "node_modules", ".bin", "workerd");
// workerd processes still running when this process exits are killed with it.
const children = new Set();
process.on("exit", () => {
  for (const child of children) child.kill("SIGKILL");
});
const CLASSES = { keel: ["LockDurableObject", "LOCKS"], floor: ["FloorLockObject", "FLOOR_LOCKS"] };

/**
 * workerd's own config (capnp text) for a bench Worker's bundle in `dir`: its modules (the
 * entry first), its Durable Object class on SQLite storage in `disk`, and one HTTP socket whose
 * address the command line sets.
 */
function workerdConfig(name, dir, disk) {
  const files = readdirSync(dir).filter((f) => /\.(m?js|wasm)$/.test(f));
  const entry = `${name}.js`;
  files.sort((a, b) => (b === entry) - (a === entry));
  const modules = files.map((f) => `(name = "${f}", ${f.endsWith(".wasm") ? "wasm" : "esModule"} = embed "${f}")`);
  const [className, binding] = CLASSES[name];
  return `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [ (name = "main", worker = .bench), (name = "disk", disk = (path = "${disk}", writable = true)) ],
  sockets = [ (name = "http", address = "127.0.0.1:0", http = (), service = "main") ],
);
const bench :Workerd.Worker = (
  modules = [ ${modules.join(", ")} ],
  compatibilityDate = "${COMPAT_DATE}",
  durableObjectNamespaces = [ (className = "${className}", uniqueKey = "bench-${name}", enableSql = true) ],
  durableObjectStorage = (localDisk = "disk"),
  bindings = [ (name = "${binding}", durableObjectNamespace = (className = "${className}")) ],
);
`;
}

/**
 * Starts the named bench Worker in workerd itself, without Miniflare: a `workerd serve` process
 * on its own config, its storage in a fresh directory. Resolves once workerd reports (on its
 * control fd) that the socket listens, which it does after loading the Worker's modules;
 * `fetch(path, body)` sends a request (a POST of `body` as JSON when given), `dispose()` stops the
 * process.
 */
export async function startWorkerd(name) {
  const dir = buildWorkers()[name];
  const disk = mkdtempSync(join(tmpdir(), "keel-bench-workerd-"));
  const config = join(dir, "workerd.capnp");
  writeFileSync(config, workerdConfig(name, dir, disk));
  const child = spawn(WORKERD_BIN, ["serve", config, "--control-fd=3"], { stdio: ["ignore", "ignore", "pipe", "pipe"], env });
  let stderr = "";
  child.stderr.on("data", (d) => (stderr += d));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((resolve) => child.once("exit", resolve));
      child.kill("SIGKILL");
      await exited;
    }
    rmSync(disk, { recursive: true, force: true });
  };
  children.add(child);
  child.once("exit", () => children.delete(child));
  const port = await new Promise((resolve, reject) => {
    let buffered = "";
    child.stdio[3].on("data", (d) => {
      buffered += d;
      for (const line of buffered.split("\n").slice(0, -1)) {
        const event = JSON.parse(line);
        if (event.event === "listen" && event.socket === "http") resolve(event.port);
      }
      buffered = buffered.slice(buffered.lastIndexOf("\n") + 1);
    });
    child.once("exit", (code) => reject(new Error(`workerd (${name}) exited with ${code} before listening: ${stderr}`)));
  }).catch(async (e) => {
    await stop();
    throw e;
  });
  return {
    async fetch(path, body) {
      const init = body === undefined ? undefined : { method: "POST", body: JSON.stringify(body) };
      const res = await fetch(`http://127.0.0.1:${port}${path}`, init);
      const json = await res.json();
      if (res.status !== 200) throw new Error(`${name} ${path}: ${json.error ?? res.status}`);
      return json;
    },
    dispose: stop,
  };
}
