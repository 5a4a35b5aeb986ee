# jsdlq — the two commands that matter:
#   make demo   run the pipeline locally
#   make test   vet + every unit and integration test against real servers
SHELL := /bin/bash
GO    ?= go
STACK := $(GO) run ./tools/stackctl
# Packages whose tests run; go test starts the emulators it needs per binary,
# but `stackctl with` gives the whole run one pair (faster, less memory).
# go test starts packages in the order given: the longest run first, so they
# overlap everything else instead of ending the run alone.
SLOW_PKGS := ./internal/chaos ./internal/deploycheck ./tools/tfschema ./bridge ./console ./shared/reconciler ./internal/kitcompat
PKGS  ?= $(SLOW_PKGS) ./...
TEST_TIMEOUT ?= 14m
# Test binaries (and compiles) at once: most integration tests wait on
# emulators and servers rather than compute, so twice the cores keeps the
# cores busy while those wait. Tests marked t.Parallel run TEST_PARALLEL at
# once within a binary.
NCPU          := $(shell nproc 2>/dev/null || echo 2)
TEST_P        ?= $(shell echo $$(( $(NCPU) * 2 )))
TEST_PARALLEL ?= $(shell echo $$(( $(NCPU) * 2 )))
# The raw events of the last run, for a closer look (go tool test2json's
# format; internal/testreport reads them).
TEST_JSON ?= .local/test/last.json

.PHONY: help up down status logs env demo test test-go test-short vet lint fmt tf-validate bench

help:
	@echo "make demo | test | test-short | up | down | status | logs | env | lint | tf-validate | bench | chaos | fuzz"

up: ## start the local stack (emulators, nats-server) and create topic, push subscription and queue
	$(STACK) up

down: ## stop everything 'make up' started
	$(STACK) down

status:
	$(STACK) status

logs:
	$(STACK) logs

env:
	@$(STACK) env

demo: ## the pipeline end to end: stack, 7-agent fleet, 300 tasks twice (learning, then predictions on), summary; KEEP=1 leaves the stack up
	@trap 'echo "demo: interrupted"' INT TERM; started=0; \
	if $(STACK) status >/dev/null 2>&1; then echo "demo: using the stack that is already up (left running)"; \
	else $(STACK) up || exit 1; started=1; fi; \
	eval "$$($(STACK) env)"; \
	$(GO) run ./tools/demo $(DEMO_FLAGS); rc=$$?; \
	if [ "$$started" = 1 ] && [ "$(KEEP)" != 1 ]; then echo; $(STACK) down; fi; \
	exit $$rc

vet:
	$(GO) vet ./...

# One go test run does it all. go vet runs inside it (-vet=all: every
# analyzer `go vet` runs, on every package, test files included), so the
# tests of one package start while others still compile instead of after a
# vet of everything; tf-validate's script runs as a test of tools/tfschema
# (TestValidateScript), beside the others instead of after them. The output
# is plain go test's, then the ten slowest tests and packages and the test
# counts; the status is go test's (pipefail).
test-go:
	@mkdir -p $(dir $(TEST_JSON))
	set -o pipefail; $(STACK) with -- $(GO) test -json -vet=all -count=1 -p $(TEST_P) -parallel $(TEST_PARALLEL) \
	  -timeout $(TEST_TIMEOUT) $(PKGS) | $(GO) run ./internal/testreport -json $(TEST_JSON)

test: test-go

# The unit tests alone: -short skips every test that needs the gcloud
# emulators, a nats-server, a browser, npm, terraform or a build of its own
# (internal/testenv skips them in one place). No emulator is started.
SHORT_TIMEOUT ?= 5m
test-short:
	set -o pipefail; $(GO) test -json -short -vet=all -count=1 -p $(TEST_P) -timeout $(SHORT_TIMEOUT) ./... | \
	  $(GO) run ./internal/testreport

# Not part of `make test`: Go benchmarks on emulators of their own, then the
# load driver on a private stack on free ports (never 8681/8682/4222/8123/
# 8080/8090, so it runs next to `make up`); writes docs/PERFORMANCE.md.
BENCH_DIR ?= .local/bench
BENCH_COUNT ?= 3
bench: ## benchmarks side by side with their physical limits -> docs/PERFORMANCE.md (about 15 min)
	@mkdir -p $(BENCH_DIR)
	@echo "bench 1/2: Go benchmarks (output in $(BENCH_DIR)/go-bench.txt)"
	set -o pipefail; $(STACK) with -- bash -c '\
	  set -e; \
	  $(GO) test ./bridge -run "^$$" -bench "Forward$$" -benchtime 20000x -count $(BENCH_COUNT) -timeout 10m; \
	  $(GO) test ./functions/classify -run "^$$" -bench "Classify" -benchtime 600x -timeout 5m; \
	  $(GO) test ./functions/replay -run "^$$" -bench "Replay$$" -benchtime 50x -timeout 5m; \
	  $(GO) test ./shared/reconciler -run "^$$" -bench "EntryLife$$" -benchtime 4000x -timeout 30m; \
	  $(GO) test ./emulator/cloudtasks -run "^$$" -bench "DispatchLateness$$" -benchtime 500x -timeout 5m; \
	  $(GO) test ./console -run "^$$" -bench "Pages$$" -benchtime 100x -timeout 30m' \
	  2>&1 | tee $(BENCH_DIR)/go-bench.txt
	@echo "bench 2/2: load driver on a private stack"
	$(GO) run ./tools/loadgen -go-bench $(BENCH_DIR)/go-bench.txt -out docs/PERFORMANCE.md $(LOADGEN_FLAGS)

# Every fuzz target (func FuzzX in a *_test.go file) for FUZZTIME each. Their
# seed corpora (f.Add and testdata/fuzz/FuzzX) run in every `make test`; a
# crasher found here lands in testdata/fuzz/FuzzX of its package: commit it
# with the fix.
FUZZTIME ?= 10s
.PHONY: fuzz chaos
fuzz: ## run each fuzz target for FUZZTIME (default 10s)
	@set -e; for f in $$(grep -l '^func Fuzz' $$(git ls-files '*_test.go')); do \
	  dir=./$$(dirname $$f); \
	  for t in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
	    echo "fuzz $$dir $$t ($(FUZZTIME))"; \
	    $(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) $$dir; \
	  done; \
	done

# Fault scenarios against real processes on free ports (never the `make up`
# ports), full counts; writes the measured table into docs/RELIABILITY.md.
# `make test` runs the same scenarios with smaller counts.
CHAOS_TIMEOUT ?= 40m
chaos: ## fault scenarios at full size -> docs/RELIABILITY.md
	JSDLQ_CHAOS=full JSDLQ_CHAOS_REPORT=$(CURDIR)/docs/RELIABILITY.md \
	  $(GO) test -count=1 -v -timeout $(CHAOS_TIMEOUT) -run 'TestChaos' ./internal/chaos

tf-validate:
	bash tools/tfschema/validate.sh

fmt:
	gofmt -w $$(git ls-files '*.go')

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...
