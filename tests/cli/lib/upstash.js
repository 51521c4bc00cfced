// Upstash's REST protocol in front of a real redis-server: tests/stores/lib/servers.js's
// startUpstashFixture, copied because that one imports ioredis from tests/stores/node_modules,
// which this suite does not install. Keep the two alike.
import http from "node:http";
export async function startUpstashFixture(redisPort, { token = "keel-lock-test-token" } = {}) {
  const { default: IORedis } = await import("ioredis");
  const upstream = new IORedis({ host: "127.0.0.1", port: redisPort, lazyConnect: true });
  await upstream.connect();
  const encode = (value, base64) => {
    if (typeof value === "string") return base64 ? Buffer.from(value, "utf8").toString("base64") : value;
    if (Array.isArray(value)) return value.map((v) => encode(v, base64));
    return value ?? null;
  };
  const errorText = (error) => String(error?.message ?? error);
  const stats = { requests: 0, commands: 0 };
  const server = http.createServer(async (req, res) => {
    const reply = (status, body) => {
      res.writeHead(status, { "content-type": "application/json" });
      res.end(JSON.stringify(body));
    };
    try {
      stats.requests++;
      if (req.method !== "POST") return reply(405, { error: "only POST" });
      if (req.headers.authorization !== `Bearer ${token}`) return reply(401, { error: "Unauthorized" });
      let raw = "";
      for await (const chunk of req) raw += chunk;
      const body = JSON.parse(raw);
      const base64 = String(req.headers["upstash-encoding"] ?? "").toLowerCase() === "base64";
      const path = new URL(req.url, "http://fixture").pathname.replace(/\/+$/, "");
      const toArgs = (command) => command.map((part) => (typeof part === "string" ? part : JSON.stringify(part)));
      if (path === "") {
        stats.commands++;
        try {
          return reply(200, { result: encode(await upstream.call(...toArgs(body)), base64) });
        } catch (error) {
          return reply(400, { error: errorText(error) });
        }
      }
      if (path === "/pipeline" || path === "/multi-exec") {
        stats.commands += body.length;
        const batch = path === "/pipeline" ? upstream.pipeline() : upstream.multi();
        for (const command of body) batch.call(...toArgs(command));
        const results = await batch.exec();
        return reply(
          200,
          results.map(([error, result]) => (error ? { error: errorText(error) } : { result: encode(result, base64) })),
        );
      }
      return reply(404, { error: `no route ${path}` });
    } catch (error) {
      return reply(500, { error: errorText(error) });
    }
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  return {
    url: `http://127.0.0.1:${port}`,
    token,
    stats,
    async stop() {
      server.closeAllConnections?.();
      await new Promise((resolve) => server.close(resolve));
      upstream.disconnect();
    },
  };
}
