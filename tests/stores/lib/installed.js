// The tests that import "keel-lock" must get the packed tarball installed into
// tests/stores/node_modules (what users get), not the source tree. scripts/test.d/40-stores.sh
// builds, packs and installs it; running these files without that step fails here, loudly.
import { lstatSync, realpathSync } from "node:fs";
import { dirname, join, relative, sep } from "node:path";
import { fileURLToPath } from "node:url";

export const STORES_DIR = dirname(dirname(fileURLToPath(import.meta.url)));

/** Where "keel-lock/testing" resolves from tests/stores, or throws with how to fix it. */
export function installedKeelLock() {
  let entry;
  try {
    entry = fileURLToPath(import.meta.resolve("keel-lock/testing"));
  } catch (error) {
    throw new Error(
      `keel-lock is not installed in tests/stores (run scripts/test.d/40-stores.sh, which packs pkg/ and installs the tarball): ${error.message}`,
    );
  }
  const root = join(STORES_DIR, "node_modules", "keel-lock");
  return {
    entry,
    root,
    isCopy: !lstatSync(root).isSymbolicLink() && relative(root, realpathSync(entry)).split(sep)[0] !== "..",
  };
}
