# The two commands of the README: `make run` and `make test`. Both install what is missing first.
SHELL := /bin/bash
.DEFAULT_GOAL := help
PYTEST := .venv/bin/pytest
SWIFT_FORMAT ?= swift-format
SWIFT_SOURCES := Sources Tests bench/QueueBench fuzz/Sources Package.swift

.PHONY: help deps deps-run deps-package venv build release deb dist lint format test test-swift test-e2e test-asan chaos drill run bench fuzz clean

help:
	@echo "make run    install what is missing, build, start the relay (see README)"
	@echo "make test   install what is missing, build, run every test (test-asan included)"
	@echo "make bench  measure the relay against its ceilings (bench/results/)"
	@echo "make deb    a Debian package of the relay in dist/ (Swift runtime linked in; lintian-checked)"
	@echo "make dist   the same tree as a tarball in dist/"
	@echo "make chaos  the chaos suite on SEEDS=N random seeds (default 10), or SEED=S to replay one"
	@echo "make drill  the failover drill alone on a real Patroni cluster, DRILL_SECONDS (60) of load around each step"

# Everything the tests need. Building and `make run` need less (no PostgreSQL server): deps-run.
deps:
	@scripts/install-deps.sh

deps-run:
	@scripts/install-deps.sh run

deps-package:
	@scripts/install-deps.sh package

venv: deps
	@scripts/setup-venv.sh

build: deps-run
	swift build

# The release binary users run, with the Swift runtime linked in as `make deb` builds it: one set of flags for
# every release build, so `make test`'s e2e tier and its package test share one build instead of rebuilding.
RELEASE_FLAGS := -c release --static-swift-stdlib

release: deps-run
	swift build $(RELEASE_FLAGS)

# The binary with the Swift runtime linked statically, packaged for hosts without a toolchain (SPEC §6a,
# docs/operations.md "Install"): dist/kumapush-relay_<version>_<arch>.deb, or the same tree as a .tar.gz.
deb: deps-package
	@scripts/build-deb.sh deb

dist: deps-package
	@scripts/build-deb.sh dist

# swift-format (shipped with the Swift toolchain) with the committed .swift-format: any finding fails, and every
# finding it reports is one `make format` fixes (docs/testing.md, "Formatting").
lint:
	$(SWIFT_FORMAT) lint --strict --recursive --parallel $(SWIFT_SOURCES)

format:
	$(SWIFT_FORMAT) format --in-place --recursive --parallel $(SWIFT_SOURCES)

# The format check, Swift unit and component tests (debug build), the end-to-end tests against the release binary
# users run (KUMAPUSH_RELAY_BINARY), then the transport-fault, delivery and resource end-to-end tests again against
# an AddressSanitizer build (test-asan).
E2E_BINARY := $(CURDIR)/.build/release/kumapush-relay

test: venv lint
	swift build --build-tests
	swift test
	swift build $(RELEASE_FLAGS)
	KUMAPUSH_RELAY_BINARY=$(E2E_BINARY) $(PYTEST) -v Tests/e2e
	@scripts/test-asan.sh

test-e2e: venv
	swift build $(RELEASE_FLAGS)
	KUMAPUSH_RELAY_BINARY=$(E2E_BINARY) $(PYTEST) -v Tests/e2e

# The relay built with AddressSanitizer (.build-asan) through the transport-fault, delivery and resource e2e tests;
# any ASan report fails it (scripts/test-asan.sh).
test-asan: venv
	@scripts/test-asan.sh

# The chaos suite (Tests/e2e/chaos*.py) on random seeds; `make test` runs its fixed seeds. A failing seed prints
# the command that replays it: make chaos SEED=S. DURATION=120 runs two minutes of chaos per seed instead of 20 s;
# STORE=postgres runs the relay on a throwaway PostgreSQL server instead of SQLite.
SEEDS ?= 10
chaos: venv build
	.venv/bin/python Tests/e2e/chaos.py $(if $(SEED),--seed $(SEED),--seeds $(SEEDS)) $(if $(DURATION),--duration $(DURATION)) $(if $(STORE),--store $(STORE))

# The failover drill alone (Tests/e2e/test_failover_drill.py, docs/operations.md "Failover drill"): etcd and two
# PostgreSQL nodes under Patroni, the relay under webhook load through a crash of the leader's host, a switchover
# and a silent loss of the leader's host. `make test` runs it with 3 s of steady load around each step (about 2
# minutes); here DRILL_SECONDS (60) around each, DRILL_RATE (100) webhooks a second. Needs root (PostgreSQL runs
# as `postgres`, iptables drops the lost host's packets).
DRILL_SECONDS ?= 60
DRILL_RATE ?= 100
drill: venv
	swift build
	DRILL_SECONDS=$(DRILL_SECONDS) DRILL_RATE=$(DRILL_RATE) $(PYTEST) -v -s Tests/e2e/test_failover_drill.py

run: release
	@scripts/run.sh

# SPEC §7's figures and those of issues #13–#17 against their ceilings, each the median of BENCH_RUNS runs (3);
# results in bench/results/. BENCH=ingest,deliver,queue,postgres,latency,testwait,outage runs a subset;
# BENCH=soak the 10-minute soak (not in the default run, which stays under 15 minutes).
bench: venv
	@scripts/install-deps.sh bench
	@scripts/setup-venv.sh bench/requirements.txt
	.venv/bin/python bench/run.py

# libFuzzer on every parser of outside bytes, FUZZ_SECONDS (60) each; `make test` replays the corpus and crashes.
fuzz: deps
	@scripts/fuzz.sh

clean:
	rm -rf .build .build-asan .dev dist
