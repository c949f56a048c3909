// Package probes holds the conformance probes, one file per area, each
// registering itself with package conformance from init. A probe attempts
// one thing inside a sandbox and reports what the trusted side observed
// from outside, with the positive control that shows the boundary is what
// denied it; the runner judges.
//
// Plane: root (the runner). A probe acts only on what its Env gave it or
// it created under Env.Dir: it must never act on other host paths,
// processes or listeners, so that running the suite against a provider that
// isolates nothing harms nothing.
package probes
