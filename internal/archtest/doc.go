// Package archtest holds checks on the shape of the tree itself, run as
// ordinary tests: today, that every package under internal/ and cmd/ has a
// doc.go whose package comment says what the package owns, names its plane
// on a line starting "Plane:" (root, unprivileged, sandbox, CLI, test-only
// or any, as docs/architecture.md defines them) and says what it must
// never do; and that docs/architecture.md defines those planes and lists
// every package.
//
// Plane: test-only. It has no code but its tests and must never be
// imported; it must never skip a package silently — a package whose doc is
// being rewritten elsewhere is named in the check's pending set, with a
// comment saying why.
package archtest
