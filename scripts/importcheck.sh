#!/usr/bin/env bash
# Checks the import graph of ARCHITECTURE.md §3: dependencies point inward.
set -euo pipefail
mod=$(go list -m)
fail=0
# allowed PKG PATTERN...: every non-stdlib dependency of PKG must match one pattern.
allowed() {
	local pkg=$1; shift
	local deps
	deps=$(go list -deps -f '{{if not .Standard}}{{.ImportPath}}{{end}}' "$mod/$pkg" 2>/dev/null | grep -v "^$mod/$pkg\$" || true)
	for d in $deps; do
		local ok=0
		for p in "$@"; do
			[[ $d == $p ]] && ok=1
		done
		if [[ $ok == 0 ]]; then
			echo "importcheck: $pkg must not depend on $d" >&2
			fail=1
		fi
	done
}
exists() { [[ -d $1 ]] && ls "$1"/*.go >/dev/null 2>&1; }
exists ledger && allowed ledger
exists ledger/bolt && allowed ledger/bolt "$mod/ledger" "go.etcd.io/bbolt*" "golang.org/x/sys*"
exists paging && allowed paging
exists matcher && allowed matcher "$mod/ledger"
exists ledger/storetest && allowed ledger/storetest "$mod/ledger" "$mod/ledger/memstore" "github.com/anishathalye/porcupine*"
exit $fail
