// The Redis fixture of the store tests: a redis-server for a test file or a describe block, with
// the node:test hooks that start and stop it (useRedis), and the standalone Redis clients the
// store supports, each connected to it (standaloneClients).
import { after, before } from "node:test";
import IORedis from "ioredis";
import IORedis6 from "ioredis6";
import { createClient as createNodeRedis } from "redis";
import { createClient as createNodeRedis4 } from "redis4";
import { Redis as Upstash } from "@upstash/redis";
import { GlideClient } from "@valkey/valkey-glide";
import { startRedis, startUpstashFixture } from "./servers.js";

/**
 * A redis-server (lib/servers.js startRedis: a free port, no persistence, `args` added to its
 * command line) for the file or describe block this is called in. Registers a before() hook that
 * starts it and then, as asked, `admin` — a plain ioredis connection for inspecting and poking the
 * server — and `upstash` — the Upstash REST fixture in front of it; and an after() hook that calls
 * the functions in `closers`, the last added first, then disconnects `admin` and stops the REST
 * fixture and the server. Answers the fixture: `redis` (the server: port, url, pid, stop),
 * `admin`, `upstash` and `closers` once before() has run, and `clients`, standaloneClients on it.
 * `ready(fixture)`, if given, is called at the end of that before(): where a file copies the fields
 * into variables of its own (at the top level of a file, node:test may start the file's before()
 * hooks together, so a hook of the file's own may run before the server is up).
 */
export function useRedis({ admin = false, upstash = false, args = [], ready } = {}) {
  const fixture = { redis: undefined, admin: undefined, upstash: undefined, closers: [] };
  fixture.clients = standaloneClients(() => fixture);
  before(async () => {
    fixture.redis = await startRedis({ args });
    if (admin) fixture.admin = new IORedis({ port: fixture.redis.port, host: "127.0.0.1" });
    if (upstash) fixture.upstash = await startUpstashFixture(fixture.redis.port);
    await ready?.(fixture);
  });
  after(async () => {
    for (const close of fixture.closers.reverse()) await close();
    fixture.admin?.disconnect();
    await fixture.upstash?.stop();
    await fixture.redis?.stop();
  });
  return fixture;
}

/**
 * The standalone clients, name → () => { client, close }, each opening a new connection.
 * `servers()` answers `{ redis, upstash }` once the test's servers have started.
 */
export function standaloneClients(servers) {
  const ioredis = (Ctor) => async () => {
    const client = new Ctor({ port: servers().redis.port, host: "127.0.0.1", lazyConnect: true });
    await client.connect();
    return { client, close: () => client.disconnect() };
  };
  const nodeRedis = (create) => async () => {
    const client = create({ url: servers().redis.url });
    client.on("error", () => {});
    await client.connect();
    return { client, close: () => client.quit() };
  };
  return {
    "ioredis 5": ioredis(IORedis),
    "ioredis 6": ioredis(IORedis6.default ?? IORedis6),
    "node-redis 5": nodeRedis(createNodeRedis),
    "node-redis 4": nodeRedis(createNodeRedis4),
    "valkey-glide": async () => {
      const client = await GlideClient.createClient({ addresses: [{ host: "127.0.0.1", port: servers().redis.port }] });
      return { client, close: () => client.close() };
    },
    "@upstash/redis (REST)": async () => {
      const { url, token } = servers().upstash;
      return { client: new Upstash({ url, token, retry: false }), close: () => {} };
    },
  };
}
