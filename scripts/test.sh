#!/usr/bin/env bash
# Runs every suite in scripts/test.d in name order; stops at the first failure.
#   scripts/test.sh [NAME]   only the suites whose file name contains NAME
#   KEEL_TEST_LOAD=N         N busy processes (one per core: N=2 here) compete with the suites
#                            for the whole run, to prove that no verdict hangs on a short
#                            wall-clock window; they are stopped when the run ends, however it ends
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
only="${1:-}"
load="${KEEL_TEST_LOAD:-0}"
if ! [[ "$load" =~ ^[0-9]+$ ]] || [ "$load" -gt 64 ]; then
  echo "scripts/test.sh: KEEL_TEST_LOAD must be a whole number of busy processes from 0 to 64, got '$load'" >&2
  exit 64
fi

loaders=()
stop_load() { [ ${#loaders[@]} -eq 0 ] || kill "${loaders[@]}" 2>/dev/null || true; }
trap stop_load EXIT
for ((i = 0; i < load; i++)); do
  # A shell spinning at the suites' own priority: it takes its share of a core all the time.
  bash -c 'while :; do :; done' &
  loaders+=($!)
done
[ "$load" -eq 0 ] || printf '\033[1m=== under load: %s busy processes (pids %s) ===\033[0m\n' "$load" "${loaders[*]}"

times=()
for suite in scripts/test.d/*.sh; do
  [ -n "$only" ] && [[ "$suite" != *"$only"* ]] && continue
  printf '\n\033[1m=== %s ===\033[0m\n' "$suite"
  start=$SECONDS
  bash "$suite"
  times+=("$(basename "$suite" .sh) $((SECONDS - start))s")
  printf '\033[1m=== %s passed in %ss ===\033[0m\n' "$suite" "$((SECONDS - start))"
done
printf '\n\033[1mall suites passed\033[0m (%s; load %s)\n' "${times[*]}" "$load"
