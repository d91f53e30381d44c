# reconciler — see README.md. Two commands set everything up: `make run`, `make test`.
GO        ?= go
# The toolchain every build, test and image uses (go.mod says the same): the
# machine's own Go may be older, and GOTOOLCHAIN=local would then refuse go.mod.
export GOTOOLCHAIN := go1.27.3
FUZZTIME  ?= 20s
BENCHTIME ?= 2s
PKGS      := ./...
PYTHON    ?= python3

.PHONY: run test test-python lint vet fmt importcheck staticcheck tidy vuln bench bench-http fuzz build docker clean

run: ## a working single node: bbolt and NATS embedded in ./data, HTTP on 127.0.0.1:8080
	$(GO) run ./cmd/reconciler serve

# -race needs cgo, which Go turns off where no C compiler is found: there
# the tests run without the race detector, and say so.
RACE := $(if $(filter 1,$(shell $(GO) env CGO_ENABLED)),-race,)

test: ## every test, with the race detector (when cgo is available), shuffled; fuzz seed corpora run too
	@if [ -z "$(RACE)" ]; then echo "make test: cgo is off (no C compiler?): running without -race; install gcc for the race detector" >&2; fi
	$(GO) test $(RACE) -count=1 -shuffle=on -timeout 20m $(PKGS)
	@$(MAKE) --no-print-directory test-python

test-python: ## the Python client's tests (clients/python) against a freshly built binary
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	$(GO) build -o "$$tmp/reconciler" ./cmd/reconciler && \
	RECONCILER_BIN="$$tmp/reconciler" $(PYTHON) -m unittest discover -s clients/python/tests -t clients/python

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
