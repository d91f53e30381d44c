#!/usr/bin/env bash
# Checks the import graph of docs/architecture.md §3: dependencies point inward.
# ledger imports only the standard library; every other package may import
# only the project packages listed for it (third-party modules are free,
# except the service's own, which the client SDK must not drag into an
# agent runtime); only cmd/reconciler wires adapters together.
set -euo pipefail
mod=$(go list -m)
fail=0

# internal PKG ALLOWED...: PKG's project dependencies must be among ALLOWED.
internal() {
	local pkg=$1; shift
	[[ -d $pkg ]] && ls "$pkg"/*.go >/dev/null 2>&1 || return 0
	local d
	for d in $(go list -deps -f '{{if not .Standard}}{{.ImportPath}}{{end}}' "./$pkg"); do
		[[ $d == "$mod/$pkg" ]] && continue
		[[ $d == "$mod"/* ]] || continue
		local ok=0 a
		for a in "$@"; do [[ $d == "$mod/$a" ]] && ok=1; done
		if [[ $ok == 0 ]]; then
			echo "importcheck: $pkg must not import $d" >&2
			fail=1
		fi
	done
}

# only PKG PATTERN...: every non-standard dependency of PKG must match a
# pattern (none: the standard library only).
only() {
	local pkg=$1; shift
	[[ -d $pkg ]] && ls "$pkg"/*.go >/dev/null 2>&1 || return 0
	local d
	for d in $(go list -deps -f '{{if not .Standard}}{{.ImportPath}}{{end}}' "./$pkg"); do
		[[ $d == "$mod/$pkg" ]] && continue
		local ok=0 p
		for p in "$@"; do [[ $d == $p ]] && ok=1; done
		if [[ $ok == 0 ]]; then
			echo "importcheck: $pkg must not import $d" >&2
			fail=1
		fi
	done
}

# never PKG PATTERN...: no dependency of PKG, direct or transitive, may
# match a pattern.
never() {
	local pkg=$1; shift
	[[ -d $pkg ]] && ls "$pkg"/*.go >/dev/null 2>&1 || return 0
	local d p
	for d in $(go list -deps -f '{{if not .Standard}}{{.ImportPath}}{{end}}' "./$pkg"); do
		for p in "$@"; do
			if [[ $d == $p ]]; then
				echo "importcheck: $pkg must not depend on $d" >&2
				fail=1
			fi
		done
	done
}

# The service's heavy modules: an agent runtime that links the client SDK
# (and events, for Await) must not link any of them.
service_only=("github.com/nats-io/nats-server*" "github.com/prometheus/*" "github.com/labstack/echo*" "github.com/jackc/pgx*" "go.etcd.io/bbolt*")
never client "${service_only[@]}"
never events "${service_only[@]}"
# The MCP gate runs next to an agent's MCP client: the SDK and the ledger's
# client, none of the service.
never mcpgate "${service_only[@]}"
# Tracing in an agent runtime is the OpenTelemetry API only: the SDK, the
# exporters and the contrib instrumentation (gRPC and protobuf with them)
# are the service's.
otel_service=("go.opentelemetry.io/otel/sdk*" "go.opentelemetry.io/otel/exporters*" "go.opentelemetry.io/contrib*" "go.opentelemetry.io/proto*" "google.golang.org/grpc*")
never client "${otel_service[@]}"
never events "${otel_service[@]}"
never internal/tracing "${otel_service[@]}"

only ledger                       # the standard library only
only paging                       # the standard library only
only fixtures                     # the standard library only
only apierror                     # the standard library only: the client imports it
only scripts/vulncheck "gopkg.in/yaml.v3*"
only internal/paypaloauth "golang.org/x/sync*"
only ledger/bolt "$mod/ledger" "go.etcd.io/bbolt*" "golang.org/x/sys*" "github.com/go-json-experiment/json*" "github.com/tidwall/btree*"

internal ledger/bolt ledger
internal ledger/postgres ledger
internal ledger/memstore ledger
internal ledger/storetest ledger
internal matcher ledger
internal webhooks ledger matcher apierror internal/httpbody internal/promreg internal/paypaloauth internal/tracing
internal resolver ledger vendors vendors/presets internal/yamlnode paging internal/promreg internal/paypaloauth internal/tracing internal/durable
internal events ledger internal/tracing
internal events/natsserver        # nats-server only: no project package
internal events/eventsprom internal/promreg
internal internal/durable ledger
internal internal/pollcache ledger
internal api ledger matcher resolver vendors vendors/presets internal/yamlnode apierror internal/httpbody internal/promreg internal/tracing
internal freeze ledger internal/pollcache
internal retention ledger internal/promreg
internal policy ledger
internal approvals ledger paging internal/tracing internal/durable
internal console ledger
internal internal/tracing ledger
internal registry ledger policy internal/pollcache
internal client ledger events apierror internal/tracing
internal mcpgate client ledger events apierror internal/tracing
internal drill client api apierror internal/httpbody events events/natsserver ledger ledger/bolt webhooks matcher resolver vendors vendors/presets internal/yamlnode paging registry policy fixtures internal/promreg internal/paypaloauth internal/tracing internal/durable internal/pollcache
# The load program (cmd/httpload: flags and the load code).
internal cmd/httpload api apierror internal/httpbody vendors vendors/presets internal/yamlnode events events/natsserver ledger ledger/bolt ledger/postgres internal/promreg webhooks matcher fixtures internal/paypaloauth internal/tracing
# serve's configuration: validators and types, never a store, api or webhooks.
internal cmd/reconciler/internal/config ledger matcher events resolver vendors vendors/presets paging internal/promreg internal/paypaloauth internal/tracing internal/durable internal/yamlnode
# Vendor profiles: the ledger's key rules, the shipped presets, the strict YAML walk.
internal vendors ledger vendors/presets internal/yamlnode
internal vendors/presets
# The strict YAML reading that the config file, the tools command and the
# vendor profiles share.
internal internal/yamlnode
# Reading a request body whole (the claim API and webhook ingest).
internal internal/httpbody

# The test helpers serve _test.go files only: no package's build (go list
# Deps leaves tests out) may pull one in, the helpers themselves aside.
testonly="$mod/internal/fakemailgun $mod/internal/testkit $mod/internal/fakestripe $mod/internal/pgtest $mod/internal/mcptest $mod/internal/natstest $mod/cmd/reconciler/internal/configtest $mod/internal/oteltest"
while read -r pkg deps; do
	[[ " $testonly " == *" $pkg "* ]] && continue
	for d in $deps; do
		if [[ " $testonly " == *" $d "* ]]; then
			echo "importcheck: $pkg must not import $d (test-only)" >&2
			fail=1
		fi
	done
done < <(go list -f '{{.ImportPath}} {{join .Deps " "}}' ./...)
exit $fail
