//go:build !linux

package filter

import (
	"errors"
	"fmt"
	"runtime"
)

// Install fails: seccomp exists only on Linux.
func Install(p *Program) error {
	return fmt.Errorf("install seccomp filter on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}
