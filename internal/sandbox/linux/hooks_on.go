//go:build cordon_testhooks

package linux

// testHooks lets test builds leave out a trusted-side layer (Options.TestSkip)
// for positive controls; the production binary never honours it.
const testHooks = true
