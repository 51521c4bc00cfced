#!/usr/bin/env bash
# `make demo`: build the package and run the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build-pkg.sh >/dev/null
node examples/node-demo.mjs
