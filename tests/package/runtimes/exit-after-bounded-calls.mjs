// Entry for Deno and Bun: store calls bounded by a 60 s TTL, then nothing left to do — the process
// must end on its own (a cancelled bound must not keep the event loop alive).
import { lock, setLockStore } from "keel-lock";

const rows = new Map();
setLockStore({
  async acquire(k, o) { if (rows.has(k)) return false; rows.set(k, o); return true; },
  async release(k, o) { return rows.get(k) === o && rows.delete(k); },
  async extend(k, o) { return rows.get(k) === o; },
  async isLocked(k) { return rows.has(k); },
  async remainingTime() { return null; },
});
const l = lock("k", 60_000);
const [ran] = await l.run(async () => { await l.extend(); return 1; }, { timeout: 60_000 });
console.log(JSON.stringify({ ran, locked: await l.isLocked() }));
