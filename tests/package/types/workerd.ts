// The Workers build's types, as a TypeScript Worker resolves them (`workerd` export condition):
// everything of the main API plus the Durable Object store and class, which keeps hold metadata
// and answers inspect.
import { campaign, inspect, lock, observe, setLockStore, DurableObjectLockStore, LockDurableObject, LockNotHeldError } from "keel-lock";
import type { Grant, InspectAnswer, LockInfo, LockObjectSnapshot, LockStore, WatchReport } from "keel-lock";

export { LockDurableObject };

interface Env {
  LOCKS: { idFromName(name: string): unknown; get(id: unknown): unknown };
}

export default {
  async fetch(_request: Request, env: Env): Promise<Response> {
    const store: LockStore = new DurableObjectLockStore(env.LOCKS);
    setLockStore(store);
    const [charged, receipt] = await lock("invoice:42").run(async () => ({ id: "r1" }));
    if (charged) {
      const id: string = receipt.id;
      void id;
    }
    const said: Grant | false = await new DurableObjectLockStore(env.LOCKS).acquire("k", "owner-1", 1000, "worker a");
    void said;
    const answer: InspectAnswer = await new DurableObjectLockStore(env.LOCKS).inspect("invoice:42");
    const first: string | null = answer.holders[0]?.metadata ?? null;
    void first;
    const stop = await new DurableObjectLockStore(env.LOCKS).watch("leader", (change: WatchReport | null) => {
      if (change?.held) void change.remainingMs;
    });
    await stop();
    await lock("invoice:42").run(() => 1, { metadata: "worker a" });
    const info: LockInfo = await inspect("invoice:42");
    const leader: number = await campaign("leader", ({ fence }) => fence ?? 0, { metadata: "worker a" });
    for await (const now of observe("leader", { intervalMs: 50 })) {
      if (now !== null) return new Response(`${now.metadata}/${now.fence}/${info.waiting}/${leader}`);
    }
    const object = null as unknown as LockDurableObject;
    const held: InspectAnswer = object.inspect("invoice:42");
    const snapshot: LockObjectSnapshot = await object.snapshot();
    void held;
    void snapshot;
    try {
      await lock("invoice:42").extend();
    } catch (e) {
      if (e instanceof LockNotHeldError) return new Response(e.key, { status: 409 });
    }
    return new Response(charged ? "charged" : "busy");
  },
};
