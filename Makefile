# baton — make targets. `make test` is what CI runs (.ci/run).
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO        ?= go
OUT       := _out
PKGS      := ./...
TESTFLAGS ?=

.PHONY: help
help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

.PHONY: demo
demo: ## run 5 contenders on one lock against a local Cassandra and show the lock change hands
	$(GO) run ./hack/demo $(DEMOFLAGS)

.PHONY: test
test: check ## all tests, race detector on (installs and starts Cassandra as needed)
	@mkdir -p $(OUT)
	$(GO) test -race -count=1 -timeout 60m -v $(TESTFLAGS) $(PKGS) 2>&1 | tee $(OUT)/test.log \
	  | grep -E --line-buffered '^(--- |ok |FAIL|panic:|simulation |cassandra |\s+\S+_test\.go:[0-9]+: )' || true
	@! grep -qE '^(FAIL|panic:|--- FAIL)' $(OUT)/test.log
	@echo "full log: $(OUT)/test.log"
	@echo "test: $$(grep -cE '^\s*--- PASS' $(OUT)/test.log) passed, $$(grep -cE '^\s*--- FAIL' $(OUT)/test.log) failed"

.PHONY: check
check: ## gofmt and go vet
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) vet $(PKGS)

.PHONY: soak
soak: ## 1,000 simulated histories per fault class
	$(GO) test -race -count=1 -timeout 3h -v ./lock/ -run 'TestSimulation' -sim.histories=1000 2>&1 \
	  | grep -E '^(simulation |--- FAIL|FAIL|ok|panic:|\s+\S+_test\.go)'

.PHONY: bench
bench: ## lock benchmarks on a local Cassandra (acquire latency vs one LWT, handoff)
	$(GO) test -run '^$$' -bench . -benchtime 200x -timeout 30m ./lock/cassandrastore/

.PHONY: build
build: ## build every binary into bin/
	$(GO) build -o bin/ ./hack/...

.PHONY: cassandra-start cassandra-stop
cassandra-start: ## start a local single-node Cassandra on 127.0.0.1:9042 (left running)
	$(GO) run ./hack/cassandra start -cluster single
cassandra-stop: ## stop it
	$(GO) run ./hack/cassandra stop -cluster single
