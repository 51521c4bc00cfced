#!/usr/bin/env bash
# The workers-rs example (examples/workers-rs) is built with Cloudflare's `worker-build`, the
# tool `wrangler`'s Rust template runs. Pinned to the version matching the `worker` crate the
# example depends on. Idempotent: installs only when missing or at another version.
#
# worker-build looks for wasm-bindgen at $WASM_BINDGEN_BIN, not on PATH (otherwise it tries a
# download from GitHub); scripts/test.d/55-workers-rs.sh sets that to the CLI setup installed.
set -euo pipefail
export PATH="$HOME/.cargo/bin:$PATH"
WORKER_BUILD_VERSION=0.8.7

if command -v worker-build >/dev/null 2>&1 &&
  [ "$(worker-build --version 2>/dev/null | awk '{print $NF}')" = "$WORKER_BUILD_VERSION" ]; then
  exit 0
fi
echo "[setup.d/50-worker-build] cargo install worker-build $WORKER_BUILD_VERSION (~3 min)"
cargo install -q worker-build --version "$WORKER_BUILD_VERSION" --locked --force
