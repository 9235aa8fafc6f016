# baton — make targets. `make test` is what CI runs (.ci/run).
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO        ?= go
OUT       := _out
PKGS      := ./...
TESTFLAGS ?=
# Fuzz budgets are execution counts per target (about 5-8 s each here): a duration budget races
# Go's fuzzing coordinator at its deadline and fails now and then with a bare "context deadline
# exceeded" and no failing input (golang/go#75804). FUZZTIME=30s (or 2000000x) overrides them all.
FUZZTIME  ?=
# The release and commit every binary states for --version, set with -X in internal/version
# (make build VERSION=v1.2.3 COMMIT=$(git rev-parse HEAD); make release sets both). Left empty,
# the binaries state what the go command stamped: a pseudo-version and the commit in a git
# checkout, "devel commit unknown" without one. Exported: the BUILD line reads them from its shell,
# as the Dockerfile's RUN line reads its build arguments VERSION and COMMIT.
VERSION   ?=
COMMIT    ?=
export VERSION COMMIT
# The one build command; the Dockerfile runs exactly this line (make check verifies it). $$ is
# make's escape for the shell's $.
BUILD     := CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X github.com/baton-dev/baton/internal/version.release=$${VERSION} -X github.com/baton-dev/baton/internal/version.commit=$${COMMIT}" -o bin/ ./cmd/...

.PHONY: help
help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

.PHONY: demo
demo: ## a real node (root), Cassandra, the chart installed with helm, 3 pods behind a Service: answers follow the lock as it changes hands 3 ways (DEMOFLAGS=-node-agent: without a kubelet)
	$(GO) run ./hack/demo $(DEMOFLAGS)

.PHONY: demo-lock
demo-lock: ## the lock library alone: 5 contenders on one lock against a local Cassandra
	$(GO) run ./hack/demo-lock $(DEMOFLAGS)

# Everything the tests run besides Go, installed into the cache before any test binary starts, so
# that no test's deadline ever includes an install. Each step prints what it installs, whether it
# reused the cache and how long it took. Times measured with an empty cache: see the README.
CACHE_DIR = $${XDG_CACHE_HOME:-$$HOME/.cache}/baton

.PHONY: install-deps
install-deps: ## install what the tests run into ~/.cache/baton: Cassandra (Maven Central), kube-apiserver, kube-controller-manager, etcd, kubectl, helm, and a node's kube-scheduler, kubelet, kube-proxy, containerd, CNI plugins (Go modules), runc, iptables, conntrack (apt-get, as root); a no-op when cached
	@SECONDS=0; \
	  echo "install-deps: Cassandra, kube-apiserver, kube-controller-manager, etcd, kubectl, helm, kube-scheduler, kubelet, kube-proxy, containerd and CNI plugins into $(CACHE_DIR); runc, iptables and conntrack with apt-get if missing (root only)"; \
	  echo "install-deps: compiling hack/cassandra (go run prints nothing while it compiles, under a minute)"; \
	  $(GO) run ./hack/cassandra install; \
	  echo "install-deps: compiling hack/kube (go run prints nothing while it compiles, about 3 minutes with an empty Go build cache)"; \
	  $(GO) run ./hack/kube install >/dev/null; \
	  echo "install-deps: everything installed after $${SECONDS}s"

# Packages tested without the race detector: image building and releasing (gzip and hashing of a 75 MB layer take
# five times as long under -race) and the real node's end-to-end tests, whose code under test runs
# in pods (built without -race, as users run it) and which build the images too; batonnode's
# two-node test is one of those, and runs there after the race phase for the same reason as the
# e2e package (a cluster's processes would starve the timing-sensitive tests running beside it).
# Every package of the lock, the sidecar, the operator and the tools around them runs with -race.
NORACE := /internal/build/imagebuild$$|/internal/build/ociimage$$|/internal/build/release$$|/internal/testing/batonnode$$|/test/e2e$$

# The race phase's longest packages, in the order go test starts them (it runs two test binaries at
# a time on two cores, in the order of the command line): the long ones first, so that the short
# ones fill the end of the phase instead of one long package running alone at its end.
SLOW_FIRST := ./lock/cassandrastore ./test/chaos ./test/sidecar ./internal/operator ./test/bench/compare \
  ./internal/cli ./controllers ./charts ./internal/storepool

.PHONY: test
test: check install-deps ## all tests, race detector on, against real Cassandra nodes and a real kube-apiserver (install-deps first)
	@mkdir -p $(OUT)
	$(GO) test -race -count=1 -timeout 60m -v $(TESTFLAGS) $$({ $(GO) list $(SLOW_FIRST); $(GO) list $(PKGS); } | grep -vE '$(NORACE)' | awk '!seen[$$0]++') 2>&1 | tee $(OUT)/test.log \
	  | grep -E --line-buffered '^(--- |ok |FAIL|panic:|simulation |cassandra |\s+\S+_test\.go:[0-9]+: )' || true
	@# The simulations' full count, without the race detector: under it they run a tenth of their
	@# histories (a history runs about seven times slower there; see defaultHistories).
	$(GO) test -count=1 -timeout 10m -v -run '^(TestSimulation|TestSimulationOnePod)$$' ./lock/ ./sidecar/ 2>&1 | tee -a $(OUT)/test.log \
	  | grep -E --line-buffered '^(--- |ok |FAIL|panic:|simulation |\s+\S+_test\.go:[0-9]+: )' || true
	@# The real node's end-to-end tests run after the others: with three Cassandra nodes and a
	@# node's worth of processes at once, two cores starve the timing-sensitive tests of both.
	@# Their tests without a timing bound (t.Parallel) run four at a time. One package at a time
	@# (-p 1): each starts nodes of its own, and test/e2e checks that the machine's sysctls are
	@# back after its node stopped, which another package's kubelet changes meanwhile.
	$(GO) test -p 1 -count=1 -timeout 30m -parallel 4 -v $(TESTFLAGS) $$($(GO) list $(PKGS) | grep -E '$(NORACE)') 2>&1 | tee -a $(OUT)/test.log \
	  | grep -E --line-buffered '^(--- |ok |FAIL|panic:|cassandra |\s+\S+_test\.go:[0-9]+: )' || true
	@! grep -qE '^(FAIL|panic:|--- FAIL)' $(OUT)/test.log
	@# Each fuzz target's slice of make test. The handler (every exchange checked against the
	@# OpenAPI document) and the hint parser run for a time rather than a count: their rate swings
	@# from 2,000 to 300,000 inputs a second as the fuzz cache grows, and 150,000 hint inputs took
	@# 24-50 s. The handler first replays its cached corpus (400 inputs, about 15 s), hence 30 s.
	@for target in internal/sidecarapi:FuzzHandler:30s lock:FuzzParseOwner:100000x lock:FuzzValidateLockID:100000x lock/hintudp:FuzzParseHint:10s; do \
	  IFS=: read -r pkg fn budget <<< "$$target"; budget=$(or $(FUZZTIME),$$budget); \
	  echo "fuzz $$fn ($$budget)"; \
	  $(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $$budget ./$$pkg/ > $(OUT)/fuzz-$$fn.log 2>&1 || true; \
	  if grep -qE '^(FAIL|panic:|--- FAIL)' $(OUT)/fuzz-$$fn.log; then n=60; else n=3; fi; \
	  tail -n $$n $(OUT)/fuzz-$$fn.log | tee -a $(OUT)/test.log; \
	done
	@! grep -qE '^(FAIL|panic:|--- FAIL)' $(OUT)/test.log
	@echo "full log: $(OUT)/test.log"
	@echo "test: $$(grep -cE '^\s*--- PASS' $(OUT)/test.log) passed, $$(grep -cE '^\s*--- FAIL' $(OUT)/test.log) failed"

.PHONY: test-skew
test-skew: install-deps ## version skew: sidecars of release N-1 (a pinned commit, built from git and cached) and of this tree on one lock, real Cassandra: hand-off and SIGKILL failover both ways (make test runs the hand-off only)
	$(GO) test -race -count=1 -timeout 20m -v ./test/skew/ -skew.full 2>&1 \
	  | grep -E --line-buffered '^(--- |ok |FAIL|panic:|cassandra |\s+\S+_test\.go:[0-9]+: )'

.PHONY: test-short
test-short: ## the quick loop: unit tests, simulations and golden files; skips what needs Cassandra, an API server or built tools (-short)
	$(GO) test -short -count=1 $(PKGS)

# staticcheck, pinned and run through the module proxy like controller-gen, so it stays out of
# go.mod. v0.8 is the release for Go 1.26.
STATICCHECK_VERSION ?= v0.8.2
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

.PHONY: lint
lint: ## staticcheck over every package
	$(STATICCHECK) $(PKGS)

# govulncheck, pinned, installed from the module proxy into the cache (hack/vulncheck runs go
# install once; not go run, which turns govulncheck's exit status 3 into 1), and kept out of
# go.mod. hack/vulncheck first checks that the vulnerability database can be reached: where it
# cannot (this project's CI reaches package registries only), make check prints "vulncheck:
# skipped: ..." and passes, unless VULNCHECK_STRICT=1. GOVULNDB points it at a mirror (https://...
# or file:///...).
GOVULNCHECK_VERSION ?= v1.9.0
GOVULNDB ?= https://vuln.go.dev
VULNCHECK_STRICT ?=

.PHONY: vulncheck
vulncheck: ## govulncheck: fail when code baton calls has a known vulnerability, and say which module to update (skipped with a notice when $GOVULNDB cannot be reached, unless VULNCHECK_STRICT=1)
	@$(GO) run ./hack/vulncheck -db '$(GOVULNDB)' -tool golang.org/x/vuln/cmd/govulncheck@$(GOVULNCHECK_VERSION) \
	  -cache "$(CACHE_DIR)" $(if $(filter 1 true yes,$(VULNCHECK_STRICT)),-strict) $(PKGS)

.PHONY: check
check: check-generated check-boundary lint vulncheck ## gofmt, go vet, staticcheck, govulncheck, generated files up to date, the Dockerfile builds like the Makefile, and no shipped binary depends on test code
	@unformatted=$$(gofmt -l $$({ git ls-files --cached --others --exclude-standard '*.go' 2>/dev/null || find . -name '*.go'; } \
	  | while read -r f; do if [ -e "$$f" ]; then echo "$$f"; fi; done)); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) vet $(PKGS)
	@grep -qF 'RUN $(BUILD)' Dockerfile || { echo "Dockerfile must build with: RUN $(BUILD)"; exit 1; }
	@$(GO) run ./hack/chartdoc -chart $(CHART_DIR) -check
	@$(GO) run ./hack/apidoc -check
	@# No binary, no executable outside a short allow-list, no file over 1 MiB tracked.
	@$(GO) run ./hack/check-tracked

# The line between product and test code: the shipped binaries (cmd/...) must not depend on a
# test rig (internal/testing/...) or a suite (test/...), directly or through another package.
.PHONY: check-boundary
check-boundary: ## fail when a package under cmd/ depends on internal/testing/... or test/...
	@mod=$$($(GO) list -m); \
	  deps=$$($(GO) list -deps -f '{{.ImportPath}}' ./cmd/...) || exit 1; \
	  bad=$$(grep -E "^$$mod/(internal/testing|test)(/|$$)" <<< "$$deps" || true); \
	  if [ -n "$$bad" ]; then \
	    echo "check-boundary: the shipped binaries (./cmd/...) depend on test code:"; \
	    for p in $$bad; do \
	      echo "  $$p, imported by: $$($(GO) list -deps -f '{{.ImportPath}} {{join .Imports " "}}' ./cmd/... \
	        | awk -v p="$$p" '{for (i = 2; i <= NF; i++) if ($$i == p) printf "%s ", $$1}')"; \
	    done; \
	    echo "check-boundary: move what cmd/ needs out of internal/testing and test/ (see internal/testing/doc.go)"; \
	    exit 1; \
	  fi

# controller-gen, pinned and run through the module proxy so it stays out of go.mod. v0.22/v0.23
# are the releases built on k8s.io v0.37 (controller-runtime v0.25). `go run pkg@version` caches
# the binary, so after the first run it starts in about a second.
CONTROLLER_TOOLS_VERSION ?= v0.23.0
CONTROLLER_GEN ?= $(GO) run sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)
# API packages (one per group version) and where their CRDs go.
API_DIRS := $(patsubst %/,%,$(sort $(dir $(wildcard api/*/*_types.go))))
CRD_DIR  := config/crd/bases
# Operator RBAC comes from the +kubebuilder:rbac markers of these packages.
RBAC_DIR   := config/rbac
RBAC_PATHS := paths=./controllers/... paths=./internal/operator/...
# The Helm chart ships copies of config/: the CRDs in crds/, the operator's ClusterRole (its rules
# become the chart's) in files/operator-role.yaml, the sidecars' ClusterRoles in
# files/sidecar-clusterroles.yaml and the admission policies in files/policy/. Nothing else lives
# in those two directories. A source that does not exist (yet) is left out.
CHART_DIR  := charts/baton
POLICY_DIR := config/policy
POLICIES    = $(filter-out %/kustomization.yaml,$(wildcard $(POLICY_DIR)/*.yaml))
define chart-copies
rm -rf $(1)/crds $(1)/files; mkdir -p $(1)/crds $(1)/files; \
  cp $(CRD_DIR)/*.yaml $(1)/crds/; \
  if [ -f $(RBAC_DIR)/role.yaml ]; then cp $(RBAC_DIR)/role.yaml $(1)/files/operator-role.yaml; fi; \
  cp config/sidecar/clusterroles.yaml $(1)/files/sidecar-clusterroles.yaml; \
  $(if $(POLICIES),mkdir -p $(1)/files/policy; cp $(POLICIES) $(1)/files/policy/)
endef

.PHONY: generate
generate: ## regenerate zz_generated.deepcopy.go in api/ from the Go types
	$(CONTROLLER_GEN) object:headerFile="" paths=./api/...

.PHONY: manifests
manifests: ## regenerate the CRDs (config/crd/bases) and the operator's ClusterRole (config/rbac) from kubebuilder markers, and their copies in the chart
	$(CONTROLLER_GEN) crd output:crd:artifacts:config=$(CRD_DIR) paths=./api/...
	$(CONTROLLER_GEN) rbac:roleName=baton-operator output:rbac:artifacts:config=$(RBAC_DIR) $(RBAC_PATHS)
	@$(call chart-copies,$(CHART_DIR))

.PHONY: api-docs
api-docs: ## regenerate docs/api/sidecar.md from the sidecar API's OpenAPI document docs/api/sidecar.openapi.yaml (make check fails when it is stale)
	$(GO) run ./hack/apidoc

.PHONY: check-generated
check-generated: ## fail when zz_generated.deepcopy.go, the CRDs or the RBAC differ from what the markers generate, or the chart's copies from config/
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; stale=; \
	  for d in $(API_DIRS); do \
	    $(CONTROLLER_GEN) object:headerFile="" crd output:object:dir="$$tmp/obj/$$d" \
	      output:crd:dir="$$tmp/crd" paths=./$$d; \
	    diff -u "$$d/zz_generated.deepcopy.go" "$$tmp/obj/$$d/zz_generated.deepcopy.go" || stale=1; \
	  done; \
	  diff -ru $(CRD_DIR) "$$tmp/crd" || stale=1; \
	  $(CONTROLLER_GEN) rbac:roleName=baton-operator output:rbac:dir="$$tmp/rbac" $(RBAC_PATHS); \
	  diff -ru $(RBAC_DIR) "$$tmp/rbac" || stale=1; \
	  $(call chart-copies,$$tmp/chart); \
	  for d in crds files; do diff -ruN $(CHART_DIR)/$$d "$$tmp/chart/$$d" || stale=1; done; \
	  if [ -n "$$stale" ]; then echo "generated files are stale: run make generate manifests"; exit 1; fi

.PHONY: chart-docs
chart-docs: ## regenerate the values table of charts/baton/README.md from values.yaml and values.schema.json (make check fails when it is stale)
	$(GO) run ./hack/chartdoc -chart $(CHART_DIR)

.PHONY: soak
# Without the race detector: make test runs the simulations with it; the soak is about the number
# of histories, and runs ten times as many in the same time without it.
soak: ## 1,000 simulated histories per fault class of the lock, and 1,000 of the one-pod class of the sidecar's API (17 min on two cores)
	$(GO) test -count=1 -timeout 3h -v ./lock/ -run 'TestSimulation' -sim.histories=1000 2>&1 \
	  | grep -E '^(simulation |--- FAIL|FAIL|ok|panic:|\s+\S+_test\.go)'
	$(GO) test -count=1 -timeout 1h -v ./sidecar/ -run 'TestSimulationOnePod' -onepod.histories=1000 2>&1 \
	  | grep -E '^(simulation |--- FAIL|FAIL|ok|panic:|\s+\S+_test\.go)'

.PHONY: chaos
chaos: install-deps ## chaos on a three-node Cassandra: sidecars and baton run processes, fenced writes, every fault class under each workload (CHAOSFLAGS; default 3 runs of 20 s each, about 73 min; as root); make test runs one short mixed run per workload
	@mkdir -p $(OUT)
	$(GO) test -race -count=1 -timeout 3h -v ./test/chaos/ -run '^TestChaos$$' \
	  -chaos.classes=$(CHAOS_CLASSES) -chaos.workloads=hold,cycle,run -chaos.runs=3 -chaos.duration=20s $(CHAOSFLAGS) 2>&1 | tee $(OUT)/chaos.log \
	  | grep -E --line-buffered '^(\s*--- |ok|FAIL|panic:|\s+\S+_test\.go:[0-9]+: |\s+\|)'
	@! grep -qE '^(FAIL|panic:|\s*--- FAIL)' $(OUT)/chaos.log

CHAOS_CLASSES = none,kill,pause,clock,partition,revoke,storm,malformed,node-kill,node-pause,quorum-loss,restart-hang,mixed

.PHONY: bench
bench: install-deps ## benchmarks: acquire vs one LWT and handoff, webhook admission, and BRIEF §7 side by side (old algorithm, plain LWT, baton in process, baton sidecar processes with UDP hints, client-go; the comparison alone about 10 min)
	$(GO) test -run '^$$' -bench . -benchtime 200x -timeout 30m ./lock/cassandrastore/
	$(GO) test -run '^$$' -bench . -benchtime 2000x -timeout 10m ./internal/webhook/
	$(MAKE) bench-rollout
	$(MAKE) bench-compare

.PHONY: bench-rollout
bench-rollout: install-deps ## lock moves and leaderless time per rollout on the real node, handoff QueueOrder against NewestRevision (5 rollouts each, about 3 min; as root; ROLLOUTFLAGS='-handoff.rollouts=50 -handoff.baseline=false' for 50 NewestRevision rollouts, about 15 min)
	$(GO) test -run '^TestHandoffToNewestRevision$$' -count=1 -v -timeout 2h ./test/e2e/ -handoff.rollouts=5 -handoff.baseline $(ROLLOUTFLAGS)

.PHONY: bench-compare
bench-compare: install-deps ## the side-by-side comparison alone (about 11 min): tables, raw results and charts into docs/bench/ (compare.md, compare.json, *.png)
	@mkdir -p docs/bench
	$(GO) test -run '^TestSideBySide$$' -count=1 -v -timeout 40m ./test/bench/compare/ -compare.run \
	  -compare.out $(CURDIR)/docs/bench/compare.md -compare.json $(CURDIR)/docs/bench/compare.json $(COMPAREFLAGS)
	$(GO) run ./hack/benchplots -in docs/bench/compare.json -out docs/bench

.PHONY: bench-scale
bench-scale: install-deps ## many locks at rest: N = 10, 100, 1,000 locks of 3 on a three-node Cassandra (baton, UDP hints, the operator reconciling a DistributedLock per lock) and on Leases (client-go, the API server); store and API load per lock, server CPU, hand-offs, failovers, the operator's CPU, memory, API writes and store reads, connections per node, the budgets of issue 26, a projection to 10,000 locks; docs/bench/scale.md, scale.json and scale-*.png (SCALEFLAGS)
	@mkdir -p docs/bench
	set -o pipefail; $(GO) test -run '^TestScale$$' -count=1 -v -timeout 3h ./test/bench/compare/ -scale.run \
	  -scale.out $(CURDIR)/docs/bench/scale.md -scale.json $(CURDIR)/docs/bench/scale.json $(SCALEFLAGS) 2>&1 \
	  | grep -E --line-buffered '^(--- |ok|FAIL|panic:|cassandra |\s+\S+_test\.go:[0-9]+: )'
	$(GO) run ./hack/benchplots -scale docs/bench/scale.json -out docs/bench

.PHONY: build
build: ## build the binaries (sidecar, operator, baton) into bin/, as the Dockerfile does
	$(BUILD)

# The images without Docker: hack/image assembles them from static binaries (package imagebuild),
# nothing pulled. The baton image mirrors the Dockerfile's final stage (a test keeps them in step).
.PHONY: image
image: ## build the baton, pause and demoapp images (baton.local/*:dev) into _out/images.tar without Docker, and their CycloneDX SBOMs into _out/sbom/; import with ctr -n k8s.io images import, docker load or kind load image-archive
	$(BUILD)
	$(GO) run ./hack/image -out $(OUT) -baton-bin bin

# A release, built here (no public registry exists yet): hack/release and package
# internal/build/release; docs/supply-chain.md says how to push and install it.
ALLOW_DIRTY ?=

.PHONY: release
release: ## write release VERSION=vX.Y.Z into _out/release/VERSION/: the baton image as an OCI archive (ctr import, docker load, kind load image-archive, crane push), the chart packaged (helm push), the image's SBOM and SHA256SUMS; refuses uncommitted changes unless ALLOW_DIRTY=1
	@if [ -z "$(VERSION)" ]; then echo "make release: set VERSION=vX.Y.Z, a semantic version with a leading v (e.g. make release VERSION=v0.1.0)"; exit 2; fi
	@echo "release: compiling hack/release (go run prints nothing while it compiles)"
	$(GO) run ./hack/release -version '$(VERSION)' -out $(OUT)/release $(if $(filter 1 true yes,$(ALLOW_DIRTY)),-allow-dirty)

.PHONY: cassandra-start cassandra-stop
cassandra-start: ## start a local single-node Cassandra on 127.0.0.1:9042 (left running)
	$(GO) run ./hack/cassandra start -cluster single
cassandra-stop: ## stop it
	$(GO) run ./hack/cassandra stop -cluster single
