//go:build !linux

package store

// Self is unavailable off Linux: there is no /proc to identify a process by.
func Self() (Owner, error) { return Owner{}, ErrUnsupported }

// Alive cannot prove an owner gone off Linux, so it always reports true and
// no lease is ever reclaimed by liveness.
func Alive(o Owner) bool { return true }
