// Worker B: a second script bound (by scriptName) to worker A's LOCKS and COUNTER namespaces.
import { contend, contendMulti, contendShared, rpcCounts } from "./shared.js";

export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    if (url.pathname === "/contend") return Response.json(await contend(env, await request.json()));
    if (url.pathname === "/contend-shared") return Response.json(await contendShared(env, await request.json()));
    if (url.pathname === "/contend-multi") return Response.json(await contendMulti(env, await request.json()));
    if (url.pathname === "/rpcs") return Response.json(rpcCounts((await request.json()).key));
    return new Response("not found", { status: 404 });
  },
};
