// Package conformance is the suite behind `cordon conformance run`: one
// probe per claim of the contract (section 2, item 5: allowed, bypass,
// stale state, cross-tenant, exhaustion, failure, reset and recovery),
// each run against the live system through the binary under test and
// judged from the trusted side.
//
// A probe starts sandboxes with `cordon run` (or a daemon) exactly as a
// user would, makes one attempt inside (package probeops, run as `cordon
// __probe`), and observes the effect from outside: a listener's count, a
// host file, /proc/PID, the store. What the program inside printed is a
// hint, shown and never judged. A probe's verdict is pass only with a
// positive control observed to work (the same attempt by a permitted
// route), so that the boundary, not an unrelated failure, is what denied
// it; a provider or host that cannot support a probe yields
// not_evidenced, never a pass.
//
// Plane: root (the runner is the trusted side). The runner must never
// act on host paths, processes or listeners it did not create, so
// that the suite is safe against a provider that isolates nothing.
package conformance
