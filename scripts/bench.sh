#!/usr/bin/env bash
# `make bench`: keel-lock side by side with async-mutex, @sesamecare-oss/redlock, redis-semaphore,
# redlock-universal and a plain-JS floor, in one run (see bench/README.md). Builds the package,
# starts its own redis-server (stopped by PID at the end), a throwaway PostgreSQL cluster
# (initdb in a temp dir, stopped with pg_ctl and by PID, directory removed) and local workerd
# through Miniflare (the Durable Object store and workerd start-up; every instance disposed),
# prints a markdown table and writes bench/results/latest.json + results.md. No assertions:
# numbers only.
#   KEEL_BENCH_NO_BUILD=1  use the pkg/dist already built
#   KEEL_BENCH_ARGS="--quick"  a 20-second smoke run (results go to bench/results/partial.json)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

if [ "${KEEL_BENCH_NO_BUILD:-}" != 1 ] || [ ! -f pkg/dist/node/keel_lock_bg.wasm ]; then
  echo "[bench] building the package (scripts/build-pkg.sh)" >&2
  bash scripts/build-pkg.sh >/dev/null
fi
if [ ! -d bench/node_modules ] || [ bench/package-lock.json -nt bench/node_modules/.package-lock.json ]; then
  (cd bench && npm ci --no-audit --no-fund --loglevel=error)
fi

# Hard cap well under the 10-minute budget; the runner cleans up its redis-server and its
# Miniflare/workerd instances on any exit.
timeout --signal=TERM 480 node bench/run.mjs ${KEEL_BENCH_ARGS:-}
# Where keel-lock's in-isolate time goes (CPU profile summary; bench/README.md explains it).
timeout --signal=TERM 60 node bench/profile.mjs
