#!/usr/bin/env bash
# Daemon benchmark (issue 5), one run: create+start latency, exec latency
# in a warm sandbox, density (idle sandboxes, no gateway, no tool servers;
# the daemon's memory per sandbox) and the emergency stop of 100 sandboxes.
#
#   ./bench/daemon.sh [DENSITY] [STOP]        (defaults 500, 100; as root)
#
# It starts its own daemon on a private socket and state dir, ends it by
# its PID, and removes every sandbox it made.
set -euo pipefail
cd "$(dirname "$0")/.."
density=${1:-500}
stopn=${2:-100}
out=$PWD/bench/out/daemon
mkdir -p "$out"
export CGO_ENABLED=0
go build -o "$out/cordon" ./cmd/cordon
go build -o "$out/bench-daemon" ./bench/daemon
state=$(mktemp -d /tmp/cordon-bench-daemon.XXXXXX)
chmod 0711 "$state"
sock=$state/d.sock
"$out/cordon" --state-dir "$state" daemon --socket "$sock" --drift-interval 1h >"$out/daemon.log" 2>&1 &
dpid=$!
trap 'kill -TERM "$dpid" 2>/dev/null || true; wait "$dpid" 2>/dev/null || true; rm -rf "$state"' EXIT
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
echo "load before: $(cat /proc/loadavg)" >&2
"$out/bench-daemon" -socket "$sock" -pid "$dpid" -density "$density" -stop "$stopn" | tee "$out/daemon.json"
echo "load after: $(cat /proc/loadavg)" >&2
