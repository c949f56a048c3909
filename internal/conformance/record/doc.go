// Package record is the conformance record: what `cordon conformance run`
// observed on a host, the bindings that say what was tested (binary,
// provider, host, config, policy, rootfs), the TCB, assumptions and
// non-claims, the claim admitted, the maturity labels, and every probe's
// verdict with the facts behind it. Sign wraps a record as the predicate
// of an in-toto Statement in a DSSE envelope (internal/attest); Diff says
// where two records differ.
//
// Plane: root (the runner writes and signs it) and CLI (verify, report
// read records handed in by anyone). It must never treat what a probe
// inside a sandbox printed (Hint) as a fact, never admit a claim that a
// class without a passing probe, or any failed probe, does not support,
// and must treat every record it reads as untrusted input (FromStatement
// decodes strictly).
package record
