//go:build !linux || !(amd64 || arm64)

package filter

import (
	"errors"
	"fmt"
	"runtime"
)

// Build fails closed: there are no tables for this platform, and a sandbox
// must not start without its filter.
func Build() (*Program, error) {
	return nil, fmt.Errorf("seccomp filter for %s/%s: %w", runtime.GOOS, runtime.GOARCH, errors.ErrUnsupported)
}

// Denied returns nil: no filter exists for this platform.
func Denied() []string { return nil }

// BuildBroker fails closed like Build.
func BuildBroker() (*Program, error) {
	return nil, fmt.Errorf("broker seccomp filter for %s/%s: %w", runtime.GOOS, runtime.GOARCH, errors.ErrUnsupported)
}

// BuildSocketSource fails closed like Build.
func BuildSocketSource() (*Program, error) {
	return nil, fmt.Errorf("socket source seccomp filter for %s/%s: %w", runtime.GOOS, runtime.GOARCH, errors.ErrUnsupported)
}
