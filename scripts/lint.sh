#!/usr/bin/env bash
# rustfmt check, and clippy with -D warnings for every feature of the crate, each on the target
# it is built for (the pure core and `testing` natively; `js`/`workerd`/`worker` for
# wasm32-unknown-unknown; `component` for wasm32-wasip2; `panic-trap` and `workerd` without std,
# as the npm Node/browser and workerd builds use them). Each feature is linted twice: with
# --all-targets (the tests, whose self-dev-dependency turns `testing` on) and as the library
# alone (the build users get, without `testing`). Then the npm version pins shared by the
# repository's JS projects must agree (scripts/check-pins.mjs), and the generated files must be
# what their sources give.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

cargo fmt --check
cargo fmt --check --manifest-path tests/component-host/Cargo.toml
cargo clippy --all-targets -- -D warnings
cargo clippy --lib -- -D warnings
features=$(cargo metadata --no-deps --format-version 1 |
  node -e 'const m=JSON.parse(require("fs").readFileSync(0));console.log(Object.keys(m.packages[0].features).filter(f=>f!=="default").join(" "))')
for f in $features; do
  nostd=
  case "$f" in
    component) target=wasm32-wasip2 ;;
    testing) target=$(rustc -vV | sed -n 's/^host: //p') ;;
    # The allocator of the npm builds: linted as they build it, with the JS bindings (alone, on
    # wasm32-unknown-unknown, getrandom has no entropy source to compile against).
    talc) target=wasm32-unknown-unknown f=js,talc ;;
    std) target=$(rustc -vV | sed -n 's/^host: //p') ;;
    # The npm Node/browser build: no std, talc, the trapping panic handler. Its tests turn
    # `testing`, and so std, on; the library alone is the build without std.
    panic-trap) target=wasm32-unknown-unknown f=js,talc,panic-trap nostd=--no-default-features ;;
    # The npm workerd build: the same, with the Durable Object.
    workerd) target=wasm32-unknown-unknown f=workerd,talc,panic-trap nostd=--no-default-features ;;
    *) target=wasm32-unknown-unknown ;;
  esac
  echo "clippy $nostd --features $f --target $target (all targets, then the library alone)"
  cargo clippy --all-targets --features "$f" --target "$target" -- -D warnings
  cargo clippy --lib $nostd --features "$f" --target "$target" -- -D warnings
done

node scripts/check-pins.mjs
node bench/summary.mjs --check # bench/README.md's summary must be what bench/results/latest.json gives
node scripts/generate-redis-scripts.mjs --check # pkg/stores/redis-scripts.generated.js must be what pkg/stores/redis/lua/ gives
node scripts/generate-shared-js.mjs --check # pkg/stores/key-set.generated.js must be what src/js/key-set.js gives
node scripts/check-architecture.mjs # ARCHITECTURE.md's map must name every source file, and only those
node scripts/generate-pkg-readme.mjs --check # pkg/README.md (the npm page) must be what README.md gives, and README.md's links must resolve
