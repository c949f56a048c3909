//go:build cgo

package sbinit

// The sandbox init hardens every OS thread with syscall.AllThreadsSyscall,
// which Go refuses when cgo is enabled. Build with CGO_ENABLED=0.
var _ = cordon_must_be_built_with_CGO_ENABLED_0
