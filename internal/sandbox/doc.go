// Package sandbox is the provider seam: the capability descriptor a provider
// publishes, the isolation levels, the
// lifecycle a provider implements (probe → provision → start → exec → stop →
// deprovision) and fail-closed provider selection.
//
// It owns no enforcement. It must never admit a level from anything but
// evidence read by the trusted side (see package evidence), and selection
// must never fall back to a provider weaker than the one requested.
package sandbox
