// Package testkit holds the helpers cordon's tests share: the checks that
// a test's host requirements are met (root, a static build, Landlock, a
// program or file), the re-execution of a test binary as a child process,
// the fake upstreams several packages' tests stand up (a model provider
// speaking Anthropic and OpenAI, an HTTP target that counts what reached
// it), and a server that binds a sandbox identity to each connection the
// way the gateway does, for serving a broker under test.
//
// The rule every Require… helper enforces: a test whose requirement is
// missing skips with the reason, except under CI=true, where it fails. CI
// runs as root on a machine with every feature, so a skip there would hide
// a regression in an isolation test.
//
// Its tests also keep docs/testing.md honest: TestProbeTableIsHonest fails
// when a test the probe-class table lists no longer exists in its package.
//
// Plane: test-only. It must never be imported by non-test code
// (TestNotImportedByProduction walks the import graph of every package and
// of the cordon binary to keep it so), and it must never weaken what a test
// observes: a fake stands in for an upstream outside the boundary, never
// for the boundary itself.
package testkit
