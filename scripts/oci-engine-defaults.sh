#!/bin/sh
# An OCI runtime wrapper for the runtime-tools validation suite: on create
# (or run), a bundle whose config.json has no linux.maskedPaths or no
# linux.readonlyPaths gets the lists Docker 20.10 and containerd send by
# default; then it runs $OCI_ENGINE_DEFAULTS_RUNTIME with the same
# arguments. A list that is present, even empty, is left as it is; nothing
# else in the bundle is touched. Needs jq.
#
# Why: the suite's config generator sends no masks, which an engine does
# only for --privileged (or systempaths=unconfined); cordon refuses such a
# bundle by design (docs/oci.md). scripts/oci-validate.sh --engine-defaults
# runs the suite through this wrapper so the other checks are reached.
set -eu
rt=${OCI_ENGINE_DEFAULTS_RUNTIME:?set OCI_ENGINE_DEFAULTS_RUNTIME to the runtime to wrap}
bundle=. prev= cmd=
for a in "$@"; do
	case "$prev" in --bundle | -b) bundle=$a ;; esac
	case "$a" in --bundle=*) bundle=${a#--bundle=} ;; esac
	if [ -z "$cmd" ]; then
		case "$a" in create | run) cmd=$a ;; esac
	fi
	prev=$a
done
if [ -n "$cmd" ] && [ -f "$bundle/config.json" ]; then
	# Docker's read-only list, less the paths this host's kernel does not
	# have: runtimetest stops at the first one it cannot stat (this
	# kernel has no /proc/sysrq-trigger), where runc skips it.
	ro=
	for p in /proc/bus /proc/fs /proc/irq /proc/sys /proc/sysrq-trigger; do
		[ -e "$p" ] && ro="$ro${ro:+,}\"$p\""
	done
	c=$bundle/config.json
	jq --argjson ro "[$ro]" '.linux.maskedPaths //= ["/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys",
		"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug",
		"/proc/scsi", "/sys/firmware"]
	  | .linux.readonlyPaths //= $ro' "$c" >"$c.engine-defaults"
	mv "$c.engine-defaults" "$c"
fi
exec "$rt" "$@"
