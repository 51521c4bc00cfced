// The example's JS LockDurableObject (examples/workers-rs/entry.js) must forward every method the
// npm package's class (pkg/workerd/index.js) forwards: the store calls them over RPC, and a Rust
// Worker and a JS Worker share one namespace. Checked on the source text, no workerd needed.
import { it } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const top = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

/** Method names of `class LockDurableObject extends DurableObject { … }` in `file`. */
function forwarded(file) {
  const text = readFileSync(join(top, file), "utf8");
  const start = text.indexOf("class LockDurableObject extends DurableObject {");
  assert.notEqual(start, -1, `${file} declares no LockDurableObject class`);
  const body = text.slice(start, text.indexOf("\n}", start));
  const names = [...body.matchAll(/^ {2}(\w+)\([^)]*\) \{$/gm)].map((m) => m[1]).filter((n) => n !== "constructor");
  for (const name of names) {
    assert.match(body, new RegExp(`this\\.#core\\.${name}\\(`), `${file}: ${name}() does not forward to the core`);
  }
  return names.sort();
}

it("the example's LockDurableObject forwards the same methods as the npm package's", () => {
  const pkg = forwarded("pkg/workerd/index.js");
  assert.ok(pkg.includes("acquire") && pkg.includes("alarm"), `package methods: ${pkg}`);
  assert.deepEqual(forwarded("examples/workers-rs/entry.js"), pkg);
});
