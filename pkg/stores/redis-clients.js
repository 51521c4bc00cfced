// keel-lock/redis: the Redis clients the store adapts to (ioredis and its Cluster, node-redis v4+
// and its cluster client, @upstash/redis, Valkey GLIDE's GlideClient and GlideClusterClient): detecting which one it was given, the four commands
// it sends through each, corking a standalone ioredis socket, and the store's own pub/sub
// connection.

export const CLIENT_TYPES = ["ioredis", "ioredis-cluster", "node-redis", "node-redis-cluster", "upstash", "glide", "glide-cluster"];

const glide = (type) => type === "glide" || type === "glide-cluster";

export function fn(client, name) {
  return typeof client[name] === "function";
}

// Whether the user has closed `client` (quit, disconnect): ioredis and its Cluster say "end" in
// `status`; node-redis clients (and node-redis v5's cluster) have `isOpen`; a GLIDE client has
// `isClosed`.
export function clientClosed(client, type) {
  if (glide(type)) return client.isClosed === true;
  if (type === "ioredis" || type === "ioredis-cluster") return client.status === "end";
  if (type === "node-redis" || type === "node-redis-cluster") return "isOpen" in client && client.isOpen === false;
  return false;
}

/**
 * Works out which client API `client` speaks.
 * node-redis has camel-cased `evalSha`; its cluster client also has `getSlotMaster`.
 * @upstash/redis has `evalsha` taking arrays plus `scriptLoad`.
 * ioredis has `evalsha` taking a key count and no `scriptLoad`; its Cluster has `isCluster === true`.
 * A Valkey GLIDE client has `invokeScript` and `customCommand`; its cluster client also has
 * `invokeScriptWithRoute`.
 */
export function detectRedisClient(client) {
  if (client === null || (typeof client !== "object" && typeof client !== "function")) return null;
  if (fn(client, "invokeScript") && fn(client, "customCommand")) {
    return fn(client, "invokeScriptWithRoute") ? "glide-cluster" : "glide";
  }
  if (fn(client, "evalSha") && fn(client, "set")) {
    return fn(client, "getSlotMaster") ? "node-redis-cluster" : "node-redis";
  }
  if (fn(client, "evalsha") && fn(client, "scriptLoad") && fn(client, "set")) return "upstash";
  if (fn(client, "evalsha") && fn(client, "set")) return client.isCluster === true ? "ioredis-cluster" : "ioredis";
  return null;
}

// Each adapter exposes the same four primitives; every one is a single Redis command. `keys` is
// an array whose first element decides the slot (cluster clients route by it).
export function adapter(client, type) {
  switch (type) {
    case "ioredis": {
      // Commands sent in one tick share writes (see corker). ioredis flattens array arguments
      // (one level), so keys and args go as the arrays they are, with no spread copy of them.
      const cork = corker(client);
      return {
        evalsha: (sha, keys, args) => (cork(), client.evalsha(sha, String(keys.length), keys, args)),
        eval: (script, keys, args) => (cork(), client.eval(script, String(keys.length), keys, args)),
        exists: (key) => (cork(), client.exists(key)),
        pttl: (key) => (cork(), client.pttl(key)),
      };
    }
    case "ioredis-cluster":
      return {
        evalsha: (sha, keys, args) => client.evalsha(sha, String(keys.length), keys, args),
        eval: (script, keys, args) => client.eval(script, String(keys.length), keys, args),
        exists: (key) => client.exists(key),
        pttl: (key) => client.pttl(key),
      };
    case "node-redis-cluster":
      // The cluster client's own evalSha does not route by keys[0] in node-redis v4 (its key
      // lookup reads the SHA argument), so scripts go through sendCommand(firstKey, …), which
      // both v4 and v5 route by the key given.
      return {
        evalsha: (sha, keys, args) =>
          client.sendCommand(keys[0], false, ["EVALSHA", sha, String(keys.length), ...keys, ...args]),
        eval: (script, keys, args) =>
          client.sendCommand(keys[0], false, ["EVAL", script, String(keys.length), ...keys, ...args]),
        exists: (key) => client.exists(key),
        pttl: (key) => (fn(client, "pTTL") ? client.pTTL(key) : client.PTTL(key)),
      };
    case "node-redis":
      return {
        evalsha: (sha, keys, args) => client.evalSha(sha, { keys, arguments: args }),
        eval: (script, keys, args) => client.eval(script, { keys, arguments: args }),
        exists: (key) => client.exists(key),
        pttl: (key) => (fn(client, "pTTL") ? client.pTTL(key) : client.PTTL(key)),
      };
    case "upstash":
      return {
        evalsha: (sha, keys, args) => client.evalsha(sha, keys, args),
        eval: (script, keys, args) => client.eval(script, keys, args),
        exists: (key) => client.exists(key),
        pttl: (key) => client.pttl(key),
      };
    case "glide":
    case "glide-cluster":
      // GLIDE's own script call (invokeScript) takes a Script object of its package, which the
      // store does not import; EVALSHA and EVAL go through customCommand instead, which a
      // GlideClusterClient routes by the first key, as it does its own script calls.
      return {
        evalsha: (sha, keys, args) => client.customCommand(["EVALSHA", sha, String(keys.length), ...keys, ...args]),
        eval: (script, keys, args) => client.customCommand(["EVAL", script, String(keys.length), ...keys, ...args]),
        exists: (key) => client.exists([key]),
        pttl: (key) => client.pttl(key),
      };
    default:
      throw new TypeError(`redisLockStore: unknown clientType ${JSON.stringify(type)}`);
  }
}

// For a standalone ioredis client, which writes each command to its socket as it is sent: one
// write system call per command, and one read for Redis. The function corker answers is called
// before the store sends a command; the first call in a tick corks the socket (Node then buffers
// what is written to it) and schedules the uncork with process.nextTick, which runs once the code
// now running and its promise callbacks are done. So the commands sent in one tick — by this
// store's concurrent callers, and anything else written to the client meanwhile — leave together,
// before any timer or I/O callback runs. Every CORKED_COMMANDS commands the buffer is written out
// at once, so Redis can start on those while the client is still sending the rest (with a whole
// tick in one write, client and server took turns instead of working at the same time). When the
// last tick that sent anything sent one command — a lone caller — the first command of this tick
// is not corked: it leaves at once, and what its caller does after sending overlaps with Redis's
// work instead of delaying the write; later commands of the tick are corked as above. Nothing is
// corked while the client is not ready (ioredis then queues commands itself) or has no socket
// with cork().
const CORKED_COMMANDS = 8;
function corker(client) {
  if (typeof globalThis.process?.nextTick !== "function") return () => {};
  let corked = null;
  let buffered = 0;
  let sent = 0; // commands sent this tick
  let previous = 0; // commands sent in the last tick that sent any
  const endOfTick = () => {
    previous = sent;
    sent = 0;
    const socket = corked;
    if (socket === null) return;
    corked = null;
    socket.uncork();
  };
  return () => {
    if (sent++ === 0) {
      process.nextTick(endOfTick);
      if (previous === 1) return;
    }
    if (corked === null) {
      const socket = client.stream;
      if (client.status !== "ready" || typeof socket?.cork !== "function" || typeof socket.uncork !== "function") return;
      socket.cork();
      corked = socket;
      buffered = 0;
    } else if (buffered === CORKED_COMMANDS) {
      corked.uncork();
      corked.cork();
      buffered = 0;
    }
    buffered++;
  };
}

/**
 * Resolves once an ioredis connection (or Cluster) is ready. A command sent before that waits in
 * the client's offline queue — or, with `enableOfflineQueue: false`, fails at once, and a
 * SUBSCRIBE that failed would leave the store without its pub/sub (hand-overs then reach their
 * waiters only at the next safety-net look, perhaps after the grant ran out). A duplicate of a
 * `lazyConnect` client connects here.
 */
function connected(connection) {
  if (connection.status === "ready") return Promise.resolve();
  return new Promise((resolve, reject) => {
    const done = (settle) => (value) => {
      connection.off("ready", onReady);
      connection.off("end", onEnd);
      settle(value);
    };
    const onReady = done(resolve);
    const onEnd = done(() => reject(new Error("redisLockStore: the pub/sub connection closed before it was ready")));
    connection.once("ready", onReady);
    connection.once("end", onEnd);
    if (connection.status === "wait") connection.connect().catch(() => {});
  });
}

// The store's pub/sub connection: a duplicate of the user's client (`duplicate()` in ioredis,
// ioredis Cluster, node-redis and its cluster client; a cluster client subscribes through one of
// its nodes, and PUBLISH reaches every node), subscribed to `channel`. `onMessage(text)` gets
// each message; `onReconnect()` runs when the connection comes back after a drop (messages sent
// meanwhile are lost). Answers { ready, connection, close(), listen(), unlisten(), barrier() };
// `ready` settles once subscribed. `listen(other, onText)` subscribes to one more channel (its
// promise settles once Redis confirmed it), `unlisten(other)` drops it; `barrier()` settles once
// every subscription sent before it is confirmed again after a reconnect (ioredis sends them
// again after its "ready"; node-redis has done so before its "ready").
export function openSubscriber(client, type, channel, onMessage, onReconnect) {
  if (glide(type)) return openGlideSubscriber(client, channel, onMessage);
  if (!fn(client, "duplicate")) {
    const ready = Promise.reject(new TypeError("redisLockStore: the client has no duplicate() to open a pub/sub connection with"));
    return { ready, connection: null, close: async () => {}, listen: () => ready, unlisten: async () => {}, barrier: async () => {} };
  }
  const connection = client.duplicate();
  const ignore = () => {};
  connection.on?.("error", ignore); // connection errors surface as lost messages, covered by the poll
  let subscribed = false;
  connection.on?.("ready", () => subscribed && onReconnect());
  const others = new Map(); // channel → onText, for the channels listen() added
  let ready;
  let close;
  let listen;
  let unlisten;
  let barrier;
  if (type === "ioredis" || type === "ioredis-cluster") {
    connection.on("message", (from, text) => {
      if (from === channel) onMessage(text);
      else others.get(from)?.(text);
    });
    ready = connected(connection).then(() => connection.subscribe(channel));
    close = async () => connection.disconnect();
    listen = (other, onText) => {
      others.set(other, onText);
      return connected(connection).then(() => connection.subscribe(other));
    };
    unlisten = async (other) => {
      others.delete(other);
      await connection.unsubscribe(other);
    };
    // SUBSCRIBE again: Redis confirms it after the subscriptions ioredis resent before it.
    barrier = async () => {
      if (others.size > 0) await connection.subscribe(...others.keys());
    };
  } else {
    ready = Promise.resolve(connection.connect()).then(() => connection.subscribe(channel, (text) => onMessage(text)));
    close = async () => {
      if (fn(connection, "destroy")) connection.destroy();
      else await connection.disconnect();
    };
    listen = (other, onText) => {
      const listener = (text) => onText(text);
      others.set(other, listener);
      return connection.subscribe(other, listener);
    };
    unlisten = async (other) => {
      const listener = others.get(other);
      others.delete(other);
      if (listener) await connection.unsubscribe(other, listener);
    };
    barrier = async () => {};
  }
  const opened = { ready: null, connection, close, subscribed: false, listen, unlisten, barrier };
  opened.ready = ready.then(() => {
    subscribed = true;
    opened.subscribed = true;
  });
  return opened;
}

// A GLIDE client has no duplicate(): the store's pub/sub client is a new one of the same class,
// made with its createClient from the options the user's client was made with (the client keeps
// them as `config`), subscribed to `channel` from the start and delivering to a callback; more
// channels are subscribed at run time (subscribe, which settles once the server confirmed it).
// GLIDE resubscribes by itself after a reconnect and says nothing: messages lost meanwhile are
// covered by the safety-net looks.
function openGlideSubscriber(client, channel, onMessage) {
  const others = new Map(); // channel → onText, for the channels listen() added
  const create = client.constructor?.createClient;
  const config = client.config;
  let connection = null;
  let closed = false;
  const ready =
    typeof create !== "function" || config === null || typeof config !== "object"
      ? Promise.reject(new TypeError("redisLockStore: the GLIDE client has no createClient or config to open a pub/sub client with"))
      : Promise.resolve(
          create.call(client.constructor, {
            ...config,
            pubsubSubscriptions: {
              channelsAndPatterns: { 0: new Set([channel]) }, // 0: exact channel names
              callback: (message) => {
                const from = String(message.channel);
                if (from === channel) onMessage(String(message.message));
                else others.get(from)?.(String(message.message));
              },
            },
          }),
        ).then((made) => {
          connection = made;
          opened.connection = made;
          if (closed) made.close();
        });
  const close = async () => {
    closed = true;
    connection?.close();
  };
  const listen = (other, onText) => {
    others.set(other, onText);
    return ready.then(() => connection.subscribe([other], 0));
  };
  const unlisten = async (other) => {
    others.delete(other);
    if (connection !== null && !closed) await connection.unsubscribe([other], 0);
  };
  const opened = { ready: null, connection: null, close, subscribed: false, listen, unlisten, barrier: async () => {} };
  opened.ready = ready.then(() => {
    opened.subscribed = true;
  });
  return opened;
}

// Redis Cluster's hash slot of a key name, as the server computes it (CLUSTER KEYSLOT): CRC16
// (XMODEM: polynomial 0x1021, initial value 0) of the name's UTF-8 bytes, modulo 16384 — of its
// hash tag alone if it has one: the text between its first "{" and the first "}" after that,
// when not empty. Lets the store tell, without asking the server, whether one script may touch
// a set of names (a script's keys must all be in one slot).
const CRC16 = new Uint16Array(256);
for (let i = 0; i < 256; i++) {
  let crc = i << 8;
  for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  CRC16[i] = crc;
}
const utf8 = new TextEncoder();

export function keySlot(name) {
  const open = name.indexOf("{");
  if (open !== -1) {
    const close = name.indexOf("}", open + 1);
    if (close > open + 1) name = name.slice(open + 1, close);
  }
  let crc = 0;
  for (const byte of utf8.encode(name)) crc = ((crc << 8) & 0xffff) ^ CRC16[((crc >> 8) ^ byte) & 0xff];
  return crc & 0x3fff;
}

export function isNoScript(error) {
  const text = error && typeof error === "object" ? String(error.message ?? "") : String(error);
  return /NOSCRIPT/i.test(text);
}
