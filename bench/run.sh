#!/usr/bin/env bash
# Start-up benchmark: `cordon run -- /bin/true` on the production path with
# everything on (boundary, cgroups, store, evidence), side by side in ONE
# hyperfine run with bwrap (same namespaces, no capabilities, equivalent
# binds) and unshare (the namespace part only). Prints median/p95 and the
# ratios, then cordon's per-phase breakdown (CORDON_TRACE=1, medians).
#
#   sudo bench/run.sh [RUNS]        (default 200 runs each)
#
# Needs root, hyperfine and bwrap (apt-get install hyperfine bubblewrap).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-200}
out=bench/out
mkdir -p "$out"
export CGO_ENABLED=0
go build -o "$out/cordon" ./cmd/cordon
state=$(mktemp -d /tmp/cordon-bench-XXXX)
chmod 0711 "$state"
trap 'rm -rf "$state"' EXIT
C="$out/cordon --state-dir $state"
$C run -- /bin/true # warm the filter and digest caches once

# bwrap with the binds cordon makes: read-only /usr and the merged-usr
# symlinks, the loader cache and certs, private /proc, minimal /dev, tmpfs
# /tmp and HOME, every namespace, no capabilities.
BW="bwrap --unshare-all --cap-drop ALL --die-with-parent --new-session \
 --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/sbin /sbin --symlink usr/lib /lib --symlink usr/lib64 /lib64 \
 --ro-bind /etc/ld.so.cache /etc/ld.so.cache --ro-bind /etc/ssl/certs /etc/ssl/certs --ro-bind /etc/alternatives /etc/alternatives \
 --proc /proc --dev /dev --tmpfs /tmp --tmpfs /home/agent --uid 1000 --gid 1000 --hostname cordon -- /bin/true"
US="unshare --user --map-root-user --pid --fork --mount --net --ipc --uts --cgroup --mount-proc /bin/true"

hyperfine -N --warmup 10 --runs "$runs" --export-json "$out/hyperfine.json" \
	-n cordon "$C run -- /bin/true" -n bwrap "$BW" -n unshare "$US" >"$out/hyperfine.txt"

python3 - "$out/hyperfine.json" <<'PY'
import json, statistics, sys
r = json.load(open(sys.argv[1]))["results"]
def q(ts, p):
    ts = sorted(ts); k = (len(ts) - 1) * p; f = int(k); c = min(f + 1, len(ts) - 1)
    return ts[f] + (ts[c] - ts[f]) * (k - f)
m = {x["command"]: x for x in r}
print("| command | median ms | p95 ms | mean ms | runs |")
print("| --- | --- | --- | --- | --- |")
for name in ("cordon", "bwrap", "unshare"):
    ts = m[name]["times"]
    print(f"| {name} | {statistics.median(ts)*1e3:.2f} | {q(ts,.95)*1e3:.2f} | {statistics.mean(ts)*1e3:.2f} | {len(ts)} |")
c, b = m["cordon"]["times"], m["bwrap"]["times"]
print()
print(f"cordon/bwrap: median {statistics.median(c)/statistics.median(b):.2f}x, p95 {q(c,.95)/q(b,.95):.2f}x "
      "(targets: median <= 1.5x, p95 <= 2x; stretch <= 1.0x)")
PY

echo
echo "cordon per-phase breakdown (median of 50 runs, ms; nested rows are parts of start.init):"
for i in $(seq 50); do CORDON_TRACE=1 $C run -- /bin/true 2>&1 >/dev/null | grep cordon_trace; done >"$out/trace.jsonl"
python3 - "$out/trace.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l)["cordon_trace"] for l in open(sys.argv[1])]
order, vals, nested = [], {}, {}
for r in rows:
    for p in r:
        if p["phase"] not in vals:
            order.append(p["phase"]); vals[p["phase"]] = []
        vals[p["phase"]].append(p["us"] / 1000); nested[p["phase"]] = p.get("nested", False)
print("| phase | median ms |")
print("| --- | --- |")
tot = 0
for k in order:
    med = statistics.median(vals[k])
    if not nested[k]:
        tot += med
    print(f"| {'  ↳ ' if nested[k] else ''}{k} | {med:.2f} |")
print(f"| sum of top-level medians (in-process) | {tot:.2f} |")
PY
