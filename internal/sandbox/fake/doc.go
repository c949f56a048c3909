// Package fake is a second sandbox provider, for tests only: it runs the
// program as a plain child process, with no isolation at all, and its
// evidence says so (every boundary unverified: SHARED). It exists to
// prove that callers of the seam (package launch, the daemon in package
// hostmgr) reach nothing Linux-specific around sandbox.Provider and
// sandbox.Sandbox, and that asking it for a level it cannot evidence
// fails closed.
//
// Plane: test-only (it runs as whoever runs the test). It must never be
// wired into the cordon binary (TestNotInTheBinary checks), and never
// report a boundary as verified.
package fake
