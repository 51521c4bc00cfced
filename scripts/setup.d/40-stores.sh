#!/usr/bin/env bash
# Store tests (tests/stores): redis-server, PostgreSQL and etcd come from scripts/setup.sh's apt list,
# the npm devDependencies from its `npm ci` loop. This only checks that what those left behind
# actually runs, and repairs the one thing that can be missing: better-sqlite3's native module
# (built from source when no prebuilt binary can be fetched). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/../.."

for pair in redis-server:redis-server etcd:etcd-server; do
  bin="${pair%%:*}"
  command -v "$bin" >/dev/null || { echo "[setup.d/40-stores] $bin missing (apt ${pair#*:})" >&2; exit 1; }
done
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null || {
  echo "[setup.d/40-stores] PostgreSQL (initdb, pg_ctl) missing (apt postgresql)" >&2
  exit 1
}

cd tests/stores
if [ ! -d node_modules ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
if ! node -e 'new (require("better-sqlite3"))(":memory:").close()' >/dev/null 2>&1; then
  echo "[setup.d/40-stores] building better-sqlite3's native module"
  npm rebuild better-sqlite3 --loglevel=error
  node -e 'new (require("better-sqlite3"))(":memory:").close()'
fi
