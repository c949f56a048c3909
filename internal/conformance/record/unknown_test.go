package record

import (
	"testing"

	"github.com/cordon-project/cordon/internal/attest"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/sandbox/level"
)

// TestUnknownCapabilityVerifies: when the provider's probe fails the
// runner records a capability of level UNKNOWN (it claims nothing); that
// record signs and is logged, so it must decode like any other, not be
// refused by every verifier as "unknown level".
func TestUnknownCapabilityVerifies(t *testing.T) {
	r := Sample()
	r.Provider.Capability = sandbox.Capability{Schema: sandbox.CapabilitySchema, Provider: "linux-native", Missing: []string{"probe: broken"}}
	r.Finish(r.Probes, r.Window.Finished)
	k, pub := testKey(t)
	env, err := Sign(r, k)
	if err != nil {
		t.Fatal(err)
	}
	st, err := attest.Verify(env, pub)
	if err != nil {
		t.Fatal(err)
	}
	got, err := FromStatement(st)
	if err != nil || got.Claim.Admitted != NoClaim || got.Provider.Capability.MaxLevel != level.LevelUnknown {
		t.Fatalf("err %v", err)
	}
}
