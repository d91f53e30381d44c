#!/usr/bin/env bash
# Checks the import graph of ARCHITECTURE.md §3: dependencies point inward.
# ledger imports only the standard library; every other package may import
# only the project packages listed for it (third-party modules are free);
# only cmd/reconciler wires adapters together.
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

# ledger: the standard library only.
for d in $(go list -deps -f '{{if not .Standard}}{{.ImportPath}}{{end}}' ./ledger); do
	if [[ $d != "$mod/ledger" ]]; then
		echo "importcheck: ledger must import only the standard library, found $d" >&2
		fail=1
	fi
done
# paging: the standard library only.
if [[ -d paging ]]; then
	for d in $(go list -deps -f '{{if not .Standard}}{{.ImportPath}}{{end}}' ./paging); do
		[[ $d == "$mod/paging" ]] || { echo "importcheck: paging must import only the standard library, found $d" >&2; fail=1; }
	done
fi

internal ledger/bolt ledger
internal ledger/postgres ledger
internal ledger/memstore ledger
internal ledger/storetest ledger
internal matcher ledger
internal webhooks ledger matcher internal/promreg
internal resolver ledger paging internal/promreg
internal events ledger internal/promreg
internal api ledger matcher resolver internal/promreg
internal freeze ledger
internal client ledger events internal/promreg
internal internal/httpload api events ledger ledger/bolt internal/promreg webhooks matcher fixtures
exit $fail
