package registry_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/sandbox/registry"
)

// A release build (no cordon_testhooks tag) knows only the native
// provider; an unknown name is a usage error that names the known ones.
func TestRegistryReleaseBuild(t *testing.T) {
	if !slices.Contains(registry.Names(), registry.Default) {
		t.Fatalf("the default provider %s is not registered: %v", registry.Default, registry.Names())
	}
	if testHooks {
		if !slices.Contains(registry.Names(), "fake-plain-child") {
			t.Fatalf("a test build lacks the fake: %v", registry.Names())
		}
	} else if got := registry.Names(); !slices.Equal(got, []string{registry.Default}) {
		t.Fatalf("a release build registers %v, want only %s", got, registry.Default)
	}
	err := registry.Known("bogus")
	if failure.KindOf(err) != failure.KindUsage || !strings.Contains(err.Error(), registry.Default) {
		t.Fatalf("Known(bogus) = %v, want a usage error naming %s", err, registry.Default)
	}
	if _, err := registry.New("bogus", registry.Options{}); failure.KindOf(err) != failure.KindUsage {
		t.Fatalf("New(bogus) = %v, want a usage error", err)
	}
	if err := registry.Known(registry.Default); err != nil {
		t.Fatal(err)
	}
}
