// One contender thread for the SQLite race: its own better-sqlite3 connection to the shared
// file, waits at a barrier so every thread starts together, then tries to acquire one key.
// Answers [{ owner, answer }] for every attempt (answer: { fence } or false).
import { parentPort, workerData } from "node:worker_threads";
import Database from "better-sqlite3";
import { databaseLockStore } from "../../../pkg/stores/sql.js";

const { file, key, owners, ttl, barrier } = workerData;
const db = new Database(file, { timeout: 10_000 });
const store = databaseLockStore(db);
const gate = new Int32Array(barrier);
Atomics.add(gate, 1, 1); // ready
Atomics.wait(gate, 0, 0); // until the main thread opens the gate
const attempts = [];
for (const owner of owners) {
  attempts.push({ owner, answer: await store.acquire(key, owner, ttl) });
}
db.close();
parentPort.postMessage(attempts);
