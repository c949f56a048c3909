// Package probeops holds the attempts a probe makes inside a sandbox: one
// op per name, each attempting one thing and reporting one JSON line —
// what it tried, whether the call succeeded, and the errno. Nothing here
// is a verdict: the e2e tests and `cordon conformance run` observe the
// effect (or its absence) from outside, and treat this line as a hint.
//
// The ops run as `cordon __probe OP ARGS` (the conformance suite, from the
// binary under test) and as the e2e tests' probe program (e2e/probe).
//
// Plane: sandbox (the ops run inside, as the untrusted program would) and
// root (the same ops on the host are the positive controls). An op must
// never act on a host path, process or listener its caller did not name:
// callers pass markers and targets they own.
package probeops
