// Type-checked (never run) by types.test.js: keel-lock/testing's types as users get them, from
// the tarball installed in tests/stores/node_modules, resolved through the exports map.
import { MemoryLockStore, type LockStore } from "keel-lock";
import {
  type PropertyResult,
  checkLockStore,
  lockStoreResults,
  LockStoreConformanceError,
  type CheckOptions,
  type PropertyFailure,
} from "keel-lock/testing";

declare const store: LockStore;

export async function kit(): Promise<void> {
  const options: CheckOptions = { keyPrefix: "t:", shortTtlMs: 500, settleMs: 100, contenders: 20 };
  const passed: PropertyResult[] = await checkLockStore(store, options);
  const all: PropertyResult[] = await lockStoreResults(new MemoryLockStore());
  const names: string[] = [...passed, ...all].map((r) => r.property);
  const messages: (string | null)[] = all.map((r) => r.message);
  try {
    await checkLockStore(store);
  } catch (error) {
    if (error instanceof LockStoreConformanceError) {
      const failures: PropertyFailure[] = error.failures;
      const first: string = failures[0].message; // a failure always has a message
      const fromError: readonly PropertyResult[] = error.results;
      void [first, fromError];
    }
  }
  // @ts-expect-error a store needs all five methods
  await checkLockStore({ acquire: () => true });
  // @ts-expect-error options are typed
  await checkLockStore(store, { contenders: "many" });
  // @ts-expect-error results are not booleans
  const wrong: boolean = await lockStoreResults(store);
  void [names, messages, wrong];
}
