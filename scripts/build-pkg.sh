#!/usr/bin/env bash
# Builds the npm package's wasm artefacts into pkg/dist:
#   dist/node  wasm-bindgen --target nodejs  (Node, Bun, Deno: CommonJS, loads the .wasm from disk)
#   dist/web   wasm-bindgen --target web     (browsers, bundlers: ESM)
#   dist/workerd  --features worker, --target web (Cloudflare Workers: adds LockDurableObject
#                 and DurableObjectLockStore; a separate build so Node/browser do not grow)
# Release profile (opt-level z, LTO, panic=abort), then wasm-opt -Oz from the npm `binaryen`
# package (Debian's binaryen breaks current wasm-bindgen output). opt-level "s" measured 3.6%
# larger after wasm-opt; the producers/target-features sections are dropped (nothing reads them).
# Where the bytes go: docs/wasm-size.md.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

[ -d pkg/node_modules/binaryen ] || (cd pkg && npm ci --no-audit --no-fund --loglevel=error)

cargo build --release --target wasm32-unknown-unknown --features js
wasm=target/wasm32-unknown-unknown/release/keel_lock.wasm
rm -rf pkg/dist
for target in nodejs web; do
  out=pkg/dist/$([ "$target" = nodejs ] && echo node || echo web)
  wasm-bindgen --target "$target" --out-dir "$out" --out-name keel_lock "$wasm"
  pkg/node_modules/.bin/wasm-opt -Oz --enable-bulk-memory --enable-nontrapping-float-to-int \
    --enable-sign-ext --enable-mutable-globals --enable-reference-types --enable-multivalue \
    --strip-producers --strip-target-features \
    "$out/keel_lock_bg.wasm" -o "$out/keel_lock_bg.wasm"
done
# Workers build: same crate with the `worker` feature (Durable Object + DO store).
cargo build --release --target wasm32-unknown-unknown --features worker
out=pkg/dist/workerd
wasm-bindgen --target web --out-dir "$out" --out-name keel_lock "$wasm"
pkg/node_modules/.bin/wasm-opt -Oz --enable-bulk-memory --enable-nontrapping-float-to-int \
  --enable-sign-ext --enable-mutable-globals --enable-reference-types --enable-multivalue \
  --strip-producers --strip-target-features \
  "$out/keel_lock_bg.wasm" -o "$out/keel_lock_bg.wasm"
for f in pkg/dist/*/keel_lock_bg.wasm; do
  printf '%s: %s bytes, %s gzip\n' "$f" "$(stat -c %s "$f")" "$(gzip -9c "$f" | wc -c)"
done
