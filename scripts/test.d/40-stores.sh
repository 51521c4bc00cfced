#!/usr/bin/env bash
# The Redis and SQL stores (pkg/stores/) against real servers that the tests start and stop
# themselves: redis-server (via ioredis 5/6, node-redis 5/4, and @upstash/redis through a REST
# fixture), a throwaway PostgreSQL cluster (pg), better-sqlite3, and D1 in local workerd.
set -euo pipefail
cd "$(dirname "$0")/../../tests/stores"

if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi

# One file at a time: each starts its own servers, and the timing-based expiry checks are
# steadier without the others competing for the CPU.
node --test --test-concurrency=1 --test-reporter=spec \
  redis.test.js sqlite.test.js postgres.test.js d1.test.js types.test.js
