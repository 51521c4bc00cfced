// keel-lock/etcd: watch(key, onChange) — each change of a key's exclusive holder pushed by an
// etcd watch (POST /v3/watch, a stream of one JSON message per line), for observe() and
// campaign(). How it works: stores/README.md, "Watching a key (etcd)".
//
// One stream per watch, over the names [P+K, P+K+"/n") with prev_kv: the lock key and its
// metadata key (P+K/m), which the same transaction writes, arrive in one message at one revision;
// other names in that range (other keys' names that start with P+K and a byte below "/") are
// passed over. A put of the lock key that creates it (version 1) is a grant: { fence: its
// create_revision, held: true, metadata (the /m put of that revision, or null), remainingMs (its
// lease's time to live, one request) }. A re-put (an extend onto a new lease) is not a change. A
// delete of the lock key (release, force-release, expiry) is an end: { fence: the deleted key's
// create_revision, held: false }. A stream that breaks is opened again from the revision after
// the last one seen, so nothing is missed; if etcd has compacted that revision away, onChange(null)
// says "look again" and the watch goes on from now.

import { b64, EtcdStoreError, int64, unb64 } from "./etcd-client.js";

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export function etcdWatching({ client, names, check, toFence }) {
  async function watch(key, onChange) {
    check.key(key);
    if (typeof onChange !== "function") throw new TypeError(`etcdLockStore.watch: onChange must be a function, got ${typeof onChange}`);
    const { lock, metadata } = names(key);
    const [lockB64, metaB64] = [b64(lock), b64(metadata)];
    const range = { key: lockB64, range_end: b64(`${lock}/n`) };
    const stopping = new AbortController();
    let next = null; // the revision to resume from, once known
    let chain = Promise.resolve(); // reports, in order
    // Every change received before stop() is told, in order, before stop() resolves.
    const report = (change) => {
      chain = chain.then(change).then(
        (value) => onChange(value),
        () => {},
      );
    };

    async function remainingMs(lease) {
      try {
        const reply = await client.call("/v3/lease/timetolive", { ID: lease });
        const ttl = int64(reply.TTL, "a lease's time to live", { signed: true });
        return ttl > 0 ? ttl * 1000 : 1;
      } catch {
        return 1;
      }
    }

    function take(events) {
      const byName = (name, type) => events.find((e) => e.kv?.key === name && (e.type ?? "PUT") === type);
      for (const event of events) {
        if (event.kv?.key !== lockB64) continue;
        const kv = event.kv;
        if ((event.type ?? "PUT") === "DELETE") {
          const prev = event.prev_kv;
          if (prev?.create_revision) report(async () => ({ fence: toFence(prev.create_revision, "a deleted hold's create_revision"), held: false }));
          else report(async () => null);
        } else if (int64(kv.version, "a key's version") === 1) {
          const meta = byName(metaB64, "PUT");
          const said = meta && meta.kv.mod_revision === kv.mod_revision ? unb64(meta.kv.value ?? "") : null;
          const fence = toFence(kv.create_revision, "a hold's create_revision");
          const lease = kv.lease ?? "0";
          report(async () => ({ fence, held: true, metadata: said, remainingMs: await remainingMs(lease) }));
        }
      }
    }

    // One stream, until it ends, fails or is stopped; resolves "created" through `ready`.
    async function stream(ready) {
      const body = { create_request: { ...range, prev_kv: true, ...(next === null ? {} : { start_revision: String(next) }) } };
      const response = await client.open("/v3/watch", body, stopping.signal);
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return "ended";
        buffer += decoder.decode(value, { stream: true });
        let newline;
        while ((newline = buffer.indexOf("\n")) >= 0) {
          const line = buffer.slice(0, newline).trim();
          buffer = buffer.slice(newline + 1);
          if (line === "") continue;
          const message = JSON.parse(line);
          if (message.error) return "failed";
          const result = message.result ?? {};
          if (result.compact_revision && result.compact_revision !== "0") return "compacted";
          if (result.canceled) return "failed";
          const revision = int64(result.header?.revision, "a watch's revision");
          if (result.created) {
            if (next === null) next = revision + 1;
            ready();
          }
          if (Array.isArray(result.events) && result.events.length > 0) {
            take(result.events);
            const last = int64(result.events[result.events.length - 1].kv?.mod_revision, "an event's revision");
            next = Math.max(next ?? 0, last + 1);
          }
        }
        if (buffer.length > 1 << 22) return "failed";
      }
    }

    let created;
    const subscribed = new Promise((resolve, reject) => (created = { resolve, reject }));
    const loop = (async () => {
      let tries = 0; // before the first stream was created: every endpoint twice, then reject
      let live = false;
      let pauseMs = 50;
      while (!stopping.signal.aborted) {
        let outcome;
        let failure = null;
        try {
          outcome = await stream(() => {
            live = true;
            pauseMs = 50;
            created.resolve();
          });
        } catch (error) {
          if (stopping.signal.aborted) return;
          failure = error;
          outcome = "failed";
        }
        if (!live && ++tries >= 2 * client.endpoints.length) {
          created.reject(failure ?? new EtcdStoreError(`etcd did not create a watch on ${JSON.stringify(key)} (its stream ${outcome})`));
          return;
        }
        if (stopping.signal.aborted) return;
        if (outcome === "compacted") {
          next = null; // from now on; what happened meanwhile is unknown
          report(async () => null);
        }
        await sleep(pauseMs);
        pauseMs = Math.min(2_000, pauseMs * 2);
      }
    })();
    await subscribed;
    return async function stop() {
      stopping.abort();
      await loop.catch(() => {});
      await chain;
    };
  }

  return { watch };
}
