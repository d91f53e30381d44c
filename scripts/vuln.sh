#!/usr/bin/env bash
# vuln: govulncheck (the `tool` in go.mod) against a vulnerability database
# built here from a pinned golang.org/x/vulndb, never from vuln.go.dev: the
# module proxy serves vulndb like any module and its zip holds data/osv, the
# OSV files cmd/indexdb turns into the database `-db file://` reads. So the
# result changes only when this pin, go.mod or the toolchain does.
#
# The database is built once per pin into the user's cache, outside the
# repository (VULNDB_CACHE overrides; `make clean` keeps it). indexdb runs
# with `go run …@version`, not as a go.mod tool: vulndb's own requirements
# (Cloud APIs, gRPC, go-git) would otherwise join the service's module graph
# and raise versions the binary links.
#
# Every vulnerability our code calls must be in .govulncheck-allow.yaml,
# reviewed and not past its review-by date (scripts/vulncheck).
set -euo pipefail
cd "$(dirname "$0")/.."
GO="${GO:-go}"
tmp="" out=""
trap 'rm -rf "$tmp" "$out"' EXIT

# To move the pin: the new pseudo-version from the module proxy, and its
# h1: hash from `go mod download -json golang.org/x/vulndb@VERSION`.
vulndb=golang.org/x/vulndb
version=v0.0.0-20261105234957-e22db6528018
sum=h1:mfngRv0Yoh0VApsXKEN82CjD99kl7mtparN3bs3JnqI=

cache="${VULNDB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/reconciler-vulndb}"
db="$cache/$version"
if [[ ! -f $db/index/modules.json ]]; then
	info=$("$GO" mod download -json "$vulndb@$version")
	# The checksum database vouches for the download too; the pin does so
	# even where GOSUMDB=off or GONOSUMDB would skip it.
	got=$(sed -n 's/^[[:space:]]*"Sum": "\(.*\)",*$/\1/p' <<<"$info")
	if [[ $got != "$sum" ]]; then
		echo "vuln: $vulndb@$version has hash ${got:-none}, want $sum" >&2
		exit 1
	fi
	dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p' <<<"$info")
	mkdir -p "$cache"
	tmp=$(mktemp -d "$cache/.build-XXXXXX")
	echo "vuln: building the vulnerability database of $vulndb@$version (once per version) in $db" >&2
	"$GO" run "$vulndb/cmd/indexdb@$version" -vulns "$dir/data/osv" -out "$tmp/db"
	# One rename: no run sees half a database, and a run that lost a race
	# to another keeps the other's.
	[[ -e $db ]] || mv "$tmp/db" "$db"
fi

out=$(mktemp)
"$GO" tool govulncheck -db "file://$db" -format json ./... >"$out"
"$GO" run ./scripts/vulncheck -allow .govulncheck-allow.yaml <"$out"
