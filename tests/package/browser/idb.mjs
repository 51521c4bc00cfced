// The page of indexeddb.test.mjs. `?role=` says what it does; its answer lands in
// window.__idbResult as { ok, result } or { ok: false, error }:
//   units    the store's own tests (idb-units.mjs), one connection or several, in this page
//   contend  one contender (idb-contend.mjs); with `worker=1` a dedicated worker contends too
//   log      the log the contenders wrote
import { contend, openLog, readLog } from "./idb-contend.mjs";

const params = new URLSearchParams(location.search);
const role = params.get("role");

async function main() {
  if (role === "units") {
    const { run } = await import("./node-test.mjs");
    await import("./idb-units.mjs");
    return run();
  }
  if (role === "contend") {
    const options = {
      key: params.get("key"),
      rounds: Number(params.get("rounds")),
      contenders: Number(params.get("contenders")),
      db: params.get("db"),
      logDb: params.get("log"),
    };
    const mine = contend({ ...options, who: params.get("who") });
    if (params.get("worker") !== "1") return [await mine];
    const worker = new Worker(new URL("./idb-worker.mjs", import.meta.url), { type: "module" });
    const theirs = new Promise((resolve, reject) => {
      worker.onmessage = ({ data }) => (data.ok ? resolve(data.result) : reject(new Error(`worker: ${data.error}`)));
      worker.onerror = (event) => reject(new Error(`worker: ${event.message}`));
    });
    worker.postMessage({ ...options, who: `${params.get("who")}-worker` });
    return Promise.all([mine, theirs]);
  }
  if (role === "log") {
    const db = await openLog(params.get("log"));
    try {
      return await readLog(db);
    } finally {
      db.close();
    }
  }
  throw new Error(`unknown role ${role}`);
}

main().then(
  (result) => {
    window.__idbResult = { ok: true, result };
    document.getElementById("out").textContent = JSON.stringify(result, null, 1);
  },
  (error) => {
    window.__idbResult = { ok: false, error: String(error?.stack ?? error) };
    document.getElementById("out").textContent = window.__idbResult.error;
  },
);
