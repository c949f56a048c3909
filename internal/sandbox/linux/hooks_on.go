//go:build cordon_testhooks

package linux

// testHooks lets test builds leave out a trusted-side layer (Options.TestSkip)
// for positive controls ("kmem-tcp", "userns-owner"; "gateway-cgroup": the
// gateway joins the sandbox's cgroups, as before it had its own;
// "root-nodev", "bind-nodev": the rootfs's or the binds' trees without
// nosuid,nodev; "root-overlay-idmap": an engine overlay's layers not
// idmapped); the
// production binary never honours it.
const testHooks = true
