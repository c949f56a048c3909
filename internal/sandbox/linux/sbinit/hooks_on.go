//go:build cordon_testhooks

package sbinit

// testHooks lets tests leave out one hardening layer to show, as a positive
// control, that the layer under test is what denies an escape. Only test
// builds carry this tag; the production binary never honours TestSkip.
const testHooks = true
