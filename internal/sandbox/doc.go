// Package sandbox is the provider seam: the capability descriptor a
// provider publishes, the lifecycle a provider implements (probe →
// provision → start → exec → stop → deprovision), fail-closed provider
// selection, and every method a caller needs of a provider (Provider,
// Resident) or of a sandbox (Sandbox), each with its contract. The
// isolation levels are package level's, re-exported here.
//
// Plane: root (the trusted side's view of a provider). It owns no
// enforcement. It must never admit a level from anything but evidence read
// by the trusted side (see package evidence), selection must never fall
// back to a provider weaker than the one requested, and callers must never
// need a type assertion to reach a provider: what they need belongs here.
package sandbox
