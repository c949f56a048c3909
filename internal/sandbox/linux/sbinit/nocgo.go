//go:build cgo

package sbinit

// CgoEnabled is true in a cgo build. The sandbox init hardens every OS
// thread with syscall.AllThreadsSyscall, which Go refuses under cgo, so
// such a build fails closed at start: build with CGO_ENABLED=0.
const CgoEnabled = true
