#!/usr/bin/env bash
# The Durable Object lock store in real workerd (Miniflare): the lock API suite, conformance kit,
# bad RPC input, alarms, two isolates racing, restart with persistence; and keel-lock/etcd inside a
# Worker against a three-member etcd cluster the test starts. Runs against the packed
# npm package, so pkg/dist must be built (with the workerd build) first.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$HOME/.cargo/bin:$PATH"
bash scripts/ensure-pkg.sh
if [ ! -d tests/workers/node_modules ] || [ tests/workers/package-lock.json -nt tests/workers/node_modules/.package-lock.json ]; then
  (cd tests/workers && npm ci --no-audit --no-fund --loglevel=error)
fi
cd tests/workers
export WRANGLER_SEND_METRICS=false CLOUDFLARE_CF_FETCH_ENABLED=false
node --test --test-concurrency=1 test/
