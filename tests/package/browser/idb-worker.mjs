// A dedicated worker contending with the pages (see idb-contend.mjs). The handler is set before
// anything is imported: keel-lock's module awaits its wasm at the top level, and a message that
// arrives before a handler exists is lost.
self.onmessage = async ({ data }) => {
  try {
    const { contend } = await import("./idb-contend.mjs");
    self.postMessage({ ok: true, result: await contend(data) });
  } catch (error) {
    self.postMessage({ ok: false, error: String(error?.stack ?? error) });
  }
};
