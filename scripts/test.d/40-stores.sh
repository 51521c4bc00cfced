#!/usr/bin/env bash
# The stores against real servers that the tests start and stop themselves: redis-server (via
# ioredis 5/6, node-redis 5/4, Valkey GLIDE, and @upstash/redis through a REST fixture), a throwaway
# PostgreSQL cluster (pg), better-sqlite3, D1 in local workerd, and a three-member etcd cluster.
#   - the store tests that import pkg/stores/ from the source tree (redis-replicas.test.js: the
#     waitForReplicas option against a primary with a replica and a Cluster with replicas);
#   - the conformance kit, keel-lock/testing, run against EVERY store, and shown to catch broken
#     ones; a user-written Redis store raced from two OS processes; and a leader SIGKILLed in one
#     OS process, replaced by a second at its TTL as a third observes — these use keel-lock as
#     users get it: pkg/ built, packed, and the tarball installed into tests/stores.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"

bash scripts/ensure-pkg.sh

# Pack into a private directory (scripts/test.d/30-package.sh packs into pkg/ itself).
packdir="$(mktemp -d "${TMPDIR:-/tmp}/keel-lock-pack.XXXXXX")"
trap 'rm -rf "$packdir"' EXIT
tarball="$packdir/$(cd pkg && npm pack --silent --pack-destination "$packdir" | tail -1)"
echo "packed $(basename "$tarball"): $(tar -tzf "$tarball" | wc -l) files"

cd tests/stores
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
npm install --no-save --no-audit --no-fund --loglevel=error "$tarball"

# One file at a time: each starts its own servers, and the timing-based expiry checks are
# steadier without the others competing for the CPU. --test-force-exit: a failed test that left
# a client reconnecting to a server it stopped fails the run instead of hanging it.
node --test --test-concurrency=1 --test-force-exit --test-reporter=spec \
  redis.test.js redis-waiting.test.js redis-shared.test.js redis-multi.test.js redis-inspect.test.js redis-watch.test.js redis-replicas.test.js redis-offline-queue.test.js events.test.js pg-failures.test.js sqlite.test.js postgres.test.js pg-watch.test.js d1.test.js etcd.test.js etcd-waiting.test.js etcd-shared.test.js etcd-many.test.js etcd-watch.test.js types.test.js \
  kit.test.js observe.test.js conformance.test.js two-process.test.js leader-failover.test.js exit.test.js
