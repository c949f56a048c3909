package cli

import (
	"path/filepath"
	"strings"

	"github.com/cordon-project/cordon/internal/failure"
)

// hostPath makes a host path the caller typed absolute, against the
// current directory, the way a shell user expects (`--workspace .`). It
// is string work only, done as the caller: what the path names is opened
// later without following symlinks (run: the provider; sandbox create:
// openat2 here). "" stays "".
func hostPath(op, flag, p string) (string, error) {
	if p == "" || filepath.IsAbs(p) {
		return p, nil
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", failure.Failf(failure.KindUsage, op, "%s %s: %v", flag, p, err)
	}
	return abs, nil
}

// bindArg splits a --ro/--rw value HOST[:SANDBOX]: HOST may be relative
// (made absolute by hostPath); SANDBOX must be absolute, and is HOST's
// absolute form when left out.
func bindArg(op, flag, v string) (host, target string, err error) {
	host, target, ok := strings.Cut(v, ":")
	if host, err = hostPath(op, flag, host); err != nil {
		return "", "", err
	}
	if !ok {
		target = host
	}
	if host == "" || !filepath.IsAbs(target) {
		return "", "", failure.Failf(failure.KindUsage, op, "%s %s: the SANDBOX path must be absolute (HOST may be relative to this directory)", flag, v)
	}
	return host, target, nil
}
