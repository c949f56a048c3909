#!/usr/bin/env bash
# Gateway benchmark (issue 3): the model broker and the egress proxy on the
# production path (policy, budgets with every limit set, receipts, the
# authority channel to SQLite), side by side in one run with the same client calling
# the fake upstream directly, and — for egress — with stripe/smokescreen
# doing the same job. Prints markdown tables (ratios from this one run);
# raw numbers in bench/out/gateway.json, logs in bench/out/gw-*.log.
#
#   sudo bench/gateway.sh [MODEL_DUR] [EGRESS_DUR]     (defaults 8s, 5s; ~2.5 min in all)
#
# Needs root and Go; fetches smokescreen v0.1.0 through the Go module proxy
# once (kept in bench/out/tools). All traffic is on 127.0.0.1 and in the
# sandbox's own network namespace; the HTTPS file server takes
# 127.0.0.1:443 (HTTPS_PORT to change it; on 443 the broker checks the SNI).
set -euo pipefail
cd "$(dirname "$0")/.."
model_dur=${1:-8s}
egress_dur=${2:-5s}
out=$PWD/bench/out
bin=$out/gw-bin
tools=$out/tools
mkdir -p "$bin" "$tools"
export CGO_ENABLED=0
go build -o "$bin/cordon" ./cmd/cordon
go build -o "$bin/" ./bench/gateway/upstream ./bench/gateway/load ./bench/gateway/authority ./bench/gateway/bareproxy
go build -o "$tools/gw-driver" ./bench/gateway/driver
if [ ! -x "$tools/smokescreen" ]; then
	(cd /tmp && GOBIN="$tools" go install github.com/stripe/smokescreen@v0.1.0)
fi

echo "load before: $(cat /proc/loadavg)" >&2
# The driver starts and ends every process of the benchmark by PID; this
# script ends the driver by its PID on interruption.
"$tools/gw-driver" -bin "$bin" -smokescreen "$tools/smokescreen" -out "$out" \
	-https-port "${HTTPS_PORT:-443}" -model-dur "$model_dur" -egress-dur "$egress_dur" >"$out/gateway.md" &
driver=$!
trap 'kill -TERM "$driver" 2>/dev/null || true; wait "$driver" || true; exit 130' INT TERM HUP
wait "$driver"
trap - INT TERM HUP
echo "load after: $(cat /proc/loadavg)" >&2
cat "$out/gateway.md"
