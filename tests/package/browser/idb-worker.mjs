// A dedicated worker of the tests: a contender (idb-contend.mjs), or, with `task`, one call of
// the store made here (`acquire`, `extend`, `release` with the message's key, owner and TTL). The
// handler is set before anything is imported: keel-lock's module awaits its wasm at the top
// level, and a message that arrives before a handler exists is lost.
const stores = new Map();

self.onmessage = async ({ data }) => {
  try {
    if (data.task === undefined) {
      const { contend } = await import("./idb-contend.mjs");
      self.postMessage({ ok: true, result: await contend(data) });
      return;
    }
    const { indexedDbLockStore } = await import("keel-lock/indexeddb");
    if (!stores.has(data.db)) stores.set(data.db, indexedDbLockStore({ name: data.db }));
    const store = stores.get(data.db);
    const args = data.task === "release" ? [data.key, data.owner] : [data.key, data.owner, data.ttlMs];
    self.postMessage({ ok: true, result: await store[data.task](...args) });
  } catch (error) {
    self.postMessage({ ok: false, error: String(error?.stack ?? error) });
  }
};
