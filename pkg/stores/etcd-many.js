// keel-lock/etcd: acquireMany — several keys in one transaction, all or none. etcd's
// transactions span any keys (there are no slots), so any set of keys is taken in one step:
// a lease per key (each hold keeps a lease of its own, as acquire's do) and one transaction
//   If(for every key: create_revision(P+K) == 0, nobody queued, no shared hold)
//   Then(put every key, and its metadata, each with its own lease)
// Every fence is that transaction's revision. etcd limits the operations of one transaction
// (`--max-txn-ops`, default 128): a set with more compares than that answers null, and the
// keys are taken one at a time.

import { checkKeySet } from "./args.js";
import { checkMetadataList } from "./metadata.js";
import { b64, rangeEndOf } from "./etcd-client.js";

/** Most compares (or puts) one transaction may carry on a cluster with etcd's default limit. */
export const MAX_TXN_OPS = 128;

export function etcdMany({ who, call, names, shared, leaseSeconds, grant, revoke, revokeLater, holdPuts, readHold, toFence }) {
  const method = `${who}.acquireMany`;

  function compares(key) {
    const { lock, queue } = names(key);
    return [
      { key: b64(lock), target: "CREATE", result: "EQUAL", create_revision: "0" },
      { key: b64(queue), range_end: b64(rangeEndOf(queue)), target: "CREATE", result: "EQUAL", create_revision: "0" },
      { ...shared.sharedRange(key), target: "CREATE", result: "EQUAL", create_revision: "0" },
    ];
  }

  async function acquireMany(keys, owners, ttlMs, metadata) {
    checkKeySet(method, keys, owners, ttlMs);
    const metas = checkMetadataList(method, metadata, keys.length);
    const compare = keys.flatMap(compares);
    const puts = (leases) => keys.flatMap((key, i) => holdPuts(key, owners[i], metas?.[i] ?? null, leases[i]));
    if (compare.length > MAX_TXN_OPS || puts(keys).length > MAX_TXN_OPS) return null;
    for (let attempt = 0; ; attempt++) {
      const leases = await Promise.all(keys.map(() => grant(leaseSeconds(ttlMs))));
      let reply;
      try {
        reply = await call("/v3/kv/txn", { compare, success: puts(leases) }, { write: true });
      } catch (error) {
        if (error.etcdCode === 3 && /too many operations/i.test(error.message)) {
          // A cluster with a lower --max-txn-ops: nothing changed; one key at a time.
          leases.forEach(revokeLater);
          return null;
        }
        if (!error.outcomeUnknown) {
          leases.forEach(revokeLater);
          throw error;
        }
        // All or none, at one revision: the first key shows which, and the fence of every key.
        const hold = await readHold(keys[0]);
        if (hold && hold.owner === owners[0] && hold.lease === leases[0]) return keys.map(() => ({ fence: hold.fence }));
        await Promise.all(leases.map((lease) => revoke(lease)));
        if (attempt >= 1) throw error;
        continue;
      }
      if (reply.succeeded === true) {
        const fence = toFence(reply.header?.revision, "the acquiring transaction's revision");
        return keys.map(() => ({ fence }));
      }
      leases.forEach(revokeLater);
      return false;
    }
  }

  return { acquireMany };
}
