#!/usr/bin/env bash
# The npm package and the crate as users get them: build, `npm pack`, lint the tarball (publint
# --strict, attw under node16), install it into tests/package, then run it in Node ESM (the full
# behaviour suite), Node CJS, the conformance kit (keel-lock/testing), tsc --strict, Deno, Bun,
# a Vite bundle in headless Chromium, and the API tests that need nothing of Node bundled into
# a page run in headless Chromium and headless Firefox (browsers.test.mjs), keel-lock/indexeddb across
# pages and a worker in both (indexeddb.test.mjs); the Node files once more under
# --no-experimental-detect-module (a Node that never guesses a file's module syntax); and
# `make trace`'s waterfall; and `cargo package`, which builds the crate from the packaged sources alone.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$HOME/.cargo/bin:$PATH"
# Build and pack under build-pkg.sh's lock, so that no other build replaces pkg/dist mid-pack.
mkdir -p target
exec 9>target/.build-pkg.lock
flock 9
KEEL_PKG_LOCK_HELD=1 bash scripts/build-pkg.sh
rm -f pkg/keel-lock-*.tgz
tarball=$(cd pkg && npm pack --silent | tail -1)
flock -u 9
echo "packed pkg/$tarball: $(tar -tzf "pkg/$tarball" | wc -l) files, $(stat -c %s "pkg/$tarball") bytes"
cd tests/package
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi

echo "--- publint --strict, attw --profile node16"
npx publint --strict "../../pkg/$tarball"
# keel-lock/redis, /sql and /testing are ESM only, by design. attw warns that require() of them
# fails; on the Node versions the package supports (engines: >= 20.19) require() loads ESM, and
# cjs.test.cjs checks that it does — so that one rule is off and every other rule applies.
npx attw "../../pkg/$tarball" --profile node16 --ignore-rules cjs-resolves-to-esm

npm install --no-save --no-audit --no-fund --loglevel=error "../../pkg/$tarball"

echo "--- tsc --strict over the documented snippets"
npx tsc -p types/tsconfig.json
npx tsc -p types/tsconfig.workerd.json   # the Workers build's types under the `workerd` condition
npx tsc -p types/tsconfig.cjs.json       # the types `require("keel-lock")` gets
if npx tsc -p types/tsconfig.bad.json >/dev/null 2>&1; then
  echo "types/bad.ts compiled: the package's types accept wrong code" >&2
  exit 1
fi

node_files=(suite.test.mjs shared.test.mjs multi.test.mjs inspect.test.mjs memory-watch.test.mjs web-locks.test.mjs events.test.mjs otel.test.mjs timers.test.mjs handles.test.mjs holding.test.mjs operations.test.mjs handing-over.test.mjs abort.test.mjs watching.test.mjs tokens.test.mjs entries.test.mjs cjs.test.cjs testing.test.mjs package.test.mjs)
echo "--- node --test (ESM suite, CJS, keel-lock/testing, package contents, Deno, Bun, Vite + Chromium, Chromium + Firefox)"
node --test --test-reporter=spec "${node_files[@]}" runtimes.test.mjs vite.test.mjs browsers.test.mjs indexeddb.test.mjs
echo "--- the Node files again under node --no-experimental-detect-module"
node --no-experimental-detect-module --test --test-reporter=dot "${node_files[@]}"

cd ../..
echo "--- make trace (the waterfall drawn from recorded spans; it fails if a charge's span is missing)"
bash scripts/trace.sh

echo "--- cargo package (builds the crate from the packaged files alone)"
cargo package --allow-dirty --quiet
echo "crate: $(cargo package --allow-dirty --list | wc -l) files"
