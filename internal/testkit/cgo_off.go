//go:build !cgo

package testkit

const cgoEnabled = false
