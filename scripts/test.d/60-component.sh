#!/usr/bin/env bash
# WebAssembly component (issue 6): build keel-lock for wasm32-wasip2 with the `component` feature
# (a component, world keel:lock/keel-lock@0.1.0 in wit/), then instantiate it in a real host —
# the wasmtime embedding in tests/component-host, which provides wasi:keyvalue (draft2, with
# compare-and-swap) over one store shared by several instances on several threads — and run the
# lock's properties through the exported interface. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$HOME/.cargo/bin:$PATH"

rustup target add wasm32-wasip2 >/dev/null 2>&1 || true

echo "[component] cargo build --target wasm32-wasip2 --release --features component"
cargo build --target wasm32-wasip2 --release --features component

target_dir="${CARGO_TARGET_DIR:-target}"
component="$(cd "$target_dir" && pwd)/wasm32-wasip2/release/keel_lock.wasm"
# A component starts with the preview-2 header (\0asm, version 0x0d, layer 1), not a core module's.
if [ "$(head -c 8 "$component" | od -An -tx1 | tr -d ' \n')" != "0061736d0d000100" ]; then
  echo "[component] $component is not a WebAssembly component" >&2
  exit 1
fi
echo "[component] built $component ($(wc -c <"$component") bytes)"

# The host is its own cargo project (not a member of the root crate) with its own target dir.
# Cold: ~2-3 min and ~2 GB (wasmtime); warm: seconds.
echo "[component] wasmtime host tests (tests/component-host)"
KEEL_LOCK_COMPONENT="$component" \
  cargo test --locked --manifest-path tests/component-host/Cargo.toml -- --test-threads=2
