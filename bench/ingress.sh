#!/usr/bin/env bash
# Ingress benchmark (issue 11): a declared inbound route, production path
# with every feature on (policy, connection and byte budgets metered,
# one receipt per connection), against the same HTTP server reached
# directly on the host and through a plain user-space TCP relay (the
# least any relay does). The server is python3 -m http.server in each
# case: inside the sandbox for cordon, on the host for the peers.
#
#   sudo bench/ingress.sh [N] [MIB]   (default 300 small GETs, 256 MiB)
#
# Rows: p50/p95 of N sequential 1 KiB GETs, each on a new connection (a
# route pays policy + reservation + receipt per connection), and MiB/s of
# one MIB-MiB GET.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-300}
mib=${2:-256}
out=bench/out
mkdir -p "$out"
export CGO_ENABLED=0
go build -o "$out/cordon" ./cmd/cordon
go build -o "$out/ingress-relay" ./bench/ingress/relay
go build -o "$out/ingress-driver" ./bench/ingress/driver
state=$(mktemp -d /tmp/cordon-bench-XXXX)
ws=$(mktemp -d /tmp/cordon-bench-ws-XXXX)
chmod 0711 "$state"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$state" "$ws"
}
trap cleanup EXIT
head -c 1024 /dev/urandom >"$ws/small"
head -c "${mib}M" /dev/zero >"$ws/big"
chown -R 1000:1000 "$ws"
chmod 0755 "$ws"
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pr=$(port); ph=$(port); pp=$(port)
cat >"$state/ingress.yaml" <<YAML
version: cordon/v1
workload: bench-ingress
tenant: bench
purpose: bench
ingress:
  - name: web
    port: 18789
    listen: 127.0.0.1:$pr
budgets:
  window: 24h
  ingress_connections: 100000000
  ingress_bytes: 1000GiB
YAML
"$out/cordon" --state-dir "$state" run --config "$state/ingress.yaml" --workspace "$ws" --timeout 30m \
	-- /usr/bin/python3 -m http.server 18789 --bind 127.0.0.1 --directory /workspace >"$out/ingress-cordon.log" 2>&1 </dev/null &
pids+=($!)
/usr/bin/python3 -m http.server "$ph" --bind 127.0.0.1 --directory "$ws" >/dev/null 2>&1 &
pids+=($!)
"$out/ingress-relay" "127.0.0.1:$pp" "127.0.0.1:$ph" &
pids+=($!)
for i in $(seq 100); do
	curl -sf -o /dev/null "http://127.0.0.1:$pr/small" && curl -sf -o /dev/null "http://127.0.0.1:$ph/small" && break
	sleep 0.1
done
printf '| path | p50 ms | p95 ms | MiB/s |\n| --- | --- | --- | --- |\n'
declare -A res
for name in direct relay cordon; do
	case $name in direct) p=$ph ;; relay) p=$pp ;; cordon) p=$pr ;; esac
	res[$name]=$("$out/ingress-driver" "http://127.0.0.1:$p/small" "http://127.0.0.1:$p/big" "$n")
	python3 -c 'import json,sys; r=json.loads(sys.argv[2]); print("| %s | %.2f | %.2f | %.0f |" % (sys.argv[1], r["p50_ms"], r["p95_ms"], r["mib_s"]))' "$name" "${res[$name]}"
done
python3 - "${res[direct]}" "${res[relay]}" "${res[cordon]}" <<'PY'
import json, sys
d, r, c = (json.loads(x) for x in sys.argv[1:])
print(f"\ncordon added latency per connection (p50): {c['p50_ms']-d['p50_ms']:+.2f} ms vs direct, {c['p50_ms']-r['p50_ms']:+.2f} ms vs the plain relay")
print(f"cordon throughput: {c['mib_s']/d['mib_s']:.2f}x direct, {c['mib_s']/r['mib_s']:.2f}x the plain relay")
PY
echo
echo "receipts recorded: $("$out/cordon" --state-dir "$state" receipts --json --broker ingress | grep -c '"broker"' || true)"
