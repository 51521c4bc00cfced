#!/usr/bin/env bash
# The pure Rust core, natively: formatting, clippy on every feature set, unit, property,
# conformance and doc tests.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/lint.sh
cargo test
