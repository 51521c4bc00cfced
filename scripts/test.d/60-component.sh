#!/usr/bin/env bash
# WebAssembly component: build keel-lock for wasm32-wasip2 twice — the production component
# (`--features component`, world keel:lock/keel-lock@0.1.0 in wit/: the lock API only) and the
# testing one (`--features component,testing`, world keel-lock-testing: plus `conformance`) —
# then instantiate them in a real host: the wasmtime embedding in tests/component-host, which
# provides wasi:keyvalue (draft2, with compare-and-swap) over one store shared by several
# instances on several threads, runs the lock's properties through the exported interface,
# races instances taking each primitive (lock, semaphore, read-write lock, sets of keys, leaders)
# on a host that fails and delays its key-value calls (their recorded histories judged by the
# history checker, and three broken hosts that must be caught) and checks what each world
# exports. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$HOME/.cargo/bin:$PATH"

rustup target add wasm32-wasip2 >/dev/null 2>&1 || true

target_dir="$(mkdir -p "${CARGO_TARGET_DIR:-target}" && cd "${CARGO_TARGET_DIR:-target}" && pwd)"
built="$target_dir/wasm32-wasip2/release/keel_lock.wasm"
out="$target_dir/component"
mkdir -p "$out"

# build FEATURES NAME: a release component with FEATURES, copied to $out/NAME.wasm.
build() {
  echo "[component] cargo build --target wasm32-wasip2 --release --features $1"
  cargo build --target wasm32-wasip2 --release --features "$1"
  # A component starts with the preview-2 header (\0asm, version 0x0d, layer 1), not a core module's.
  if [ "$(head -c 8 "$built" | od -An -tx1 | tr -d ' \n')" != "0061736d0d000100" ]; then
    echo "[component] $built is not a WebAssembly component" >&2
    exit 1
  fi
  cp "$built" "$out/$2.wasm"
  echo "[component] $out/$2.wasm: $(stat -c %s "$out/$2.wasm") bytes, $(gzip -9c "$out/$2.wasm" | wc -c) gzip"
}
build component keel_lock
build component,testing keel_lock_testing

# The host is its own cargo project (not a member of the root crate) with its own target dir.
# Cold: ~10 min and ~2 GB (wasmtime); warm: seconds.
echo "[component] wasmtime host tests (tests/component-host)"
KEEL_LOCK_COMPONENT="$out/keel_lock_testing.wasm" KEEL_LOCK_PRODUCTION_COMPONENT="$out/keel_lock.wasm" \
  cargo test --locked --manifest-path tests/component-host/Cargo.toml -- --test-threads=2
