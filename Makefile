# keel-lock — one entry point. `make test` and `make demo` run `make setup` first, so on a fresh
# machine each is a single command.
SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)

.PHONY: setup pkg test demo bench lint clean

setup:
	@bash scripts/setup.sh

# Build the npm package's wasm artefacts into pkg/dist (release, size-optimised).
pkg: setup
	@bash scripts/build-pkg.sh

# Lint needs only the Rust targets and rustfmt/clippy (and Node), not browsers or servers.
lint:
	@bash scripts/setup.sh lint
	@bash scripts/lint.sh

# Every test suite: scripts/test.d/*.sh in order (native core, wasm in Node/Chromium/Firefox,
# the packed package in each runtime, stores against real servers, Workers, components).
test: setup
	@bash scripts/test.sh

demo: setup
	@bash scripts/demo.sh

bench: setup
	@bash scripts/bench.sh

clean:
	cargo clean
	rm -rf pkg/dist pkg/*.tgz
