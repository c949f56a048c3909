package linux

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/sandbox"
)

// TestImageVolumeBind: an engine's volume (Bind.ImageIDs) holds the
// image's ids, and is bound as the image's root is: read from the host's
// disk, what the image's uid 0 writes is owned by 0 and what its uid 1234
// writes by 1234, and DAC still holds (uid 1234 cannot write root's
// directory). The control: the same writable bind without ImageIDs is
// refused, as every writable bind of a root-owned directory is.
func TestImageVolumeBind(t *testing.T) {
	p := newImageProvider(t)
	vol := filepath.Join(t.TempDir(), "vol")
	sub := filepath.Join(vol, "u")
	for _, d := range []string{vol, sub} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(sub, 1234, 1234); err != nil {
		t.Fatal(err)
	}
	spec := func(uid uint32, script string, imageIDs bool) sandbox.Spec {
		s := imageSpec(imageRoot(t, ""), sandbox.Image{UID: uid, GID: uid, Writable: true}, script)
		s.Binds = []sandbox.Bind{{Source: vol, Target: "/data", Writable: true, ImageIDs: imageIDs}}
		return s
	}
	ctx := context.Background()
	if sb, err := p.Provision(ctx, spec(0, "true", false)); err == nil {
		sb.Deprovision(ctx)
		t.Fatal("control: a writable bind of root's directory without ImageIDs was accepted")
	} else if failure.KindOf(err) != failure.KindPolicyRejected || !strings.Contains(err.Error(), "owned by 0:0") {
		t.Fatalf("control: Provision = %v, want the root-owned refusal", err)
	}
	for _, tc := range []struct {
		uid    uint32
		script string
		file   string
	}{
		{0, "echo r > /data/f0", filepath.Join(vol, "f0")},
		{1234, "echo u > /data/u/f1 && ! (echo x > /data/f2) 2>/dev/null", filepath.Join(sub, "f1")},
	} {
		sb, _ := startImageRecord(t, p, spec(tc.uid, tc.script, true))
		if ex, err := sb.Wait(ctx); err != nil || ex.Code != 0 {
			t.Fatalf("uid %d: %+v %v", tc.uid, ex, err)
		}
		wantOwned(t, tc.file, tc.uid, map[uint32]string{0: "r\n", 1234: "u\n"}[tc.uid])
	}
	if _, err := os.Lstat(filepath.Join(vol, "f2")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("uid 1234 wrote into root's directory of the volume: %v", err)
	}
	// Not outside image mode: the ids would be nobody's.
	plain := sandbox.Spec{Argv: []string{"/bin/true"}, Level: sandbox.DedicatedContainer,
		Binds: []sandbox.Bind{{Source: vol, Target: "/data", Writable: true, ImageIDs: true}}}
	if sb, err := p.Provision(ctx, plain); err == nil {
		sb.Deprovision(ctx)
		t.Fatal("ImageIDs outside image mode was accepted")
	} else if failure.KindOf(err) != failure.KindUsage {
		t.Fatalf("Provision(ImageIDs, no image) = %v, want %s", err, failure.KindUsage)
	}
}
