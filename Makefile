# keel-lock — one entry point. `make test` and `make demo` run `make setup` first, so on a fresh
# machine each is a single command.
SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)

.PHONY: setup pkg test demo trace bench lint clean soak fuzz

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
# `make test KEEL_TEST_LOAD=2` runs them with two busy processes competing for the cores.
test: setup
	@KEEL_TEST_LOAD=$(KEEL_TEST_LOAD) bash scripts/test.sh

# The fault scenarios at length: every store x primitive x fault x broken variant, SOAK_SECONDS
# (default 600) of correct runs in all; histories and a summary table under SOAK_RESULTS
# (tests/faults/results/soak-<time>/).
# Then the workerd scenarios (Durable Object, D1) the same way, WORKERS_SOAK_SECONDS (default
# 120) of correct runs, under SOAK_RESULTS/workers/. Then the component on a
# faulty key-value host: two correct-host runs of the lock and one of each other primitive, of
# COMPONENT_SOAK_SECONDS (default 120) each, and every broken host with seeds 1 to
# COMPONENT_SOAK_SEEDS (default 10) for every primitive. Last, one table of them
# all (tests/faults/summary.js), also written to SOAK_RESULTS/all.md.
SOAK_SECONDS ?= 600
COMPONENT_SOAK_SECONDS ?= 120
COMPONENT_SOAK_SEEDS ?= 10
ifndef SOAK_RESULTS
SOAK_RESULTS := $(CURDIR)/tests/faults/results/soak-$(shell date -u +%Y-%m-%dT%H-%M-%S)
endif
soak: setup
	@SOAK_SECONDS=$(SOAK_SECONDS) SOAK_RESULTS=$(SOAK_RESULTS) bash scripts/test.d/70-faults.sh soak
	@KEEL_COMPONENT_FAULT_SECONDS=$(COMPONENT_SOAK_SECONDS) KEEL_COMPONENT_FAULT_BROKEN_SEEDS=$(COMPONENT_SOAK_SEEDS) \
		KEEL_FAULT_RESULTS=$(SOAK_RESULTS) bash scripts/test.d/60-component.sh
	@node tests/faults/summary.js $(SOAK_RESULTS)

# Fuzzing: 10^6 proptest cases per Rust input path (release build), then the JS-level fuzz
# through the packed package (KEEL_JS_FUZZ_CASES, default 200000).
FUZZ_CASES ?= 1000000
fuzz: setup
	KEEL_FUZZ_CASES=$(FUZZ_CASES) cargo test --release --test fuzz_inputs
	@bash scripts/test.d/70-faults.sh fuzz

demo: setup
	@bash scripts/demo.sh

# Twenty charges waiting for one lock, traced with OpenTelemetry and drawn as a waterfall.
trace: setup
	@bash scripts/trace.sh

bench: setup
	@bash scripts/bench.sh

clean:
	cargo clean
	rm -rf pkg/dist pkg/*.tgz
