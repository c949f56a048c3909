//go:build cordon_testhooks

package linux

import (
	"context"
	"fmt"
	"testing"

	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/sandbox"
)

// TestImageDeviceNodeControl is TestImageDeviceNodeInert's positive
// control: with the root's nosuid,nodev left out (test build, layer
// "root-nodev"), the same program holds the image's device node open, and
// the evidence's root fact fails, so the sandbox is not admitted verified.
func TestImageDeviceNodeControl(t *testing.T) {
	requireSandboxes(t)
	dir, st := newStateDir(t)
	p, err := New(Options{StateDir: dir, Store: st, TestSkip: []string{"root-nodev"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, writable := range []bool{false, true} {
		t.Run(fmt.Sprint("writable=", writable), func(t *testing.T) {
			ctx := context.Background()
			root := imageRootWithNode(t)
			s, err := p.Provision(ctx, imageSpec(root, sandbox.Image{UID: 1234, GID: 1234, Writable: writable}, nodeScript))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Deprovision(context.Background()) })
			adm, err := s.Start(ctx)
			if err != nil {
				t.Fatal(err)
			}
			want := map[bool]string{true: "root_writable_idmapped", false: "root_read_only"}[writable]
			for _, f := range adm.Record.Boundaries[evidence.Filesystem].Facts {
				if f.Name == want && f.OK {
					t.Errorf("without nodev the root's fact %s is verified (got %q)", want, f.Got)
				}
			}
			if adm.Verified && adm.Level == sandbox.DedicatedContainer {
				t.Errorf("without nodev the sandbox was admitted DEDICATED_CONTAINER verified")
			}
			if err := s.Exec(ctx); err != nil {
				t.Fatal(err)
			}
			if !heldNode(t, s.(*linuxSandbox)) {
				t.Errorf("without nodev the program could not open the image's device node: nodev is not what denies it")
			}
		})
	}
}
