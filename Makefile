# reconciler — see README.md. Two commands set everything up: `make run`, `make test`.
GO        ?= go
# The toolchain every build, test and image uses (go.mod's toolchain line
# says the same): a machine whose Go is older, or set to GOTOOLCHAIN=local,
# would otherwise build with its own, and go1.26.8 has reachable vulnerabilities.
export GOTOOLCHAIN := go1.27.3
FUZZTIME  ?= 20s
BENCHTIME ?= 2s
PKGS      := ./...
PYTHON    ?= python3

.PHONY: run test test-bbolt-patch test-faults test-clients test-python test-typescript lint vet fmt importcheck staticcheck tidy vuln bench bench-http bench-events fuzz build docker clean

run: ## a working single node: bbolt and NATS embedded in ./data, HTTP on 127.0.0.1:8080
	$(GO) run ./cmd/reconciler serve

# -race needs cgo, which Go turns off where no C compiler is found: there
# the tests run without the race detector, and say so.
RACE := $(if $(filter 1,$(shell $(GO) env CGO_ENABLED)),-race,)

test: ## every test, with the race detector (when cgo is available), shuffled; fuzz seed corpora run too
	@if [ -z "$(RACE)" ]; then echo "make test: cgo is off (no C compiler?): running without -race; install gcc for the race detector" >&2; fi
	$(GO) test $(RACE) -count=1 -shuffle=on -timeout 20m $(PKGS)
	@$(MAKE) --no-print-directory test-bbolt-patch
	@$(MAKE) --no-print-directory test-clients

# third_party/bbolt is a module of its own, which ./... leaves out: its
# freelist's tests (both freelist types), the local patch's among them.
test-bbolt-patch: ## the patched bbolt's freelist tests (third_party/bbolt/PATCHES.md)
	cd third_party/bbolt && $(GO) test -count=1 ./internal/freelist/ && TEST_FREELIST_TYPE=hashmap $(GO) test -count=1 ./internal/freelist/

# The fault tests (e2e/replicas: a replica SIGKILLed, mid-run and while its
# resolver holds leased rows; the database stopped under load; a NATS node,
# then a quorum, lost) alone. make test runs them too; they take about three
# minutes of a busy 2-core machine, most of it waiting out leases and
# elections. Without RECONCILER_TEST_POSTGRES_URL only the NATS test's
# bbolt case runs.
FAULTS := ^Test(ThreeReplicasKillOne|ReplicaKilledMidResolveTakenOver|DatabaseRestartUnderLoad|NATSNodeLost)$$
test-faults: ## the fault tests alone (also part of make test): replica SIGKILL, database restart, NATS node and quorum loss; under 5 minutes
	$(GO) test $(RACE) -count=1 -timeout 10m -run '$(FAULTS)' -v ./e2e/replicas/

# The clients' tests run against the real binary, built once for both here;
# either target alone builds its own unless RECONCILER_BIN names one.
test-clients: ## the Python and TypeScript clients' tests against one freshly built binary
	@set -e; dir=$$(mktemp -d); trap 'rm -rf "$$dir"' EXIT; \
	$(GO) build -o "$$dir/reconciler" ./cmd/reconciler; \
	$(MAKE) --no-print-directory test-python test-typescript RECONCILER_BIN="$$dir/reconciler"

BUILD_TEST_BIN = bin="$(RECONCILER_BIN)"; if [ -z "$$bin" ]; then dir=$$(mktemp -d); trap 'rm -rf "$$dir"' EXIT; \
	bin="$$dir/reconciler"; $(GO) build -o "$$bin" ./cmd/reconciler; fi

# Each client's target ends with the duplicate-delivery drills driven by that
# client (reconciler drill --runtime), so CI runs them for every runtime.
test-python: ## the Python client's tests (clients/python, python3 -m unittest), then the drills with the Python runtime
	@set -e; $(BUILD_TEST_BIN); \
	RECONCILER_BIN="$$bin" $(PYTHON) -m unittest discover -s clients/python/tests -t clients/python; \
	"$$bin" drill --runtime python --clients clients

# npm ci installs the TypeScript client's pinned dev dependencies from the
# registry; npm test builds dist/, which the drills' runner loads.
test-typescript: ## the TypeScript client's tests (clients/typescript, Node >= 18 and npm), then the drills with the TypeScript runtime
	@command -v npm >/dev/null || { echo "make test-typescript: needs Node.js >= 18 and npm" >&2; exit 1; }
	@set -e; $(BUILD_TEST_BIN); \
	(cd clients/typescript && npm ci --no-audit --no-fund && RECONCILER_BIN="$$bin" npm test); \
	"$$bin" drill --runtime typescript --clients clients

lint: vet fmt importcheck staticcheck tidy

vet:
	$(GO) vet $(PKGS)

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt -l:"; echo "$$out"; exit 1; fi

staticcheck: ## staticcheck's default checks (a tool directive in go.mod: nothing to install)
	$(GO) tool staticcheck $(PKGS)

tidy: ## go.mod and go.sum say exactly what the code imports
	$(GO) mod tidy -diff

importcheck: ## ledger imports only the standard library; adapters never import each other
	./scripts/importcheck.sh

vuln: ## govulncheck against a database built offline from a pinned golang.org/x/vulndb (cached per version); fails on a called vulnerability .govulncheck-allow.yaml does not accept
	GO="$(GO)" ./scripts/vuln.sh

bench: ## the figures of BENCHMARKS.md
	./scripts/bench.sh

bench-http: ## HTTP claim API vs a bare echo server, plus relay lag (cmd/httpload); under a minute
	./scripts/bench-http.sh

bench-events: ## durable webhook ingest, relay rate and event lag at peak and half rate, in one run; about 2 minutes
	./scripts/bench-http.sh -mode webhook -webhook-rows 200000

fuzz: ## each fuzz target for FUZZTIME
	@set -e; for pkg in $$($(GO) list $(PKGS)); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; done

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o bin/reconciler ./cmd/reconciler

docker:
	docker build -t reconciler:dev .

clean:
	rm -rf bin
