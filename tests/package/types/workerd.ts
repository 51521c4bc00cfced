// The Workers build's types, as a TypeScript Worker resolves them (`workerd` export condition):
// everything of the main API plus the Durable Object store and class.
import { lock, setLockStore, DurableObjectLockStore, LockDurableObject, LockNotHeldError } from "keel-lock";
import type { LockStore } from "keel-lock";

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
    try {
      await lock("invoice:42").extend();
    } catch (e) {
      if (e instanceof LockNotHeldError) return new Response(e.key, { status: 409 });
    }
    return new Response(charged ? "charged" : "busy");
  },
};
