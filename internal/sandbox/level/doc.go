// Package level is the ordered set of isolation levels (SHARED …
// DEDICATED_VM) that a provider's evidence can admit. It is a leaf: the
// provider seam (package sandbox) and the evidence record (package
// evidence) both name levels, and the seam's Admission carries the
// evidence record, so the levels live below both.
//
// Plane: root and CLI. It holds data only: it must
// never decide a level (package evidence admits one from observations)
// and never import another cordon package.
package level
