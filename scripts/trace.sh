#!/usr/bin/env bash
# `make trace`: build and pack the package, install it with the OpenTelemetry SDK into
# examples/trace, and draw the waterfall of twenty waiting charges from their recorded spans.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
bash scripts/ensure-pkg.sh >/dev/null
packdir="$(mktemp -d "${TMPDIR:-/tmp}/keel-lock-trace.XXXXXX")"
trap 'rm -rf "$packdir"' EXIT
tarball="$packdir/$(cd pkg && npm pack --silent --pack-destination "$packdir" | tail -1)"
cd examples/trace
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
npm install --no-save --no-audit --no-fund --loglevel=error "$tarball"
node trace.mjs
