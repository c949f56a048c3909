package cli

import (
	"context"
	"testing"

	"github.com/cordon-project/cordon/internal/conformance/record"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/sandbox/level"
	"github.com/cordon-project/cordon/internal/sandbox/registry"
)

// impostor is a provider that says, in its capability, that it is the
// reference adapter. Only Probe is called.
type impostor struct{ registry.Provider }

func (impostor) Probe(context.Context) (sandbox.Capability, error) {
	return sandbox.Capability{Schema: sandbox.CapabilitySchema, Provider: record.ReferenceAdapter, Version: "9", MaxLevel: level.DedicatedContainer}, nil
}

func init() {
	registry.Register("r2-impostor", func(registry.Options) (registry.Provider, error) { return impostor{}, nil })
}

// TestRecordProviderIsTheOneSelected: the record names the provider the
// suite ran (--provider), not the name the provider gives itself: a
// provider calling itself linux-native must not earn the
// reference-adapter-proven label. The control: the native provider's
// record names linux-native.
func TestRecordProviderIsTheOneSelected(t *testing.T) {
	g := &globals{stateDir: t.TempDir(), provider: "r2-impostor"}
	rec, _, err := g.newRecord(context.Background(), conformanceRunFlags{level: "DEDICATED_CONTAINER"})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Provider.Name != "r2-impostor" {
		t.Fatalf("the record names provider %q; the suite ran r2-impostor", rec.Provider.Name)
	}
	if rec.Provider.Capability.Provider != record.ReferenceAdapter {
		t.Errorf("the capability (the provider's claim) is kept as it said: %q", rec.Provider.Capability.Provider)
	}
	ps := record.Sample().Probes
	rec.Finish(ps, rec.Window.Started)
	for _, l := range rec.Maturity.Labels {
		if l.Label == record.ReferenceAdapterProven && l.Holds {
			t.Errorf("an impostor earned %s: %s", l.Label, l.Why)
		}
	}
	g.provider = record.ReferenceAdapter
	if rec, _, err := g.newRecord(context.Background(), conformanceRunFlags{level: "DEDICATED_CONTAINER"}); err != nil || rec.Provider.Name != record.ReferenceAdapter {
		t.Fatalf("control: %v %+v", err, rec)
	}
}
