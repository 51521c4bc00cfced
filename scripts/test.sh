#!/usr/bin/env bash
# Runs every suite in scripts/test.d in name order; stops at the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
only="${1:-}"
for suite in scripts/test.d/*.sh; do
  [ -n "$only" ] && [[ "$suite" != *"$only"* ]] && continue
  printf '\n\033[1m=== %s ===\033[0m\n' "$suite"
  start=$SECONDS
  bash "$suite"
  printf '\033[1m=== %s passed in %ss ===\033[0m\n' "$suite" "$((SECONDS - start))"
done
printf '\n\033[1mall suites passed\033[0m\n'
