//go:build !cgo

package sbinit

// CgoEnabled is false in the supported build (CGO_ENABLED=0).
const CgoEnabled = false
