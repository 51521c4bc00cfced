#!/usr/bin/env bash
# The keel-lock command as users get it: pkg/ built, packed, and the tarball installed into
# tests/cli, whose tests run node_modules/.bin/keel-lock in real processes against servers they
# start and stop themselves (redis-server, a throwaway PostgreSQL cluster, SQLite files, the
# Upstash REST fixture of tests/stores/lib/servers.js) — and with no store, the machine's default.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"

bash scripts/ensure-pkg.sh

packdir="$(mktemp -d "${TMPDIR:-/tmp}/keel-lock-pack.XXXXXX")"
trap 'rm -rf "$packdir"' EXIT
tarball="$packdir/$(cd pkg && npm pack --silent --pack-destination "$packdir" | tail -1)"
echo "packed $(basename "$tarball"): $(tar -tzf "$tarball" | wc -l) files"

cd tests/cli
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
npm install --no-save --no-audit --no-fund --loglevel=error "$tarball"

# One file at a time: each starts its own servers. --test-force-exit: a failed test that left a
# process behind fails the run instead of hanging it.
node --test --test-concurrency=1 --test-force-exit --test-reporter=spec \
  usage.test.js run.test.js loss.test.js stores.test.js operator.test.js tty.test.js
