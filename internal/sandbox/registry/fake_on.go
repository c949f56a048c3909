//go:build cordon_testhooks

package registry

import "github.com/cordon-project/cordon/internal/sandbox/fake"

// The test fake: a plain child process, no isolation. Test builds only
// (TestNotInTheBinary, package launch, proves the release binary lacks it).
func init() {
	Register(fake.Name, func(Options) (Provider, error) { return &fake.Provider{}, nil })
}
