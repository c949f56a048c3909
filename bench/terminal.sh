#!/usr/bin/env bash
# Terminal benchmark: what the program's own pseudo-terminal costs
# (issue 11). Every command runs under `script`, so cordon's stdin is a
# terminal and the production path is taken: the sandbox's own pty, the
# trusted side's raw-mode relay, SIGWINCH forwarding. Peers on the same
# terminal: the program directly, and bwrap --new-session (which hands the
# program the caller's terminal, no relay).
#
#   sudo bench/terminal.sh [RUNS] [MIB]   (default 50 runs, 256 MiB)
#
# Rows: start-up of /bin/true on a terminal; throughput of MIB MiB written
# by the program to its terminal and read back by the outer terminal.
# Needs root, hyperfine, bwrap and script (util-linux).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-50}
mib=${2:-256}
out=bench/out
mkdir -p "$out"
export CGO_ENABLED=0
go build -o "$out/cordon" ./cmd/cordon
state=$(mktemp -d /tmp/cordon-bench-XXXX)
chmod 0711 "$state"
trap 'rm -rf "$state"' EXIT
C="$out/cordon --state-dir $state"
BW="bwrap --unshare-all --cap-drop ALL --die-with-parent --new-session \
 --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/sbin /sbin --symlink usr/lib /lib --symlink usr/lib64 /lib64 \
 --proc /proc --dev /dev --tmpfs /tmp --uid 1000 --gid 1000 --"
on_tty() { printf 'script -qefc %q /dev/null' "$1"; }
script -qefc "$C run -- /bin/true" /dev/null >/dev/null # warm the caches

echo "## start-up on a terminal ($runs runs)"
hyperfine -N --warmup 3 --runs "$runs" --export-json "$out/terminal-start.json" \
	-n cordon-tty "$(on_tty "$C run -- /bin/true")" \
	-n cordon-notty "$C run -- /bin/true" \
	-n bwrap-tty "$(on_tty "$BW /bin/true")" >"$out/terminal-start.txt"
echo "## $mib MiB to the terminal (5 runs)"
W="head -c ${mib}M /dev/zero"
hyperfine -N --warmup 1 --runs 5 --export-json "$out/terminal-tput.json" \
	-n direct "$(on_tty "$W")" \
	-n bwrap "$(on_tty "$BW $W")" \
	-n cordon "$(on_tty "$C run -- $W")" >"$out/terminal-tput.txt"

python3 - "$out/terminal-start.json" "$out/terminal-tput.json" "$mib" <<'PY'
import json, statistics, sys
def load(p): return {x["command"]: x["times"] for x in json.load(open(p))["results"]}
s, t, mib = load(sys.argv[1]), load(sys.argv[2]), int(sys.argv[3])
print("| start-up | median ms | p95 ms |")
print("| --- | --- | --- |")
for n, ts in s.items():
    ts = sorted(ts)
    print(f"| {n} | {statistics.median(ts)*1e3:.2f} | {ts[int(.95*(len(ts)-1))]*1e3:.2f} |")
print(f"\ncordon-tty / cordon-notty: {statistics.median(s['cordon-tty'])/statistics.median(s['cordon-notty']):.2f}x; "
      f"cordon-tty / bwrap-tty: {statistics.median(s['cordon-tty'])/statistics.median(s['bwrap-tty']):.2f}x\n")
print("| throughput | median s | MiB/s |")
print("| --- | --- | --- |")
for n, ts in t.items():
    m = statistics.median(ts)
    print(f"| {n} | {m:.3f} | {mib/m:.0f} |")
print(f"\ncordon / direct throughput: {statistics.median(t['direct'])/statistics.median(t['cordon']):.2f}x")
PY
