#!/usr/bin/env bash
# Installs everything `make test`, `make demo` and `make bench` need on a fresh Debian 12 machine.
# Idempotent: every step checks first, so a second run takes seconds. The versions below are
# ones known to install and work on Debian 12 with stable Rust.
#   scripts/setup.sh        everything
#   scripts/setup.sh lint   only what `make lint` needs: the Rust targets and rustfmt/clippy
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
mode="${1:-all}"

WASM_BINDGEN_VERSION=0.2.130   # must equal the `wasm-bindgen = "=…"` pin in Cargo.toml

log() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }
have() { command -v "$1" >/dev/null 2>&1; }

# --- Rust targets and components (all `make lint` needs) -----------------------------------
rustup target add wasm32-unknown-unknown wasm32-wasip2 >/dev/null 2>&1
rustup component add rustfmt clippy >/dev/null 2>&1 || true
if [ "$mode" = lint ]; then
  log "ready (lint)"
  exit 0
fi

# --- apt packages (browsers for wasm tests, servers for store tests) -----------------------
apt_pkgs=(chromium chromium-driver firefox-esr redis-server postgresql etcd-server)
missing=()
for p in "${apt_pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  log "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # The postgresql package starts a cluster on 5432; our tests start their own, so stop it.
  if printf '%s\n' "${missing[@]}" | grep -qx postgresql; then
    service postgresql stop >/dev/null 2>&1 || true
  fi
  # etcd-server may start a member on 2379; the tests start their own cluster, so stop it.
  if printf '%s\n' "${missing[@]}" | grep -qx etcd-server; then
    service etcd stop >/dev/null 2>&1 || true
  fi
fi

# --- Rust tools -------------------------------------------------------------------------------
if ! have wasm-bindgen || [ "$(wasm-bindgen --version | awk '{print $2}')" != "$WASM_BINDGEN_VERSION" ]; then
  log "cargo install wasm-bindgen-cli $WASM_BINDGEN_VERSION (~2 min)"
  # No --locked: the CLI's own lockfile pins a crate version the crate registry no longer serves.
  cargo install -q wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION" --force
fi
if ! have wasm-pack; then
  log "cargo install wasm-pack (~2 min)"
  cargo install -q wasm-pack --locked
fi
if ! have geckodriver; then
  log "cargo install geckodriver (~2 min)"
  cargo install -q geckodriver --locked
fi

# --- npm dependencies of every JS project in the repo -----------------------------------------
for dir in $(git ls-files '*package-lock.json' | xargs -rn1 dirname); do
  if [ ! -d "$dir/node_modules" ] || [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
    log "npm ci in $dir"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
  fi
done

# --- per-suite extras (scripts/setup.d: store servers' checks, Workers tooling) -----------------
for extra in scripts/setup.d/*.sh; do
  [ -e "$extra" ] || continue
  log "$extra"
  bash "$extra"
done
log "ready"
