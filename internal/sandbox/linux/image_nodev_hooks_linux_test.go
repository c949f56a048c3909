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
	p := skipProvider(t, "root-nodev")
	for _, writable := range []bool{false, true} {
		t.Run(fmt.Sprint("writable=", writable), func(t *testing.T) {
			ctx := context.Background()
			root := imageRootWithNode(t)
			s, err := p.Provision(ctx, imageSpec(root, sandbox.Image{UID: 1234, GID: 1234, Writable: writable}, nodeScript(imageNode)))
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
			if !heldNode(t, s.(*linuxSandbox), imageNode) {
				t.Errorf("without nodev the program could not open the image's device node: nodev is not what denies it")
			}
		})
	}
}

// TestBindDeviceNodeControl: with the binds' nosuid,nodev left out (test
// build, layer "bind-nodev"), the bound device node opens and the
// mounts_nodev fact fails: the fact and the denial are the binds' nodev.
func TestBindDeviceNodeControl(t *testing.T) {
	p := skipProvider(t, "bind-nodev")
	ctx := context.Background()
	spec := imageSpec(imageRoot(t, ""), sandbox.Image{UID: 1234, GID: 1234}, nodeScript("/work/null"))
	spec.Binds = []sandbox.Bind{bindWithNode(t)}
	s, err := p.Provision(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Deprovision(context.Background()) })
	adm, err := s.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if hasFact(adm.Record, evidence.Filesystem, "mounts_nodev") || (adm.Verified && adm.Level == sandbox.DedicatedContainer) {
		t.Errorf("without the binds' nodev: mounts_nodev verified or the sandbox admitted verified (%v, verified %v)", adm.Level, adm.Verified)
	}
	if err := s.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if !heldNode(t, s.(*linuxSandbox), "/work/null") {
		t.Errorf("without the binds' nodev the program could not open the bound device node: nodev is not what denies it")
	}
}

// skipProvider is a provider of the test build that leaves out layer
// (Options.TestSkip): the positive controls' provider.
func skipProvider(t *testing.T, layer string) *Provider {
	t.Helper()
	requireSandboxes(t)
	dir, st := newStateDir(t)
	p, err := New(Options{StateDir: dir, Store: st, TestSkip: []string{layer}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestImageVolumeSetIDControl is TestImageVolumeSetID's positive control:
// with the seccomp filter left out (test build, layer "seccomp") the
// image's uid 0 does leave set-id files of root's in the volume.
func TestImageVolumeSetIDControl(t *testing.T) {
	if got := volumeSetID(t, skipProvider(t, "seccomp")); len(got) == 0 {
		t.Error("without the seccomp filter no set-id file was left: the attempts do not reach the kernel's own checks")
	}
}
