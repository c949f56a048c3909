#!/usr/bin/env bash
# CRI benchmark (issue 14): the create+start path kubelet drives, under the
# runtime handlers runc and cordon side by side in ONE run, interleaved,
# through a private containerd 1.6 with its CRI plugin (the one the
# e2e/oci tests use: its own root, state, socket and network namespace;
# stopped by its PID at the end). Per handler and pod: RunPodSandbox,
# CreateContainer+StartContainer, then StopContainer (timeout 0),
# RemoveContainer, StopPodSandbox, RemovePodSandbox. A second handler per
# runtime ("NAME-timed") runs the same binary through a timing wrapper to
# give the time spent inside the runtime binary itself; from it the
# ratio the issue's target is about:
#   (cordon create+start - runc create+start) / runc's own runtime time
#
#   sudo bench/cri.sh [N] [HANDLERS]    (default 20 pods per handler; runc,cordon)
#
# Needs root, containerd, runc and containernetworking-plugins
# (scripts/test.sh installs them) and the cached Debian image
# (built with mmdebstrap on first use).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH" CGO_ENABLED=0
out=bench/out/cri
mkdir -p "$out"
echo "load before: $(cat /proc/loadavg)" >&2
CORDON_BENCH_N=${1:-20} CORDON_BENCH_HANDLERS=${2:-runc,cordon} \
	go test -count=1 -timeout 60m -run '^$' -bench '^BenchmarkCRIStart$' -benchtime 1x ./e2e/oci \
	| grep -v '^\(goos\|goarch\|pkg\|cpu\|PASS\|ok\|BenchmarkCRIStart\)' | tee "$out/cri.txt"
echo "load after: $(cat /proc/loadavg)" >&2
