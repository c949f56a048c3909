package config

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
)

// CheckLeaks refuses a run that would hand a custodied secret to the
// sandbox directly: a secret file whose host path (literal, or with its
// symbolic links resolved) is visible inside the sandbox, or a sandbox
// environment entry ("K=V", from --env) that equals or contains a resolved
// secret value. visible reports whether a host path lies under a bind;
// secrets maps names to resolved values (package custody). The error is a
// *LeakError, or several joined; it names the secret and the variable or
// path, never the value.
func (c *Config) CheckLeaks(visible func(hostPath string) bool, sandboxEnv []string, secrets map[string][]byte) error {
	var errs []error
	for _, name := range sortedKeys(c.Secrets) {
		f := c.Secrets[name].File
		if f == "" || visible == nil {
			continue
		}
		leak := visible(f)
		if real, err := filepath.EvalSymlinks(f); err == nil && real != f {
			leak = leak || visible(real)
		}
		if leak {
			errs = append(errs, &LeakError{Secret: name, Path: f})
		}
	}
	for _, kv := range sandboxEnv {
		key, _, _ := strings.Cut(kv, "=")
		for _, name := range sortedKeys(secrets) {
			v := secrets[name]
			if len(v) > 0 && bytes.Contains([]byte(kv), v) {
				errs = append(errs, &LeakError{Secret: name, EnvKey: key})
			}
		}
	}
	return errors.Join(errs...)
}
