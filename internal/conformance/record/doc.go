// Package record is the conformance record: what `cordon conformance run`
// observed on a host, the bindings that say what was tested (binary,
// provider, host, config, policy, rootfs), the TCB, assumptions and
// non-claims, and every probe's verdict with the facts behind it.
//
// Plane: root (the runner writes it) and CLI (verify, report). It must
// never
// treat what a probe inside a sandbox printed (Hint) as a fact.
package record
