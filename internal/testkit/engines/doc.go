// Package engines stands up the container engines cordon's OCI runtime is
// tested under, privately for one test: a Debian image built once per
// machine with mmdebstrap (no registry is reachable from the test hosts),
// and a dockerd of the test's own (its own data root, exec root, socket
// and managed containerd) with the runtimes the test names registered.
// Part of it is shared with the containerd (CRI) tests: the image.
//
// Plane: test-only. It must never be imported by the cordon binary or any
// non-test code (testkit's TestNotImportedByProduction covers testkit's
// subpackages), and it must never touch an engine it did not start: it
// stops only the daemon whose PID it holds, and unmounts only below the
// directories it made.
package engines
