// Package evidence reads facts about a live sandbox from the trusted side
// (/proc of the host, the cgroup filesystem, the sandbox's network
// namespace as seen through /proc/PID/net) and judges, boundary by
// boundary, whether the isolation a level claims is in place. It builds the
// evidence record (schema cordon.evidence/v1) and admits a level.
//
// Plane: root (the trusted side that built the sandbox, before the
// program's first instruction and again on re-admission).
//
// It must never take anything the sandboxed program (or the init inside
// the sandbox) says about itself as evidence: messages from inside are at
// most hints, and every verdict here rests on a read made by the trusted
// side or on an outcome the trusted side observed itself.
package evidence
