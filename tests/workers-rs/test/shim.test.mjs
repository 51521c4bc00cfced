// The example's JS LockDurableObject (examples/workers-rs/entry.js) must forward every method the
// npm package's class (pkg/workerd/index.js) forwards: the store calls them over RPC, and a Rust
// Worker and a JS Worker share one namespace. Checked on the source text, no workerd needed.
// The package's object also serves `watch` (holder changes pushed to observers) in JS, reading
// the key's row itself; the example's object does not, and a store's watch of a key whose object
// a Rust Worker's entry serves falls back to looking again (docs/workers.md).
import { it } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const top = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

/**
 * The methods of `class LockDurableObject extends DurableObject { … }` in `file`, each as
 * `name(parameters)`; each must hand all of its parameters, in order, to the core's method of
 * the same name (one dropped would be an argument the RPC carries and the core never sees).
 */
function forwarded(file, own = []) {
  const text = readFileSync(join(top, file), "utf8");
  const start = text.indexOf("class LockDurableObject extends DurableObject {");
  assert.notEqual(start, -1, `${file} declares no LockDurableObject class`);
  const body = text.slice(start, text.indexOf("\n}", start));
  const methods = [...body.matchAll(/^ {2}(\w+)\(([^)]*)\) \{$/gm)].filter(
    (m) => m[1] !== "constructor" && !own.includes(`${m[1]}(${m[2]})`),
  );
  for (const [, name, params] of methods) {
    const call = `this.#core.${name}(${params})`;
    assert.ok(body.includes(call), `${file}: ${name}(${params}) does not forward as ${call}`);
  }
  return methods.map(([, name, params]) => `${name}(${params})`).sort();
}

it("the example's LockDurableObject forwards the same methods, with the same arguments, as the npm package's", () => {
  const pkg = forwarded("pkg/workerd/index.js", ["watch(key, id, onChange)", "watching(key, id)", "unwatch(key, id)"]);
  for (const method of ["acquire(key, owner, ttlMs, metadata)", "inspect(key)", "alarm()"]) {
    assert.ok(pkg.includes(method), `package methods: ${pkg}`);
  }
  assert.deepEqual(forwarded("examples/workers-rs/entry.js"), pkg);
});
