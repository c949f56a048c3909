#!/usr/bin/env bash
# Runs the OCI runtime-tools validation suite against an OCI runtime and
# prints a TAP summary, one line per validation program.
#
#   scripts/oci-validate.sh [--engine-defaults] RUNTIME [PROGRAM...]
#
# RUNTIME is a path or a name on PATH that accepts the runc command line
# (runc, /usr/local/bin/cordon-oci). PROGRAM names validation programs
# (default, create, state, ...); without any, every program of the suite
# runs. Must run as root, like the suite itself.
#
# --engine-defaults runs RUNTIME behind scripts/oci-engine-defaults.sh,
# which gives a bundle without linux.maskedPaths / linux.readonlyPaths the
# lists Docker and containerd send by default. The suite's generator sends
# none, which an engine does only for --privileged: cordon refuses such a
# bundle (docs/oci.md), so without the wrapper every program that creates
# a container stops at that refusal.
#
# The suite is built from the Go module proxy only, at the pinned version
# below (never from a checkout), into $OCI_VALIDATE_DIR (default
# /var/tmp/cordon-oci-validate/VERSION), reused while it is complete. Each
# program runs in a work directory holding runtimetest and the suite's own
# busybox rootfs (rootfs-amd64.tar.gz from the module zip), as their
# Makefile's localvalidation target runs them; its TAP output and stderr
# are kept under $OCI_VALIDATE_DIR/results/RUNTIME-NAME/.
#
# Test 1 checks RUNTIME's `features` output against the runtime-spec's
# features-schema.json (the schema of features.md), with a small checker
# built beside the suite. Then, a program passes when it exits 0 with a plan, at least one "ok" and no
# "not ok"; it is a skip when every test it ran skipped; a negative
# program (*_fail) passes when it exits 0 having printed nothing (the
# runtime refused the bundle, as required). Anything else fails. The
# exit status is 1 when any program failed, 2 when the suite could not be
# built.
set -euo pipefail

RT_VERSION=v0.9.1-0.20260316125833-8a4db579f5c8 # runtime-tools main, 2026-03-16
PER_PROGRAM_TIMEOUT=${OCI_VALIDATE_TIMEOUT:-120}

engine_defaults=
if [ "${1:-}" = --engine-defaults ]; then
	engine_defaults=1
	shift
fi
[ $# -ge 1 ] || { echo "usage: $0 [--engine-defaults] RUNTIME [PROGRAM...]" >&2; exit 2; }
runtime=$1
shift
rtpath=$(command -v "$runtime") || { echo "runtime $runtime not found" >&2; exit 2; }
label=$(basename "$rtpath")
if [ -n "$engine_defaults" ]; then
	command -v jq >/dev/null || { echo "--engine-defaults needs jq" >&2; exit 2; }
	export OCI_ENGINE_DEFAULTS_RUNTIME=$rtpath
	rtpath=$(cd "$(dirname "$0")" && pwd)/oci-engine-defaults.sh
	label=$label-engine-defaults
fi
[ "$(id -u)" = 0 ] || { echo "the validation suite must run as root" >&2; exit 2; }

export PATH="/usr/local/go/bin:$PATH" CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=mod"
export GOPROXY=https://proxy.golang.org
dir=${OCI_VALIDATE_DIR:-/var/tmp/cordon-oci-validate/$RT_VERSION}
mkdir -p "$dir/mod" "$dir/bin" "$dir/work"
# Programs built from another pin are not reused.
if [ "$(cat "$dir/bin/.version" 2>/dev/null)" != "$RT_VERSION" ]; then
	rm -f "$dir"/bin/*
	echo "$RT_VERSION" >"$dir/bin/.version"
fi

build() {
	cd "$dir/mod" || return 1
	# The module is rewritten on every run (go mod tidy is quick once the
	# module cache holds it), so a changed pin or checker takes effect.
	{
		cat >go.mod <<EOF
module cordonocivalidate

go 1.21

require github.com/opencontainers/runtime-tools $RT_VERSION
EOF
		cat >tools.go <<'EOF'
//go:build tools

package cordonocivalidate

import (
	_ "github.com/opencontainers/runtime-tools/cmd/runtimetest"
	_ "github.com/opencontainers/runtime-tools/validation/util"
)
EOF
		mkdir -p featurescheck
		cat >featurescheck/main.go <<'EOF'
// Command featurescheck validates a runtime's `features` output (stdin)
// against the runtime-spec's features-schema.json (argument: the schema
// directory of the runtime-spec module the suite uses).
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/xeipuuv/gojsonschema"
)

func main() {
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Println(err)
		os.Exit(2)
	}
	schema := gojsonschema.NewReferenceLoader("file://" + filepath.Join(os.Args[1], "features-schema.json"))
	res, err := gojsonschema.Validate(schema, gojsonschema.NewBytesLoader(in))
	if err != nil {
		fmt.Println(err)
		os.Exit(2)
	}
	for _, e := range res.Errors() {
		fmt.Println(e)
	}
	if !res.Valid() {
		os.Exit(1)
	}
}
EOF
		go mod tidy >/dev/null
	} || { rm -f go.sum; return 1; }
	local src
	src=$(go list -m -f '{{.Dir}}' github.com/opencontainers/runtime-tools) || return 1
	[ -x "$dir/bin/runtimetest" ] ||
		go build -tags 'netgo osusergo' -o "$dir/bin/runtimetest" github.com/opencontainers/runtime-tools/cmd/runtimetest || return 1
	local all=() missing=() p
	for p in "$src"/validation/*/; do
		p=$(basename "$p")
		[ "$p" = util ] && continue
		all+=("$p")
	done
	# Only the programs asked for (every one without a list).
	[ $# -gt 0 ] || set -- "${all[@]}"
	for p in "$@"; do
		[ -d "$src/validation/$p" ] && [ "$p" != util ] || { echo "no validation program $p" >&2; return 1; }
		[ -x "$dir/bin/$p.t" ] || missing+=("github.com/opencontainers/runtime-tools/validation/$p")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		# One go build per program (each is its own main), two at a time.
		printf '%s\n' "${missing[@]}" | xargs -P 2 -I{} sh -c 'go build -o "$0/bin/$(basename {}).t" {}' "$dir" || return 1
	fi
	go build -o "$dir/bin/featurescheck" ./featurescheck || return 1
	go list -m -f '{{.Dir}}' github.com/opencontainers/runtime-spec >"$dir/runtime-spec" || return 1
	printf '%s\n' "${all[@]}" >"$dir/programs"
	install -m 0755 "$dir/bin/runtimetest" "$dir/work/runtimetest" || return 1
	install -m 0644 "$src/rootfs-amd64.tar.gz" "$dir/work/rootfs-amd64.tar.gz"
}
# (set -e does not hold inside a function run left of ||: each step returns.)
(build "$@") || { echo "building runtime-tools $RT_VERSION failed" >&2; exit 2; }

if [ $# -gt 0 ]; then
	programs=("$@")
else
	mapfile -t programs <"$dir/programs"
fi
out="$dir/results/$label"
rm -rf "$out"
mkdir -p "$out"

echo "# runtime-tools $RT_VERSION against $rtpath${OCI_ENGINE_DEFAULTS_RUNTIME:+ ($OCI_ENGINE_DEFAULTS_RUNTIME)}"
echo "1..$((${#programs[@]} + 1))"
n=1 failed=0
# Test 1: `features` against the runtime-spec's features schema.
rc=0
"$rtpath" features >"$out/features.json" 2>"$out/features.err" || rc=$?
if [ "$rc" = 0 ] && "$dir/bin/featurescheck" "$(cat "$dir/runtime-spec")/schema" <"$out/features.json" >"$out/features.check" 2>&1; then
	echo "ok 1 - features (valid against $(basename "$(cat "$dir/runtime-spec")") schema/features-schema.json)"
else
	failed=1
	echo "not ok 1 - features (exit $rc)"
	echo "  # $(head -c 240 "$out/features.check" "$out/features.err" 2>/dev/null | tr '\n' ' ')"
fi
for p in "${programs[@]}"; do
	n=$((n + 1))
	rc=0
	(cd "$dir/work" && RUNTIME="$rtpath" timeout -k 10 "$PER_PROGRAM_TIMEOUT" "$dir/bin/$p.t" >"$out/$p.tap" 2>"$out/$p.err") || rc=$?
	ok=$(grep -cE '^ok [0-9]+' "$out/$p.tap" || true)
	notok=$(grep -cE '^not ok [0-9]+' "$out/$p.tap" || true)
	skip=$(grep -ciE '^ok [0-9]+ #( |)skip' "$out/$p.tap" || true)
	plan=$(grep -cE '^1\.\.[0-9]+' "$out/$p.tap" || true)
	counts="pass $((ok - skip)), fail $notok, skip $skip, exit $rc"
	if [ "$rc" = 0 ] && [ ! -s "$out/$p.tap" ]; then
		# The *_fail programs print no TAP and exit 0 when the runtime
		# refused the bundle, as they require (any refusal counts: see
		# the stderr kept beside it for what the runtime said).
		echo "ok $n - $p # refused as required ($(grep -v '^failed to' "$out/$p.err" | grep -m1 -v '^[[:space:]]*$' | cut -c1-160 || true))"
	elif [ "$rc" = 0 ] && [ "$notok" = 0 ] && [ "$plan" -gt 0 ] && [ "$ok" -gt 0 ]; then
		if [ "$ok" = "$skip" ]; then
			echo "ok $n - $p # SKIP ($counts)"
		else
			echo "ok $n - $p ($counts)"
		fi
	else
		# A plan of 1..0 with an error diagnostic is how several programs
		# (hooks, poststart...) report a failure without a test point.
		failed=$((failed + 1))
		echo "not ok $n - $p ($counts)"
		why=$(grep -m1 -E '^not ok' "$out/$p.tap" || true)
		[ -n "$why" ] || why=$(grep -m1 -E '"error": ' "$out/$p.tap" | sed 's/^ *//' || true)
		[ -n "$why" ] || why=$(grep -v '^[[:space:]]*$' "$out/$p.err" | head -n 2 | tr '\n' ' ' || true)
		[ -z "$why" ] || echo "  # ${why:0:240}"
	fi
done
echo "# $((n - failed)) of $n tests passed or skipped; TAP and stderr in $out"
[ "$failed" = 0 ]
