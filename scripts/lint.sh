#!/usr/bin/env bash
# rustfmt check, and clippy with -D warnings for every feature of the crate, each on the target
# it is built for (the pure core natively; `js`/`worker` for wasm32-unknown-unknown;
# `component` for wasm32-wasip2).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

cargo fmt --check
cargo clippy --all-targets -- -D warnings
features=$(cargo metadata --no-deps --format-version 1 |
  node -e 'const m=JSON.parse(require("fs").readFileSync(0));console.log(Object.keys(m.packages[0].features).filter(f=>f!=="default").join(" "))')
for f in $features; do
  case "$f" in
    component) target=wasm32-wasip2 ;;
    *) target=wasm32-unknown-unknown ;;
  esac
  echo "clippy --features $f --target $target"
  cargo clippy --all-targets --features "$f" --target "$target" -- -D warnings
done
