#!/usr/bin/env bash
# keel-lock proven under faults (tests/faults/), through the packed package:
#   - checkLockStoreUnderLoad / checkHistory from keel-lock/testing: correct stores pass, a racy
#     get-then-set store and a fence-reusing one are caught;
#   - a short JS-level fuzz (random restoreLock strings, options, keys, TTLs, stores answering
#     random values: only documented errors, never a wasm trap);
#   - the fault scenarios with fixed seeds: concurrent OS processes against memory, Redis (with and
#     without AOF), Redis Cluster (with replicas), Upstash (REST fixture), better-sqlite3,
#     PostgreSQL and etcd (three members) while holders are SIGKILLed and SIGSTOPped, the store
#     restarts (a cluster master fails over; a replica that fell behind takes over, losing
#     acknowledged grants: reported as losses, and held to none on a store with waitForReplicas;
#     the etcd leader is SIGKILLed, a follower restarted: losing nothing) and store calls fail;
#     every history checked; each scenario also run against a broken store, which must fail;
#   - the Workers scenarios (workers.js) in real workerd through Miniflare: two Worker scripts on
#     one Durable Object namespace while the lock objects are reset and the runtime is restarted
#     on its persist directory with waiters and holders active, and three Worker scripts on one
#     D1 database with abandoned holders and failing binding calls; the lock in each, against its
#     broken variant (a runtime without persistence, a store ignoring the TTL, owner-blind
#     release), and semaphores, read-write locks, multi-key locks and leaders (campaigns and
#     observe) in one scenario each (every scenario in the soak), each against its own broken
#     store (limit-blind, writer-shares, partial-set, two-leaders).
# Each run lasts at least its seconds and then goes on until it has shown what it must (its broken
# store caught, each of its faults exercised), for at most a minute more: a slow machine makes a
# run longer, never vacuous. About 6 to 7 minutes in all (etcd's four scenarios about 50 s of it).
# Modes: `soak` (make soak: every broken variant, SOAK_SECONDS shared among the correct runs of
# run.js and WORKERS_SOAK_SECONDS, default 120, among the Workers scenarios'; histories and
# summary tables under tests/faults/results/) and `fuzz` (make fuzz: the JS fuzz with
# KEEL_JS_FUZZ_CASES cases, default 200000).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
mode="${1:-test}"

bash scripts/ensure-pkg.sh

packdir="$(mktemp -d "${TMPDIR:-/tmp}/keel-lock-pack.XXXXXX")"
trap 'rm -rf "$packdir"' EXIT
tarball="$packdir/$(cd pkg && npm pack --silent --pack-destination "$packdir" | tail -1)"

# The server helpers come from tests/stores/lib/servers.js.
if [ ! -d tests/stores/node_modules ]; then (cd tests/stores && npm ci --no-audit --no-fund --loglevel=error); fi
cd tests/faults
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
npm install --no-save --no-audit --no-fund --loglevel=error "$tarball"

case "$mode" in
  test)
    echo "--- checkLockStoreUnderLoad and checkHistory (keel-lock/testing)"
    node --test --test-reporter=spec load.test.mjs
    echo "--- JS fuzz through the packed package (short)"
    node fuzz.mjs 2000 1
    echo "--- fault scenarios (short, fixed seeds)"
    node run.js
    echo "--- Durable Object and D1 in workerd under faults (short)"
    node workers.js --results results/short/workers
    echo "--- every short fault run, by store x primitive x fault"
    node summary.js results/short
    ;;
  soak)
    echo "--- fault scenarios, full matrix, ${SOAK_SECONDS:-600} s of correct runs"
    node run.js --soak --seconds "${SOAK_SECONDS:-600}" ${SOAK_RESULTS:+--results "$SOAK_RESULTS"}
    echo "--- Durable Object and D1 in workerd under faults, ${WORKERS_SOAK_SECONDS:-120} s of correct runs"
    node workers.js --soak --seconds "${WORKERS_SOAK_SECONDS:-120}" ${SOAK_RESULTS:+--results "$SOAK_RESULTS/workers"}
    ;;
  fuzz)
    node fuzz.mjs "${KEEL_JS_FUZZ_CASES:-200000}" "${KEEL_FUZZ_SEED:-1}"
    ;;
  *)
    echo "unknown mode $mode (test | soak | fuzz)" >&2
    exit 2
    ;;
esac
