#!/usr/bin/env bash
# Size experiments: builds only the shipped wasm (node: no std, --features js,talc,panic-trap;
# workerd: no std, --features workerd,talc,panic-trap) as build-pkg.sh does (without its trim), into target/size/{node,workerd}, and
# prints raw and gzip -9 bytes.
# NAMES=1 also keeps a name section (wasm-opt -Oz -g) in target/size/*-names.wasm, for attribution.
# WASM_OPT_FLAGS overrides build-pkg.sh's wasm-opt flags, NODE_OPT_LEVEL the Node build's opt-level
# (3).  Holds build-pkg.sh's lock.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
mkdir -p target/size
exec 9>target/.build-pkg.lock
flock 9
wasm=target/wasm32-unknown-unknown/release/keel_lock.wasm
OPT=${WASM_OPT_FLAGS:---flatten --rereloop -Oz -Oz --zero-filled-memory}
FEAT="--enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext --enable-mutable-globals --enable-reference-types --enable-multivalue"
one() {
  local name=$1 features=$2 target=$3 level=$4
  CARGO_PROFILE_RELEASE_OPT_LEVEL=$level cargo build -q --release --target wasm32-unknown-unknown \
    --features "$features" ${CARGO_EXTRA:-}
  rm -rf target/size/$name && mkdir -p target/size/$name
  wasm-bindgen --target "$target" --out-dir target/size/$name --out-name keel_lock "$wasm"
  local f=target/size/$name/keel_lock_bg.wasm
  if [ "${NAMES:-}" = 1 ]; then
    pkg/node_modules/.bin/wasm-opt $OPT -g $FEAT --strip-producers --strip-target-features "$f" -o target/size/$name-names.wasm
  fi
  pkg/node_modules/.bin/wasm-opt $OPT $FEAT --strip-producers --strip-target-features "$f" -o "$f"
  printf '%-8s raw %7s gzip %6s\n' "$name" "$(stat -c %s "$f")" "$(gzip -9 < "$f" | wc -c)"
}
[ "${ONLY:-}" = workerd ] || CARGO_EXTRA="--no-default-features ${CARGO_EXTRA:-}" one node ${NODE_FEATURES:-js,talc,panic-trap} nodejs ${NODE_OPT_LEVEL:-3}
[ "${ONLY:-}" = node ] || CARGO_EXTRA="--no-default-features ${CARGO_EXTRA:-}" one workerd ${WORKERD_FEATURES:-workerd,talc,panic-trap} web z
