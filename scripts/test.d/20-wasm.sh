#!/usr/bin/env bash
# The wasm-bindgen tests of the Rust-level JS bindings (tests/wasm/bindings.rs: setLockStore, the
# MemoryLockStore class and its acquireShared, a JS store's acquireShared, checkLockStore; the
# lock API is tested through the package, 30-package) in three environments: Node
# (tests/wasm_node.rs), headless Chromium and headless Firefox (tests/wasm_browser.rs).
#
# Browser runs silently skip tests that are not configured for them, and a stray filter makes
# any run pass with 0 tests, so after each run the count of tests that actually passed is
# checked against the tests declared in the sources. Every environment is run even when an
# earlier one fails; the script exits non-zero if any failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH="$HOME/.cargo/bin:$PATH"

# The headless runner gives a whole browser run 20 s by default; a busy shared machine needs more.
export WASM_BINDGEN_TEST_TIMEOUT="${WASM_BINDGEN_TEST_TIMEOUT:-240}"
CHROMEDRIVER_BIN="${CHROMEDRIVER_BIN:-/usr/bin/chromedriver}"
GECKODRIVER_BIN="${GECKODRIVER_BIN:-$HOME/.cargo/bin/geckodriver}"

# Guard against the counting itself breaking (say, a new attribute spelling the grep misses).
MIN_SHARED_TESTS=6

declared() { cat "$@" | grep -cE '^[[:space:]]*#\[wasm_bindgen_test\]'; }
ignored() { cat "$@" | grep -cE '^[[:space:]]*#\[ignore'; }

shared=tests/wasm/bindings.rs
shared_count=$(declared "$shared")
if [ "$shared_count" -lt "$MIN_SHARED_TESTS" ]; then
  echo "20-wasm: found only $shared_count #[wasm_bindgen_test] in $shared (expected >= $MIN_SHARED_TESTS)" >&2
  exit 1
fi
expected_for() { # test crate file -> tests that must pass there
  echo $(($(declared "$shared" "$1") - $(ignored "$shared" "$1")))
}
expected_node=$(expected_for tests/wasm_node.rs)
expected_browser=$(expected_for tests/wasm_browser.rs)

failures=()
summary=()

# run NAME EXPECTED COMMAND... : runs COMMAND, echoing its output, then checks its test result.
run() {
  local name=$1 expected=$2
  shift 2
  local log start rc line passed
  log=$(mktemp)
  start=$SECONDS
  printf '\n--- %s: %s\n' "$name" "$*"
  "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  # A browser whose renderer never answered the driver ran no test at all (the runner reports
  # none as run, the driver "Timed out receiving message from renderer"): that is the browser
  # failing to start the page, not a verdict on a test, so it is started once more, and said.
  # A test that fails or hangs inside a page that did load is not retried.
  if [ "$rc" -ne 0 ] && grep -aq 'Timed out receiving message from renderer' "$log" \
    && grep -aq 'Failed to detect test as having been run' "$log" && ! grep -aq '^test .* \.\.\. ' "$log"; then
    printf '\n--- %s: the browser never loaded the test page; starting it once more\n' "$name"
    "$@" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
  fi
  # The runner's libtest-style summary; there is exactly one for the one test crate we run.
  line=$(grep -aoE 'test result: [A-Za-z]+\. [0-9]+ passed; [0-9]+ failed; [0-9]+ ignored' "$log" | tail -n 1)
  passed=$(sed -nE 's/^test result: [A-Za-z]+\. ([0-9]+) passed.*/\1/p' <<<"$line")
  rm -f "$log"
  local took=$((SECONDS - start))
  if [ "$rc" -ne 0 ]; then
    failures+=("$name: exited with status $rc")
  elif [ -z "$passed" ]; then
    failures+=("$name: no 'test result' line in the output (did any test run?)")
  elif [ "$passed" -lt "$expected" ]; then
    failures+=("$name: only $passed tests passed, expected $expected (tests were skipped)")
  else
    summary+=("$name: $passed passed (expected $expected), ${took}s — ${line#test result: }")
    return 0
  fi
  summary+=("$name: FAILED after ${took}s")
}

run "node" "$expected_node" \
  wasm-pack test --node --features js --test wasm_node

run "chromium" "$expected_browser" \
  env WASM_BINDGEN_USE_BROWSER=1 wasm-pack test --headless --chrome --chromedriver "$CHROMEDRIVER_BIN" --features js --test wasm_browser

run "firefox" "$expected_browser" \
  env WASM_BINDGEN_USE_BROWSER=1 wasm-pack test --headless --firefox --geckodriver "$GECKODRIVER_BIN" --features js --test wasm_browser

printf '\n=== wasm binding tests ===\n'
printf '  %s\n' "${summary[@]}"
if [ ${#failures[@]} -gt 0 ]; then
  printf 'FAILED:\n' >&2
  printf '  %s\n' "${failures[@]}" >&2
  exit 1
fi
