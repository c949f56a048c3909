package linux

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

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
		s.Binds = []sandbox.Bind{{Source: vol, Target: "/data", Writable: true, ImageIDs: imageIDs, VolumeRoot: filepath.Dir(vol)}}
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

// TestImageVolumeOtherMount: a source below the volume root that is a
// mount of something else — a local volume driver's bind of a host
// directory (`docker volume create -o type=none -o o=bind -o
// device=/etc`), mounted at DATA-ROOT/volumes/NAME/_data by the engine —
// is not the engine's volume: its files are the host's, not the image's.
// The attack: the image's uid 0 writes into it. Observed from the host,
// the root-owned directory behind the mount gets no file of root's: the
// bind is refused as any writable bind of a root-owned directory is. The
// control: the same bind of a volume on the root's own mount is bound
// with the image's ids, and the write lands, owned by 0.
func TestImageVolumeOtherMount(t *testing.T) {
	p := newImageProvider(t)
	root := t.TempDir()    // the operator's --volume-root
	hostDir := t.TempDir() // root's, standing for /etc
	vol := filepath.Join(root, "evil", "_data")
	plain := filepath.Join(root, "plain", "_data")
	for _, d := range []string{vol, plain} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount(hostDir, vol, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind %s at %s: %v", hostDir, vol, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(vol, unix.MNT_DETACH) })
	spec := func(src string) sandbox.Spec {
		s := imageSpec(imageRoot(t, ""), sandbox.Image{Writable: true}, "echo r > /data/f0")
		s.Binds = []sandbox.Bind{{Source: src, Target: "/data", Writable: true, ImageIDs: true, VolumeRoot: root}}
		return s
	}
	ctx := context.Background()
	// Control: the volume on the root's own mount.
	sb, _ := startImageRecord(t, p, spec(plain))
	if ex, err := sb.Wait(ctx); err != nil || ex.Code != 0 {
		t.Fatalf("control: %+v %v", ex, err)
	}
	wantOwned(t, filepath.Join(plain, "f0"), 0, "r\n")
	// The attack: a mount of a host directory below the root.
	s, err := p.Provision(ctx, spec(vol))
	if err == nil {
		t.Cleanup(func() { s.Deprovision(ctx) })
		if _, serr := s.Start(ctx); serr == nil {
			_ = s.Exec(ctx)
			_, _ = s.Wait(ctx)
		}
	}
	if _, serr := os.Lstat(filepath.Join(hostDir, "f0")); serr == nil {
		t.Fatalf("the image's uid 0 wrote a root-owned file into the host directory mounted below the volume root (Provision = %v)", err)
	}
	if failure.KindOf(err) != failure.KindPolicyRejected || !strings.Contains(err.Error(), "owned by 0:0") || !strings.Contains(err.Error(), "mount") {
		t.Fatalf("Provision(a mount below the volume root) = %v, want the root-owned refusal naming the mount", err)
	}
	// Image ids without a volume root, or with the source not strictly
	// below it, are refused: nothing to resolve the source beneath.
	for _, r := range []string{"", "/", plain, hostDir} {
		s := spec(plain)
		s.Binds[0].VolumeRoot = r
		if sb, err := p.Provision(ctx, s); err == nil {
			sb.Deprovision(ctx)
			t.Errorf("ImageIDs with volume root %q for %s was accepted", r, plain)
		} else if failure.KindOf(err) != failure.KindUsage {
			t.Errorf("ImageIDs with volume root %q: %v, want %s", r, err, failure.KindUsage)
		}
	}
}

// TestImageVolumeFile: below a volume root an engine keeps its volumes as
// directories; a regular file there is the engine's own (Docker's
// volumes/metadata.db, which names what each volume mounts; kubelet's
// vol_data.json), not a volume the image filled. The attack: a bind of
// such a root-owned file writable, with image ids, and the image's uid 0
// rewrites it. Read from the host, the file is unchanged: the bind is
// refused as any writable bind of a root-owned file is. The control: a
// volume directory next to it is bound with image ids and written.
func TestImageVolumeFile(t *testing.T) {
	p := newImageProvider(t)
	root := t.TempDir()
	meta := filepath.Join(root, "metadata.db")
	dir := filepath.Join(root, "v", "_data")
	if err := os.WriteFile(meta, []byte("engine\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	spec := func(src, target, script string) sandbox.Spec {
		s := imageSpec(imageRoot(t, ""), sandbox.Image{Writable: true}, script)
		s.Binds = []sandbox.Bind{{Source: src, Target: target, Writable: true, ImageIDs: true, VolumeRoot: root}}
		return s
	}
	ctx := context.Background()
	sb, _ := startImageRecord(t, p, spec(dir, "/data", "echo r > /data/f0"))
	if ex, err := sb.Wait(ctx); err != nil || ex.Code != 0 {
		t.Fatalf("control: %+v %v", ex, err)
	}
	wantOwned(t, filepath.Join(dir, "f0"), 0, "r\n")
	s, err := p.Provision(ctx, spec(meta, "/meta", "echo tenant > /meta"))
	if err == nil {
		t.Cleanup(func() { s.Deprovision(ctx) })
		_, serr := s.Start(ctx)
		if serr == nil {
			serr = s.Exec(ctx)
		}
		ex, werr := s.Wait(ctx)
		t.Logf("attack: start/exec %v, wait %+v %v", serr, ex, werr)
	}
	if b, rerr := os.ReadFile(meta); rerr != nil || string(b) != "engine\n" {
		t.Fatalf("the engine's root-owned file below the volume root reads %q, %v after the image's uid 0 wrote it (Provision = %v)", b, rerr, err)
	}
	if failure.KindOf(err) != failure.KindPolicyRejected || !strings.Contains(err.Error(), "owned by 0:0") {
		t.Fatalf("Provision(a root-owned file below the volume root) = %v, want the root-owned refusal", err)
	}
}

// TestImageVolumeSetID: what the image's uid 0 leaves in a volume is
// root's on the host, so it must leave no setuid or setgid file there.
// The attempts (chmod u+s and g+s on a file of its own, mkdir with the
// setgid bit, a setuid file installed with mode 4755) fail, and read from
// the host no file of the volume carries either bit. The controls: a
// plain chmod 0751 of another copy lands; and with the seccomp filter
// left out (test build, TestImageVolumeSetIDControl) the same attempts
// leave set-id files of root's, so the filter is what denies them.
func TestImageVolumeSetID(t *testing.T) {
	if got := volumeSetID(t, newImageProvider(t)); len(got) > 0 {
		t.Errorf("the image's uid 0 left set-id files of root's in the volume, read from the host: %v", got)
	}
}

// volumeSetID runs the set-id attempts in a volume under p and returns
// the set-id files found on the host after them.
func volumeSetID(t *testing.T, p *Provider) []string {
	t.Helper()
	root := t.TempDir()
	vol := filepath.Join(root, "v", "_data")
	if err := os.MkdirAll(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	script := "cp /bin/busybox /data/plain && chmod 0751 /data/plain && cp /bin/busybox /data/sh && " +
		"{ chmod 4755 /data/sh; chmod u+s /data/sh; chmod g+s /data/sh; mkdir -m 2755 /data/d; " +
		"/bin/busybox install -m 4755 /bin/busybox /data/inst; true; } 2>/dev/null"
	spec := imageSpec(imageRoot(t, ""), sandbox.Image{Writable: true}, script)
	spec.Binds = []sandbox.Bind{{Source: vol, Target: "/data", Writable: true, ImageIDs: true, VolumeRoot: root}}
	// The level is not what is tested here (TestImageIdentity and the
	// evidence tests do): the control without seccomp is admitted lower.
	spec.Level = sandbox.DomainIsolated
	ctx := context.Background()
	s, err := p.Provision(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Deprovision(context.Background()) })
	if _, err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if ex, err := s.Wait(ctx); err != nil || ex.Code != 0 {
		t.Fatalf("%+v %v", ex, err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(vol, "plain"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != 0 || st.Mode&0o777 != 0o751 {
		t.Fatalf("control: the copy is %d mode %o on the host, want root's with 0751", st.Uid, st.Mode&0o7777)
	}
	var found []string
	err = filepath.Walk(vol, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
			found = append(found, p+" "+fi.Mode().String())
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}
