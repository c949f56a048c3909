#!/usr/bin/env bash
# Host memory per sandbox WITH its gateway (issue 10): N idle daemon
# sandboxes, each with a gateway configuration that gives every broker
# something to do (a model route with a custodied key, an egress rule,
# managed state), created and started through the CLI on the production
# path. Memory is the proportional set size (PSS, /proc/PID/smaps_rollup)
# of every process descending from the daemon — sandbox init, gateway
# processes, the daemon itself — before and after, divided by N; the
# gateway processes (argv0 cordon-gateway*) are also summed on their own.
#
#   ./bench/memory.sh [N]        (default 50; as root)
#
# It starts its own daemon on a private socket and state dir, ends it by
# its PID, and removes every sandbox it made. Nothing leaves loopback: the
# upstreams are never called.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-50}
out=$PWD/bench/out/memory
mkdir -p "$out"
export CGO_ENABLED=0
go build -o "$out/cordon" ./cmd/cordon
state=$(mktemp -d /tmp/cordon-bench-mem.XXXXXX)
chmod 0711 "$state"
sock=$state/d.sock
cat >"$state/gw.yaml" <<'YAML'
version: cordon/v1
workload: bench-mem
tenant: bench
purpose: bench
models:
  - name: claude
    api: anthropic
    upstream: https://127.0.0.1:9
    credential: key
    models: ["claude-*"]
egress:
  allow:
    - host: example.test
      ports: [443]
state:
  max_value_bytes: 64KiB
secrets:
  key: {env: BENCH_KEY}
YAML
"$out/cordon" --state-dir "$state" daemon --socket "$sock" --drift-interval 1h >"$out/daemon.log" 2>&1 &
dpid=$!
C="$out/cordon --state-dir $state --socket $sock"
cleanup() {
	# rm stops first; a daemon ended with SIGTERM leaves its sandboxes
	# running (to adopt them on restart), so every one must be gone before.
	for i in $(seq "$n"); do $C sandbox rm "mem$i" >/dev/null 2>&1 || true; done
	if left=$($C sandbox ls --json 2>/dev/null | python3 -c 'import json,sys; print(len(json.load(sys.stdin) or []))') && [ "$left" != 0 ]; then
		echo "memory.sh: $left sandboxes left after rm; not stopping the daemon (socket $sock)" >&2
		return
	fi
	kill -TERM "$dpid" 2>/dev/null || true
	wait "$dpid" 2>/dev/null || true
	rm -rf "$state"
}
trap cleanup EXIT
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
pss() {
	python3 - "$dpid" <<'PY'
import os, sys, json
root = int(sys.argv[1])
kids = {}
for p in os.listdir("/proc"):
    if not p.isdigit():
        continue
    try:
        st = open(f"/proc/{p}/stat").read()
        ppid = int(st[st.rindex(")") + 2:].split()[1])
    except OSError:
        continue
    kids.setdefault(ppid, []).append(int(p))
def walk(p):
    yield p
    for c in kids.get(p, []):
        yield from walk(c)
def pss_kib(p):
    try:
        for line in open(f"/proc/{p}/smaps_rollup"):
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0
tot = gw = ngw = procs = 0
for p in walk(root):
    k = pss_kib(p)
    tot += k
    procs += 1
    try:
        a0 = open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")[0]
    except OSError:
        a0 = b""
    if a0.startswith(b"cordon-gateway"):
        gw += k
        ngw += 1
print(json.dumps({"pss_kib": tot, "gateway_pss_kib": gw, "gateway_procs": ngw, "procs": procs}))
PY
}
before=$(pss)
for i in $(seq "$n"); do
	BENCH_KEY=sk-bench-$i $C sandbox create "mem$i" --config "$state/gw.yaml" >/dev/null
	$C sandbox start "mem$i" >/dev/null
done
sleep 3
after=$(pss)
python3 - "$n" "$before" "$after" <<'PY' | tee "$out/memory.json"
import json, sys
n = int(sys.argv[1]); b = json.loads(sys.argv[2]); a = json.loads(sys.argv[3])
print(json.dumps({
  "sandboxes": n,
  "host_pss_per_sandbox_kib": round((a["pss_kib"] - b["pss_kib"]) / n),
  "gateway_pss_per_sandbox_kib": round((a["gateway_pss_kib"] - b["gateway_pss_kib"]) / n),
  "gateway_procs_per_sandbox": (a["gateway_procs"] - b["gateway_procs"]) / n,
  "procs_per_sandbox": (a["procs"] - b["procs"]) / n,
  "before": b, "after": a}, indent=1))
PY
