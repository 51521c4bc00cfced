// Compiled with `tsc --strict` as CommonJS: the types `require("keel-lock")` resolves (the
// package's `require` condition), and that the kit is not among them.
import keel = require("keel-lock");

export async function snippets(): Promise<void> {
  const l: keel.Lock = keel.lock("invoice:42", 60_000);
  const [ran, result] = await l.run(() => 42);
  if (ran) {
    const n: number = result;
    void n;
  }
  keel.setLockStore(new keel.MemoryLockStore());
  const store: keel.LockStore = keel.getLockStore();
  void store;
  // @ts-expect-error checkLockStore lives in keel-lock/testing only
  void keel.checkLockStore;
}
