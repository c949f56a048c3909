#!/usr/bin/env bash
# Docker benchmark (issue 14): `docker run --rm IMAGE /bin/true` with
# --runtime cordon and --runtime runc, interleaved in one run on a private
# dockerd (its own data root, exec root, socket and containerd; no bridge,
# no iptables), and the time spent inside each runtime binary (create,
# start, state, kill, delete), measured through a timing wrapper registered
# as a second runtime — the production path is unchanged. Prints medians,
# p90 and the issue's ratio (cordon total - runc total) / runc runtime.
#
#   sudo bench/docker.sh [N]          (default 20 runs each)
#   CORDON_ONLY_RUNC=1 bench/docker.sh   (runc alone: proves the bench)
#
# Needs root, Debian's docker.io, containerd, runc and mmdebstrap (the
# image is the tests' cached Debian root, engines.Image).
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-20}
out=$PWD/bench/out/docker
mkdir -p "$out"
export CGO_ENABLED=0
go build -o "$out/cordon" ./cmd/cordon
ln -sf cordon "$out/cordon-oci"
cordon_oci=$out/cordon-oci
[ "${CORDON_ONLY_RUNC:-}" = 1 ] && cordon_oci=
echo "load before: $(cat /proc/loadavg)" >&2
CORDON_BENCH_DOCKER=1 CORDON_BENCH_N="$n" CORDON_BENCH_CORDON_OCI="$cordon_oci" \
	go test -count=1 -timeout 60m -run '^TestDockerBench$' -v ./bench/docker | tee "$out/docker.txt"
echo "load after: $(cat /proc/loadavg)" >&2
