#!/usr/bin/env bash
# Long fuzzing, outside CI: runs every Fuzz target for FUZZTIME each
# (default 60s). Seeds live in each package's testdata/fuzz/.
set -euo pipefail
cd "$(dirname "$0")/.."
export CGO_ENABLED=0
t=${FUZZTIME:-60s}
for pkg in $(go list ./...); do
	for f in $(go test -list 'Fuzz.*' "$pkg" 2>/dev/null | grep '^Fuzz' || true); do
		echo "== $pkg $f"
		go test -run '^$' -fuzz "^$f\$" -fuzztime "$t" "$pkg"
	done
done
