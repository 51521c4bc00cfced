// The part of `node:test` the API tests use — describe, it, beforeEach, before, after — for a
// browser: tests run one after another, in the order declared; `run()` answers each result.
const root = { name: "", children: [], beforeEach: [], before: [], after: [] };
let current = root;

export function describe(name, body) {
  const suite = { name, children: [], beforeEach: [], before: [], after: [], parent: current };
  current.children.push(suite);
  const outer = current;
  current = suite;
  try {
    body();
  } finally {
    current = outer;
  }
}

export function it(name, options, body) {
  current.children.push({ name, test: typeof options === "function" ? options : body });
}

export const test = it;
export const beforeEach = (f) => current.beforeEach.push(f);
export const before = (f) => current.before.push(f);
export const after = (f) => current.after.push(f);

function hooks(suite) {
  const chain = [];
  for (let s = suite; s !== undefined; s = s.parent) chain.unshift(...s.beforeEach);
  return chain;
}

/** Runs every test declared so far; answers [{ name, ok, error? }]. */
export async function run() {
  const results = [];
  const walk = async (suite, prefix) => {
    for (const f of suite.before) await f();
    for (const child of suite.children) {
      const name = prefix ? `${prefix} › ${child.name}` : child.name;
      if (child.children !== undefined) {
        await walk(child, name);
        continue;
      }
      let skipped = false;
      const context = { skip: () => (skipped = true) };
      try {
        for (const f of hooks(suite)) await f();
        await child.test(context);
        results.push({ name, ok: true, skipped });
      } catch (error) {
        results.push({ name, ok: false, error: `${error?.name}: ${error?.message}\n${error?.stack ?? ""}` });
      }
    }
    for (const f of suite.after) await f();
  };
  await walk(root, "");
  return results;
}
