// Must NOT compile: proves the types check something (the test expects tsc to fail here).
import { lock } from "keel-lock";
export async function wrong(): Promise<void> {
  const [ran, result] = await lock("k").run(() => 42);
  if (ran) {
    const s: string = result; // result is a number
    void s;
  }
  lock(42); // key must be a string
}
