#!/usr/bin/env bash
# Tools, policy and proof benchmark (issue 4), one run, side by side:
#  1. tool-call latency: the same official-Go-SDK client calling the same
#     upstream MCP server (e2e/mcpserver "echo") directly over stdio, and
#     through cordon: the client contained in a sandbox, the tool broker
#     (front door, schema, policy, replay record, receipt), the upstream
#     contained in its own sandbox — the production path, every feature on;
#  2. per-phase Go benchmarks of the same path: the MCP layers alone (SDK
#     server + broker, in-memory ledger) vs the upstream alone; the
#     privileged side of one call (policy, write-ahead record, receipt in
#     the Merkle log: two round trips, two commits);
#  3. policy decision latency (Cedar), and receipt append + checkpoint
#     cost (Merkle log).
#
#   sudo bench/tools.sh [CALLS]         (default 2000; about a minute)
set -euo pipefail
cd "$(dirname "$0")/.."
calls=${1:-2000}
out=$PWD/bench/out/tools
mkdir -p "$out/probe"
export CGO_ENABLED=0
go build -o "$out/cordon" ./cmd/cordon
go build -o "$out/probe/" ./e2e/mcpclient ./e2e/mcpserver
state=$(mktemp -d /tmp/cordon-bench-tools.XXXXXX)
chmod 0711 "$state"
trap '"$out/cordon" --state-dir "$state" gc >/dev/null 2>&1 || true; rm -rf "$state"' EXIT
cat >"$out/cordon.yaml" <<YAML
version: cordon/v1
workload: bench-tools
tenant: bench
purpose: benchmark
policy: [$PWD/examples/policy/default.cedar]
tools:
  - name: t
    command: [/tools/mcpserver]
    binds: [{source: $out/probe, target: /tools}]
# the tool path, not the per-sandbox crossing bounds (docs/config.md)
crossings: {max_receipts: 100000000, rate: 100000, burst: 100000}
YAML
echo "load before: $(cat /proc/loadavg)" >&2
direct=$("$out/probe/mcpclient" bench "$calls" echo '{"text":"hi"}' -- "$out/probe/mcpserver")
broker=$("$out/cordon" --state-dir "$state" run --config "$out/cordon.yaml" --ro "$out/probe:/probe" -- \
	/probe/mcpclient bench "$calls" t__echo '{"text":"hi"}' 2>"$out/run.log")
echo "load after: $(cat /proc/loadavg)" >&2
echo "$direct" >"$out/direct.json"
echo "$broker" >"$out/broker.json"
python3 - "$direct" "$broker" <<'PY'
import json, sys
d, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print("| tool call (echo), %d sequential calls | p50 µs | p90 µs | p99 µs | calls/s |" % d["calls"])
print("| --- | ---: | ---: | ---: | ---: |")
for name, r in (("direct (stdio, no broker)", d), ("through cordon (both sides contained)", b)):
    print("| %s | %.0f | %.0f | %.0f | %.0f |" % (name, r["p50_us"], r["p90_us"], r["p99_us"], r["calls_per_s"]))
print("| overhead | +%.0f | +%.0f | +%.0f | %.2fx |" % (b["p50_us"]-d["p50_us"], b["p90_us"]-d["p90_us"], b["p99_us"]-d["p99_us"], b["calls_per_s"]/d["calls_per_s"]))
PY
echo
go test -run '^$' -bench 'BenchmarkUpstreamDirect|BenchmarkBrokerMCPLayers' -benchtime 2000x ./internal/broker/tool/ | grep Benchmark
go test -run '^$' -bench 'BenchmarkToolLedger' -benchtime 2000x ./internal/gateway/ | grep Benchmark
go test -run '^$' -bench 'BenchmarkDecide' -benchtime 1s ./internal/policy/ | grep Benchmark
go test -run '^$' -bench 'BenchmarkAppend' -benchtime 5000x ./internal/evlog/ | grep Benchmark
