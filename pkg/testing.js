// keel-lock/testing: the LockStore conformance kit. The properties themselves live in the Rust
// core (src/conformance.rs, one function per property) and run in a wasm of their own
// (dist/testing, built with the `testing` feature), so the builds behind `keel-lock` do not
// carry them. This entry turns their results into something a test runner understands — a
// rejection naming every property the store broke.
//
// `#testing-wasm` (the package.json `imports` map) picks the build for the runtime: Node, browser
// or workerd. That instance is separate from the application's `keel-lock` instance, so it drives
// every store — a `MemoryLockStore` made by `keel-lock` included — through the store's own five
// methods, as it would any store written in JS.
import { checkLockStore as runProperties } from "#testing-wasm";

/** Thrown (rejected) by `checkLockStore` when a store breaks one or more properties. */
export class LockStoreConformanceError extends Error {
  constructor(failures, results) {
    const count = `${failures.length} of ${results.length} LockStore ${results.length === 1 ? "property" : "properties"}`;
    const lines = failures.map((f) => `  - ${f.property}: ${String(f.message ?? "failed").replace(/\n/g, "\n    ")}`);
    super(`the store is not a lock: ${count} failed\n${lines.join("\n")}`);
    this.name = "LockStoreConformanceError";
    /** The failed properties, `[{ property, ok: false, message }]`. */
    this.failures = failures;
    /** Every property's outcome, passed ones included. */
    this.results = results;
  }
}

/**
 * Runs every property against `store` and resolves one `{ property, ok, message }` per
 * property, never rejecting for a failed property (only for unusable arguments).
 */
export async function lockStoreResults(store, options) {
  return runProperties(store, options);
}

/**
 * Runs every property against `store`. Resolves the per-property results when all pass;
 * rejects with a `LockStoreConformanceError` listing each failed property and its message.
 */
export async function checkLockStore(store, options) {
  const results = await runProperties(store, options);
  const failures = results.filter((r) => !r.ok);
  if (failures.length > 0) throw new LockStoreConformanceError(failures, results);
  return results;
}
