# fencegate: see README.md. Every target works on a fresh machine with Go and
# PostgreSQL's server binaries; the pinned S3 stores are built on first use into
# ~/.cache/fencegate (about 10 minutes, once per machine).

GO      ?= go
BIN     := bin/fencegate
PKGS    := ./...
# go test's own 10-minute default is too short for the conformance package
# (about 18 minutes alone on two cores; 24 when the machine is shared).
TEST_TIMEOUT ?= 45m
FUZZTIME     ?= 60s
# The tests' build: the gateway carries its failpoints (internal/failpoint)
# only with this tag; the binary `make build` makes carries none. The child
# gateways the tests start are built with it by the tests themselves
# (stack.FailpointTag), so a bare `go test` works too.
TEST_TAGS    := failpoint

export CGO_ENABLED ?= 0
# aws-sdk-go-v2's default config fails while this is set (docs/TESTING.md, the test stores).
unexport AWS_CA_BUNDLE

.PHONY: build run cluster test test-short bench fuzz lint schema flags stores clean memcheck mutants s3-tests chaos

build:
	$(GO) build -o $(BIN) ./cmd/fencegate

# The whole local stack: PostgreSQL + SeaweedFS + the gateway, data in ./.fencegate.
run: build
	scripts/ensure-deps.sh
	exec ./$(BIN) dev run

# The production-shaped stack (docs/SCALING.md): PostgreSQL primary and
# synchronous standby, SeaweedFS master, 3 volume servers, filer and S3,
# 3 gateways behind HAProxy; the same ./.fencegate/env as `make run`.
cluster: build
	scripts/ensure-deps.sh --cluster
	exec ./$(BIN) dev cluster

# Unit and conformance tests against one throwaway PostgreSQL cluster and SeaweedFS.
test: build
	scripts/ensure-deps.sh --clients
	./$(BIN) dev exec -- $(GO) test -tags $(TEST_TAGS) -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)

test-short: build
	scripts/ensure-deps.sh
	./$(BIN) dev exec -- $(GO) test -tags $(TEST_TAGS) -count=1 -short -timeout $(TEST_TIMEOUT) $(PKGS)

# Throughput, latency, CPU and memory: straight to SeaweedFS, through fencegate
# and through versitygw's s3 proxy, interleaved in one run; starts its own stack
# and writes docs/bench-results.json, docs/PERFORMANCE.md and
# docs/throughput.png and .svg (about 9 minutes).
bench:
	$(GO) run ./cmd/fencebench

# Under 2 minutes; its short cells are noisy, so it writes to bin/bench-quick/
# and leaves the committed full run's files alone.
.PHONY: bench-quick bench-plot
bench-quick:
	$(GO) run ./cmd/fencebench -quick

# The capacity model (docs/SCALING.md, issue 33): the cluster stack with 1, 2
# and 3 gateways behind HAProxy, each under the same offered load (64 KiB PUTs
# at 120/s, then GETs at 300/s, 20 s each, then 8 writers on one key), and
# every part's CPU per operation; writes docs/capacity-results.json and the
# generated section of docs/SCALING.md (about 5 minutes; needs haproxy).
.PHONY: bench-capacity
bench-capacity:
	$(GO) run ./cmd/fencebench -capacity

# Redraw docs/throughput.png and .svg from docs/bench-results.json, measuring nothing.
bench-plot:
	$(GO) run ./cmd/fencebench -from docs/bench-results.json -plot-only

# Each fuzz target for FUZZTIME (go test fuzzes one target at a time).
fuzz:
	@for p in ./sigv4 ./gateway; do \
		for t in $$($(GO) test -list '^Fuzz' $$p | grep '^Fuzz'); do \
			echo "fuzzing $$p $$t for $(FUZZTIME)"; \
			$(GO) test $$p -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) || exit 1; \
		done; \
	done

# gofmt, go vet (also the tests' build of the gateway, with its failpoints),
# no file over 1 MiB or executable binary tracked (scripts/check-tracked.sh),
# docs/FLAGS.md current (what the commands define), and meta/schema.sql
# current: migrated into a private PostgreSQL it starts and stops
# (DATABASE_URL is ignored, so no other server gets the database).
SCHEMA_TEST := env -u DATABASE_URL $(GO) test -count=1 -run '^TestSchemaFileIsCurrent$$' ./meta
FLAGS_TEST  := $(GO) test -count=1 -run '^TestFlagReferenceIsCurrent$$' ./cmd/fencegate
lint:
	scripts/ensure-deps.sh
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) vet -tags $(TEST_TAGS),fencegate_brokenfence ./gateway ./internal/failpoint
	scripts/check-tracked.sh
	$(FLAGS_TEST)
	$(SCHEMA_TEST)

# meta/schema.sql: the schema after every migration (pg_dump --schema-only of
# a freshly migrated database, normalised); commit it with the migration.
schema:
	scripts/ensure-deps.sh
	FENCEGATE_UPDATE_SCHEMA=1 $(SCHEMA_TEST)

# docs/FLAGS.md: every command's flags, from their definitions in cmd/fencegate;
# commit it with the flag change.
flags:
	FENCEGATE_UPDATE_FLAGS=1 $(FLAGS_TEST)

# Build the pinned SeaweedFS and versitygw into the cache ahead of time.
stores: build
	./$(BIN) dev stores

clean:
	rm -rf bin

# A 2 GiB PUT and GET through a gateway process: peak RSS growth must stay
# under 64 MiB (prints the numbers).
memcheck: build
	FENCEGATE_MEMCHECK=1 ./$(BIN) dev exec -- $(GO) test -tags $(TEST_TAGS) -count=1 -v -run TestMemoryStreaming2GiB ./conformance

# Mutation check: applies deliberate protocol bugs one at a time (skip the
# fence, skip the commit's lease check, unknown recorded as failed, no copy
# source read check, a header read by exact case), runs the tests meant to
# catch each and fails if any mutant survives (a few minutes; prints a table).
mutants: build
	scripts/ensure-deps.sh --clients
	TEST_TAGS='$(TEST_TAGS)' ./$(BIN) dev exec -- scripts/mutants.sh

# The ceph/s3-tests suite (basic profile) through `make run`'s stack, started in
# bin/s3-tests/stack and stopped at the end; prints the counts and the
# regressions against the store alone (about 11 minutes). The suite stays
# outside the project: S3TESTS_DIR (default ../shared/s3-tests). Extra pytest
# arguments: make s3-tests S3TESTS_ARGS='-k atomic_dual_write'.
S3TESTS_DIR  ?= ../shared/s3-tests
S3TESTS_ARGS ?=
s3-tests: build
	scripts/ensure-deps.sh
	S3TESTS_DIR='$(S3TESTS_DIR)' S3TESTS_ARGS='$(S3TESTS_ARGS)' scripts/s3-tests.sh

# The chaos campaign (docs/CHAOS.md): three gateways on their own PostgreSQL
# and SeaweedFS, clients and a seeded schedule of faults for CHAOS_DURATION,
# then the linearizability check and the audit. Prints the seed; CHAOS_SEED
# replays a schedule. Each run's report and chart (and a failing run's
# history, porcupine visualization, logs and REPLAY line) go to
# bin/chaos/chaos-TestChaosCampaign-SEED-*/. `make test` runs a 20 s smoke.
# CHAOS_STACK=cluster runs the production-shaped stack (docs/SCALING.md):
# PostgreSQL as a primary with a synchronous standby, SeaweedFS as master, three
# volume servers, filer and S3, HAProxy in front of the gateways (a third of the
# clients send through it), and adds the faults postgres-failover, volume-kill,
# filer-restart, haproxy-restart and gateway-drain; CHAOS_FAULTS narrows the
# kinds; CHAOS_LATE=reservations makes store-late hold reservation PUTs only.
CHAOS_DURATION ?= 60s
CHAOS_SEED     ?=
CHAOS_STACK    ?=
CHAOS_FAULTS   ?=
CHAOS_LATE     ?=
chaos: build
	scripts/ensure-deps.sh --chaos
	$(if $(filter cluster,$(CHAOS_STACK)),scripts/ensure-deps.sh --cluster)
	FENCEGATE_CHAOS_DURATION='$(CHAOS_DURATION)' FENCEGATE_CHAOS_SEED='$(CHAOS_SEED)' FENCEGATE_CHAOS_DIR='$(CURDIR)/bin/chaos' \
		FENCEGATE_CHAOS_STACK='$(CHAOS_STACK)' FENCEGATE_CHAOS_FAULTS='$(CHAOS_FAULTS)' FENCEGATE_CHAOS_LATE='$(CHAOS_LATE)' \
		$(GO) test -tags $(TEST_TAGS) -count=1 -v -timeout 0 -run '^TestChaosCampaign$$' ./conformance
