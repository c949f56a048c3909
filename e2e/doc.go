// Package e2e holds whole-binary tests of cordon: they build the cordon
// binary (and a test build with hooks for positive controls), run real
// programs in real sandboxes as root, attempt escapes from inside with the
// probe program, and observe every verdict from the trusted side.
package e2e
