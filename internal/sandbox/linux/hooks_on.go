//go:build cordon_testhooks

package linux

// testHooks lets a test build honour Options.TestSkip on the trusted side
// too ("gateway-cgroup": the gateway joins the sandbox's cgroups, as
// before it had its own), for positive controls. The production binary
// never does.
const testHooks = true
