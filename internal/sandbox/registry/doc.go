// Package registry maps a provider name (`cordon --provider NAME`) to the
// constructor of that sandbox provider, so that the CLI (run, daemon,
// doctor, gc) and the conformance suite name a provider instead of
// building the native one directly.
//
// The release binary registers only the native Linux provider
// ("linux-native"). The test fake ("fake-plain-child", package
// sandbox/fake: a plain child process with no isolation) is registered
// only in the cordon_testhooks build (fake_on.go), so that the suite can
// show it judges providers rather than assuming one.
//
// Plane: CLI (it runs in the trusted cordon process and only constructs
// providers). It must never register a provider that isolates nothing in
// a release build, and never fall back to another provider when the
// named one is unknown or fails to build: the caller gets the error.
package registry
