#!/usr/bin/env bash
# keel-lock from a Worker written in Rust (examples/workers-rs, workers-rs + worker-build) in real
# workerd (Miniflare): two Rust isolates race for one key; a JS Worker on the packed npm package
# and the Rust Worker share one lock namespace (whichever serves the Durable Object class) and
# exclude each other; fences increase across both; rows outlive a switch of builds. The harness
# builds the example the way `wrangler deploy` does (its [build] runs `worker-build --release`).
# Also: the Rust docs of this path build without warnings and their examples compile for wasm32.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$HOME/.cargo/bin:$PATH"

command -v worker-build >/dev/null || bash scripts/setup.d/50-worker-build.sh
bash scripts/ensure-pkg.sh
[ -d tests/workers-rs/node_modules/miniflare ] || (cd tests/workers-rs && npm ci --no-audit --no-fund --loglevel=error)

echo "cargo doc --features worker --target wasm32-unknown-unknown (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc -q --features worker --target wasm32-unknown-unknown --no-deps
echo "doc examples of the worker module compile for wasm32 (they are no_run: they need workerd)"
cargo test -q --doc --features worker --target wasm32-unknown-unknown -- worker::

cd tests/workers-rs
# worker-build fetches wasm-bindgen, wasm-opt and esbuild from the network unless told where
# they are: the CLI setup installed (same version as the crate's pin) and this suite's npm ones.
export WASM_BINDGEN_BIN="$HOME/.cargo/bin/wasm-bindgen"
export WASM_OPT_BIN="$PWD/node_modules/.bin/wasm-opt" ESBUILD_BIN="$PWD/node_modules/.bin/esbuild"
export WRANGLER_SEND_METRICS=false CLOUDFLARE_CF_FETCH_ENABLED=false
node --test --test-concurrency=1 test/
