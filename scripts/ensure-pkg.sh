#!/usr/bin/env bash
# Builds the npm package's generated files (scripts/build-pkg.sh) unless the last complete
# build (the pkg/dist/.built stamp, written last) is newer than everything they are made from.
# For the suites that pack pkg/ without needing a fresh build every time.
set -euo pipefail
cd "$(dirname "$0")/.."

stamp=pkg/dist/.built
inputs=(src Cargo.toml Cargo.lock scripts/build-pkg.sh scripts/node-glue.mjs scripts/trim-workerd-glue.mjs scripts/dedupe-glue-imports.mjs pkg/workerd/index.js pkg/index.d.ts pkg/package-lock.json LICENSE-MIT LICENSE-APACHE)
if [ -f "$stamp" ] && [ -z "$(find "${inputs[@]}" -newer "$stamp" -print -quit)" ]; then
  echo "pkg/dist is newer than its sources (${inputs[*]}): not rebuilding"
else
  bash scripts/build-pkg.sh
fi
