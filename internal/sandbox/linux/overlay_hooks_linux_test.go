//go:build cordon_testhooks

package linux

import (
	"context"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/sandbox"
)

// TestImageOverlayIdmapControl is the positive control of the overlay
// root's fact: with the layers left unmapped (test build, layer
// "root-overlay-idmap") the same overlay root shows the image's ids to
// the host, the fact fails naming the owner, and the sandbox is not
// admitted verified.
func TestImageOverlayIdmapControl(t *testing.T) {
	p := skipProvider(t, "root-overlay-idmap")
	l := newEngineOverlay(t, "")
	ctx := context.Background()
	s, err := p.Provision(ctx, imageSpec(l.merged, sandbox.Image{Writable: true}, "true"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Deprovision(context.Background()) })
	adm, err := s.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range adm.Record.Boundaries[evidence.Filesystem].Facts {
		if f.Name == "root_writable_idmapped" {
			found = true
			if f.OK || !strings.Contains(f.Got, "owned by host 0:0") {
				t.Errorf("unmapped layers: root fact OK=%v got %q, want it failed naming host 0:0", f.OK, f.Got)
			}
		}
	}
	if !found {
		t.Fatal("no root_writable_idmapped fact")
	}
	if adm.Verified && adm.Level == sandbox.DedicatedContainer {
		t.Errorf("unmapped overlay layers admitted DEDICATED_CONTAINER verified")
	}
}
