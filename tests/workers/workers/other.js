// Worker B: a second script bound (by scriptName) to worker A's LOCKS and COUNTER namespaces.
import { campaignFor, contend, contendMulti, contendShared, observeLeaders, rpcCounts } from "./shared.js";

export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    if (url.pathname === "/contend") return Response.json(await contend(env, await request.json()));
    if (url.pathname === "/contend-shared") return Response.json(await contendShared(env, await request.json()));
    if (url.pathname === "/contend-multi") return Response.json(await contendMulti(env, await request.json()));
    if (url.pathname === "/rpcs") return Response.json(rpcCounts((await request.json()).key));
    if (url.pathname === "/campaign") return Response.json(await campaignFor(env, await request.json()));
    if (url.pathname === "/observe") return Response.json(await observeLeaders(env, await request.json()));
    return new Response("not found", { status: 404 });
  },
};
