// keel-lock/redis: the waitForReplicas option. After every grant (and every extend) the store
// sends WAIT numreplicas timeout on the connection that made the write, to the node serving the
// key, and answers the grant only once that many replicas acknowledged it; otherwise the grant
// is given back and the call rejects with LockNotReplicatedError. What it covers and what it
// does not: stores/README.md, "Waiting for replicas (Redis)".

import { MAX_TTL_MS } from "./args.js";
import { CONFIRM_SCRIPT, CONFIRM_SHA } from "./redis-scripts.js";

/**
 * A grant (or an extend) that `required` replicas did not acknowledge within the option's
 * timeout, or whose WAIT failed: it may not survive a failover, so the store did not answer it.
 * A grant has been given back (`released`: whether that release answered); an extend is left as
 * it was, held until the expiry it had before.
 */
export class LockNotReplicatedError extends Error {
  constructor(message, { key, operation, acknowledged, required, released, cause }) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = "LockNotReplicatedError";
    /** The lock key. */
    this.key = key;
    /** The store method: "acquire", "acquireMany", "acquireShared", "acquireOrWait", "acquireSharedOrWait" or "extend". */
    this.operation = operation;
    /** Replicas that acknowledged, as WAIT answered; null when no WAIT answered. */
    this.acknowledged = acknowledged;
    /** The option's `replicas`. */
    this.required = required;
    /** For a grant: whether giving it back answered (false: it expires with its TTL). */
    this.released = released;
  }
}

const MAX_REPLICAS = 2_147_483_647;

/** The option as given to redisLockStore: undefined (off) or { replicas, timeoutMs }. */
export function replicasOption(option) {
  if (option === undefined) return null;
  if (option === null || typeof option !== "object" || Array.isArray(option)) {
    throw new TypeError("redisLockStore: waitForReplicas must be an object { replicas, timeoutMs }");
  }
  for (const name of Object.keys(option)) {
    if (name !== "replicas" && name !== "timeoutMs") {
      throw new TypeError(`redisLockStore: waitForReplicas takes replicas and timeoutMs, not ${JSON.stringify(name)}`);
    }
  }
  const { replicas, timeoutMs } = option;
  if (typeof replicas !== "number") throw new TypeError(`redisLockStore: waitForReplicas.replicas must be a number, got ${typeof replicas}`);
  if (typeof timeoutMs !== "number") throw new TypeError(`redisLockStore: waitForReplicas.timeoutMs must be a number, got ${typeof timeoutMs}`);
  if (!Number.isInteger(replicas) || replicas < 1 || replicas > MAX_REPLICAS) {
    throw new RangeError(`redisLockStore: waitForReplicas.replicas must be a whole number in 1..${MAX_REPLICAS}, got ${replicas}`);
  }
  // WAIT's timeout 0 means for ever: it would hold the connection as long as a replica is away.
  if (!Number.isInteger(timeoutMs) || timeoutMs < 1 || timeoutMs > MAX_TTL_MS) {
    throw new RangeError(`redisLockStore: waitForReplicas.timeoutMs must be a whole number of ms in 1..${MAX_TTL_MS}, got ${timeoutMs}`);
  }
  return { replicas, timeoutMs };
}

// Where a command for a lock's names goes now, and WAIT sent there. On a single Redis there is
// one connection ("" every time). On a cluster, the node serving the names' slot as the
// client's slot map says: the script went there (routed by its first key), and WAIT, which has no
// key, is sent there too — on an ioredis Cluster to that node's connection in the client's pool,
// on a node-redis cluster through sendCommand(firstKey, …), which routes by the key given. A slot
// whose node changed between the grant and the WAIT (a failover, a MOVED followed) cannot be
// vouched for: `send` answers null.
function router(client, clientType, args) {
  switch (clientType) {
    case "ioredis":
      return {
        route: () => "",
        send: () => (typeof client.wait === "function" ? client.wait(...args) : client.call("WAIT", ...args)),
      };
    case "node-redis":
      return { route: () => "", send: () => client.sendCommand(["WAIT", ...args]) };
    case "ioredis-cluster": {
      const nodeKey = (node) => `${node.options?.host}:${node.options?.port}`;
      return {
        route: (names) => client.slots?.[names.slot]?.[0] ?? null,
        send(names, at) {
          if (at === null || (client.slots?.[names.slot]?.[0] ?? null) !== at) return null;
          const node = client.nodes("master").find((n) => nodeKey(n) === at);
          if (!node) return null;
          return typeof node.wait === "function" ? node.wait(...args) : node.call("WAIT", ...args);
        },
      };
    }
    case "node-redis-cluster": {
      const master = (names) => {
        try {
          return client.getSlotMaster(names.slot)?.address ?? null;
        } catch {
          return null;
        }
      };
      return {
        route: master,
        send: (names, at) => (at === null || master(names) !== at ? null : client.sendCommand(names[0], false, ["WAIT", ...args])),
      };
    }
    case "glide":
    case "glide-cluster":
      throw new TypeError("redisLockStore: waitForReplicas is not supported with a Valkey GLIDE client");
    default:
      throw new TypeError(
        `redisLockStore: waitForReplicas needs a connection to send WAIT on; ${clientType} has none ` +
          "(a REST client sends each command on its own)",
      );
  }
}

/**
 * The store's side of the option, or null when it is off. `route(names)` is called before the
 * script that may grant is sent; `granted(…)` after it granted, with what `route` answered.
 */
export function replicaWaiter({ client, clientType, option, runScript }) {
  if (option === null) return null;
  const { replicas, timeoutMs } = option;
  const { route, send } = router(client, clientType, [String(replicas), String(timeoutMs)]);

  // Rejects with LockNotReplicatedError after giving the grant back (`undo`, if any).
  async function refuse(operation, key, acknowledged, why, undo, cause) {
    let released = false;
    if (undo) {
      try {
        await undo();
        released = true;
      } catch {
        // it expires with its TTL
      }
    }
    const after =
      operation === "extend"
        ? "the lock keeps the expiry it had before"
        : !undo
          ? "nothing was left to release"
          : released
            ? "the grant was released"
            : "the grant could not be released and lapses at its TTL";
    throw new LockNotReplicatedError(`redisLockStore: ${operation} of ${JSON.stringify(key)} was not confirmed by ${replicas} replica${replicas === 1 ? "" : "s"}: ${why}; ${after}`, {
      key,
      operation,
      acknowledged,
      required: replicas,
      released: undo ? released : false,
      cause,
    });
  }

  // WAIT on the connection that wrote, then `answer`, or the refusal.
  async function waited(operation, key, names, at, answer, undo) {
    let reply;
    try {
      const sent = send(names, at);
      reply = sent === null ? null : await sent;
    } catch (error) {
      const text = String(error?.message ?? error);
      return refuse(operation, key, null, `WAIT failed (${text}); waitForReplicas needs a server that accepts WAIT`, undo, error);
    }
    if (reply === null) return refuse(operation, key, null, "the key's slot moved to another node after the grant", undo);
    const acknowledged = Number(reply);
    if (!(acknowledged >= replicas)) {
      return refuse(operation, key, Number.isFinite(acknowledged) ? acknowledged : null, `WAIT answered ${String(reply)} within ${timeoutMs} ms`, undo);
    }
    return answer;
  }

  return {
    route,
    /** After a grant (or extend) this store's own script made on the connection `at` names. */
    granted: waited,
    /**
     * After a hand-over, a grant another connection's script made: the confirm script first (a
     * write of this connection's, after the grant), then WAIT.
     */
    async handedOver(operation, key, names, owner, answer, undo) {
      const at = route(names);
      let held;
      try {
        held = Number(await runScript(CONFIRM_SHA, CONFIRM_SCRIPT, [names[0], names[1]], [owner]));
      } catch (error) {
        return refuse(operation, key, null, `the confirm script failed (${String(error?.message ?? error)})`, undo, error);
      }
      if (held !== 1) return refuse(operation, key, null, "the hold was gone by the time it was confirmed", null);
      return waited(operation, key, names, at, answer, undo);
    },
  };
}
