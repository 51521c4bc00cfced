#!/usr/bin/env bash
# The npm package as users get it: build, `npm pack`, install the tarball into tests/package,
# then run it in Node ESM (the full behaviour suite), Node CJS, tsc --strict, Deno, Bun, and a
# Vite bundle in headless Chromium.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/build-pkg.sh
rm -f pkg/keel-lock-*.tgz
tarball=$(cd pkg && npm pack --silent | tail -1)
echo "packed pkg/$tarball: $(tar -tzf "pkg/$tarball" | wc -l) files, $(stat -c %s "pkg/$tarball") bytes"
cd tests/package
[ -d node_modules/vite ] || npm ci --no-audit --no-fund --loglevel=error
npm install --no-save --no-audit --no-fund --loglevel=error "../../pkg/$tarball"

echo "--- tsc --strict over the documented snippets"
npx tsc -p types/tsconfig.json
npx tsc -p types/tsconfig.workerd.json   # the Workers build's types under the `workerd` condition
if npx tsc -p types/tsconfig.bad.json >/dev/null 2>&1; then
  echo "types/bad.ts compiled: the package's types accept wrong code" >&2
  exit 1
fi

echo "--- node --test (ESM suite, CJS, Deno, Bun, Vite + Chromium)"
node --test --test-reporter=spec suite.test.mjs cjs.test.cjs runtimes.test.mjs vite.test.mjs
