// One contender thread for the SQLite race: its own better-sqlite3 connection to the shared
// file, waits at a barrier so every thread starts together, then tries to acquire one key.
import { parentPort, workerData } from "node:worker_threads";
import Database from "better-sqlite3";
import { databaseLockStore } from "../../../pkg/stores/sql.js";

const { file, key, owners, ttl, barrier } = workerData;
const db = new Database(file, { timeout: 10_000 });
const store = databaseLockStore(db);
const gate = new Int32Array(barrier);
Atomics.add(gate, 1, 1); // ready
Atomics.wait(gate, 0, 0); // until the main thread opens the gate
const won = [];
for (const owner of owners) {
  if (await store.acquire(key, owner, ttl)) won.push(owner);
}
db.close();
parentPort.postMessage(won);
