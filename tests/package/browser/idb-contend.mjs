// One contender of the cross-context test, in a page or a dedicated worker: `rounds` runs of
// lock(key).run(fn) through indexedDbLockStore. fn records its entry and exit in a log database
// of its own (one readwrite transaction each, so the log's order is the order they happened in):
// an entry while another contender is inside, or an exit by someone not inside, is logged as an
// overlap. The contenders start together, at a barrier kept in the same log database.
import { lock, onLockEvent, setLockStore } from "keel-lock";
import { indexedDbLockStore } from "keel-lock/indexeddb";

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export function openLog(name) {
  return new Promise((resolve, reject) => {
    const request = indexedDB.open(name, 1);
    request.onupgradeneeded = () => {
      request.result.createObjectStore("log", { autoIncrement: true });
      request.result.createObjectStore("state");
    };
    request.onsuccess = () => resolve(request.result);
    request.onerror = () => reject(request.error);
  });
}

/** One readwrite transaction over log and state; `body(log, state, answer)`; resolves once committed. */
export function logged(db, body) {
  return new Promise((resolve, reject) => {
    const tx = db.transaction(["log", "state"], "readwrite");
    let value;
    body(tx.objectStore("log"), tx.objectStore("state"), (v) => (value = v));
    tx.oncomplete = () => resolve(value);
    tx.onabort = () => reject(tx.error);
  });
}

export function readLog(db) {
  return logged(db, (log, _state, answer) => {
    log.getAll().onsuccess = (e) => answer(e.target.result);
  });
}

export async function contend({ who, key, rounds, contenders, db, logDb }) {
  const store = indexedDbLockStore({ name: db });
  setLockStore(store);
  const log = await openLog(logDb);
  let waited = 0;
  const stop = onLockEvent((event) => {
    if (event.type === "granted" && event.waitedMs > 0) waited++;
  });
  // The barrier: every contender registered, or 30 s passed (then the test fails on the count).
  await logged(log, (_log, state) => state.put(true, `ready:${who}`));
  const deadline = Date.now() + 30_000;
  for (;;) {
    const ready = await logged(log, (_log, state, answer) => {
      state.getAllKeys().onsuccess = (e) => answer(e.target.result.filter((k) => String(k).startsWith("ready:")).length);
    });
    if (ready >= contenders) break;
    if (Date.now() > deadline) throw new Error(`${who}: only ${ready} of ${contenders} contenders ready within 30 s`);
    await sleep(20);
  }
  const fences = [];
  for (let i = 0; i < rounds; i++) {
    const [ran] = await lock(key, 30_000).run(
      async ({ fence }) => {
        await logged(log, (entries, state) => {
          state.get("inside").onsuccess = (e) => {
            const inside = e.target.result;
            if (inside !== undefined && inside !== null) entries.add({ type: "overlap", who, inside });
            state.put(who, "inside");
            entries.add({ type: "enter", who, fence });
          };
        });
        await sleep(Math.floor(Math.random() * 4));
        await logged(log, (entries, state) => {
          state.get("inside").onsuccess = (e) => {
            if (e.target.result !== who) entries.add({ type: "overlap", who, inside: e.target.result ?? null });
            state.put(null, "inside");
            entries.add({ type: "exit", who, fence });
          };
        });
        fences.push(fence);
      },
      { timeout: 120_000, retryDelay: 5 },
    );
    if (!ran) throw new Error(`${who}: run ${i} was not granted within 120 s`);
  }
  stop();
  log.close();
  store.close();
  return { who, ran: fences.length, fences, waited };
}
