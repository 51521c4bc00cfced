#!/usr/bin/env bash
# Builds the npm package's generated files into pkg/:
#   dist/node     --no-default-features --features js,panic-trap (no std: its panic machinery
#                 stays out), wasm-bindgen --target nodejs (Node, Bun, Deno: reads the .wasm
#                 from disk; the glue as CommonJS for require() and as an ES module for import)
#   dist/web      the same build, --target web (browsers and bundlers: ESM)
#   dist/workerd  --no-default-features --features workerd,talc,panic-trap, --target web (Cloudflare
#                 Workers: adds LockDurableObject and DurableObjectLockStore; a separate build so
#                 Node/browser do not grow)
#   dist/testing/{node,web}  --features js,testing: `checkLockStore` for keel-lock/testing only,
#                 so that no production build carries the conformance kit (the web build also
#                 serves workerd)
#   dist/index.d.cts  index.d.ts for `require` (the package is ESM; CommonJS needs its own types)
#   LICENSE-MIT, LICENSE-APACHE  copied from the repository root (npm ships them from pkg/)
# Release profile (opt-level z — 3 for the Node/browser build —, LTO, panic=abort), then wasm-opt -Oz from the npm `binaryen`
# package (Debian's binaryen breaks current wasm-bindgen output); the producers/target-features
# sections are dropped (nothing reads them). --flatten --rereloop before two -Oz rounds, and
# --zero-filled-memory (the module's own memory starts zeroed), each measured smaller than
# without; -O3/-Os, --converge and --gufa were no better (docs/wasm-size.md has the figures).
# Writes pkg/dist/.built last: scripts/ensure-pkg.sh compares it with the sources.
# Where the bytes go: docs/wasm-size.md.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

# One build at a time: every feature set is built to the same target/…/keel_lock.wasm, so two
# concurrent runs would hand each other's wasm to wasm-bindgen. A caller that already holds the
# lock (to pack what it built) sets KEEL_PKG_LOCK_HELD=1.
if [ "${KEEL_PKG_LOCK_HELD:-}" != 1 ]; then
  mkdir -p target
  exec 9>target/.build-pkg.lock
  flock 9
fi

[ -d pkg/node_modules/binaryen ] || (cd pkg && npm ci --no-audit --no-fund --loglevel=error)

wasm=target/wasm32-unknown-unknown/release/keel_lock.wasm

# bindgen TARGET OUT [trim]: wasm-bindgen the last cargo build for TARGET (nodejs|web) into OUT,
# then shrink it with wasm-opt. `trim` (the workerd build): scripts/trim-workerd-glue.mjs drops the
# glue and the wasm exports the workerd entry cannot reach before wasm-opt (which then removes the
# code only they reached), and after it the import functions the module no longer imports.
bindgen() {
  local target=$1 out=$2 trim=${3:-}
  wasm-bindgen --target "$target" --out-dir "$out" --out-name keel_lock "$wasm"
  [ -z "$trim" ] || node scripts/trim-workerd-glue.mjs exports "$out"
  pkg/node_modules/.bin/wasm-opt --flatten --rereloop -Oz -Oz --zero-filled-memory --enable-bulk-memory --enable-nontrapping-float-to-int \
    --enable-sign-ext --enable-mutable-globals --enable-reference-types --enable-multivalue \
    --strip-producers --strip-target-features \
    "$out/keel_lock_bg.wasm" -o "$out/keel_lock_bg.wasm"
  [ -z "$trim" ] || node scripts/trim-workerd-glue.mjs imports "$out"
  [ "$target" != web ] || node scripts/dedupe-glue-imports.mjs "$out"
  # The package is ESM ("type": "module"), but wasm-bindgen's nodejs glue is CommonJS; the JS
  # snippets (src/js/*.js) are inlined into it as CommonJS (one file to load; Node's require() of
  # an ES module goes through the ESM loader). The Node build also gets the glue as an ES module
  # (keel_lock.mjs) for the `import` entry. See scripts/node-glue.mjs.
  if [ "$target" = nodejs ]; then
    echo '{ "type": "commonjs" }' >"$out/package.json"
    if [ "$out" = pkg/dist/node ]; then node scripts/node-glue.mjs "$out" --esm; else node scripts/node-glue.mjs "$out"; fi
  fi
}

rm -rf pkg/dist
# Node and browsers get opt-level 3: the lock's hot path is code, not bytes — measured faster per
# in-isolate run() than "z" for a little more gzip, and "s" larger than both (docs/wasm-size.md).
CARGO_PROFILE_RELEASE_OPT_LEVEL=3 cargo build --release --target wasm32-unknown-unknown \
  --no-default-features --features js,talc,panic-trap
bindgen nodejs pkg/dist/node
bindgen web pkg/dist/web
# The workerd build: the same without std, plus the Durable Object (feature `workerd`, which
# talks to workerd through wasm-bindgen alone; workers-rs needs std). Opt-level "z": its size
# is what workerd compiles when an isolate starts.
cargo build --release --target wasm32-unknown-unknown --no-default-features --features workerd,talc,panic-trap
bindgen web pkg/dist/workerd trim
# Without std nothing of std is linked: its panic handler would leave its source paths in the data.
for f in pkg/dist/node pkg/dist/workerd; do
  if grep -q -a 'library/std/' $f/keel_lock_bg.wasm; then
    echo "build-pkg: $f/keel_lock_bg.wasm links std (its panic paths are in the data section)" >&2
    exit 1
  fi
done
cargo build --release --target wasm32-unknown-unknown --features js,testing,talc
bindgen nodejs pkg/dist/testing/node
bindgen web pkg/dist/testing/web

{
  echo "// Generated by scripts/build-pkg.sh from index.d.ts: the same types for \`require(\"keel-lock\")\`."
  cat pkg/index.d.ts
} >pkg/dist/index.d.cts
cp LICENSE-MIT LICENSE-APACHE pkg/

for f in pkg/dist/*/keel_lock_bg.wasm pkg/dist/testing/*/keel_lock_bg.wasm; do
  printf '%s: %s bytes, %s gzip\n' "$f" "$(stat -c %s "$f")" "$(gzip -9c "$f" | wc -c)"
done
touch pkg/dist/.built
