// The standalone Redis clients the store supports, each connected to a test's redis-server (and
// its Upstash REST fixture): name → () => { client, close }.
import IORedis from "ioredis";
import IORedis6 from "ioredis6";
import { createClient as createNodeRedis } from "redis";
import { createClient as createNodeRedis4 } from "redis4";
import { Redis as Upstash } from "@upstash/redis";

/** `servers()` answers `{ redis, upstash }` once the test's servers have started. */
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
    "@upstash/redis (REST)": async () => {
      const { url, token } = servers().upstash;
      return { client: new Upstash({ url, token, retry: false }), close: () => {} };
    },
  };
}
