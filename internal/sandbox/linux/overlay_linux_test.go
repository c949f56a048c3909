package linux

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/sandbox"
)

// engineLayers is an engine's overlay as Docker's overlay2 makes one: two
// lower layers (the image), an upper and a work directory side by side,
// mounted with the legacy lowerdir list at merged.
type engineLayers struct {
	lower, lower2, upper, work, merged string
}

func (l engineLayers) remount(t *testing.T) {
	t.Helper()
	if err := unix.Unmount(l.merged, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	opts := fmt.Sprintf("lowerdir=%s:%s,upperdir=%s,workdir=%s", l.lower2, l.lower, l.upper, l.work)
	if err := unix.Mount("overlay", l.merged, "overlay", 0, opts); err != nil {
		t.Fatal(err)
	}
}

func newEngineOverlay(t *testing.T, extra string) engineLayers {
	t.Helper()
	base := t.TempDir()
	l := engineLayers{lower: imageRoot(t, base), lower2: filepath.Join(base, "layer2"),
		upper: filepath.Join(base, "snap", "diff"), work: filepath.Join(base, "snap", "work"), merged: filepath.Join(base, "merged")}
	for _, d := range []string{filepath.Join(l.lower2, "etc"), l.upper, l.work, l.merged} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, dir := range map[string]string{"base": l.lower, "gone": l.lower, "layer2": l.lower2} {
		if err := os.WriteFile(filepath.Join(dir, "etc", name), []byte(name+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	opts := fmt.Sprintf("lowerdir=%s:%s,upperdir=%s,workdir=%s%s", l.lower2, l.lower, l.upper, l.work, extra)
	if err := unix.Mount("overlay", l.merged, "overlay", 0, opts); err != nil {
		t.Fatalf("mount the engine's overlay (%s): %v", opts, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(l.merged, unix.MNT_DETACH) })
	return l
}

// TestImageOverlayRoot: an image whose root is an engine's overlay runs on
// cordon's own overlay of the same layers, idmapped. Read from the host:
// the evidence's root fact (an overlay, its entries owned by the lease),
// and the engine's upper layer on disk — what the program wrote is stored
// with the image's ids (0, and 1234), a deleted lower file is a whiteout,
// the lower layers are untouched.
func TestImageOverlayRoot(t *testing.T) {
	p := newImageProvider(t)
	l := newEngineOverlay(t, ",index=off")
	script := "cat /etc/layer2 /etc/base >/dev/null && echo new > /etc/new && echo more >> /etc/base && rm /etc/gone"
	sb, rec := startImageRecord(t, p, imageSpec(l.merged, sandbox.Image{Writable: true}, script))
	if ex, err := sb.Wait(context.Background()); err != nil || ex.Code != 0 {
		t.Fatalf("program: %+v %v (uid 0 reads both layers, writes /etc)", ex, err)
	}
	if !hasFact(rec, evidence.Filesystem, "root_writable_idmapped") {
		t.Fatalf("root fact not verified: %v", failedFacts(rec))
	}
	for _, f := range rec.Boundaries[evidence.Filesystem].Facts {
		if f.Name == "root_writable_idmapped" && !strings.HasPrefix(f.Got, "overlay ") {
			t.Errorf("the root fact read %q, want cordon's overlay", f.Got)
		}
	}
	wantOwned(t, filepath.Join(l.upper, "etc", "new"), 0, "new\n")
	wantOwned(t, filepath.Join(l.upper, "etc", "base"), 0, "base\nmore\n")
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(l.upper, "etc", "gone"), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Errorf("upper etc/gone: %+v %v, want a whiteout (char 0:0)", st, err)
	}
	if b, err := os.ReadFile(filepath.Join(l.lower, "etc", "base")); err != nil || string(b) != "base\n" {
		t.Errorf("lower layer changed: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(l.lower, "etc", "gone")); err != nil {
		t.Errorf("lower layer lost etc/gone: %v", err)
	}

	// The image's uid 1234 owns /work in the lower layer: its write is
	// stored as 1234 in the upper layer. The engine mounts a container's
	// root afresh for each start; so does this test (a mount left up
	// keeps its own cached view of what the other overlay changed).
	l.remount(t)
	sb2, _ := startImageRecord(t, p, imageSpec(l.merged, sandbox.Image{UID: 1234, GID: 1234, Writable: true}, "echo w > /work/f"))
	if ex, err := sb2.Wait(context.Background()); err != nil || ex.Code != 0 {
		t.Fatalf("uid 1234: %+v %v", ex, err)
	}
	wantOwned(t, filepath.Join(l.upper, "work", "f"), 1234, "w\n")
}

func wantOwned(t *testing.T, path string, id uint32, content string) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Errorf("%s: %v", path, err)
		return
	}
	if st.Uid != id || st.Gid != id {
		t.Errorf("%s owned by %d:%d on disk, want %d:%d (the image's ids)", path, st.Uid, st.Gid, id, id)
	}
	if b, _ := os.ReadFile(path); string(b) != content {
		t.Errorf("%s holds %q, want %q", path, b, content)
	}
}

// TestImageOverlayRootReadOnly: a read-only image root over an engine's
// overlay: the write is refused and nothing reaches the upper layer.
func TestImageOverlayRootReadOnly(t *testing.T) {
	p := newImageProvider(t)
	l := newEngineOverlay(t, "")
	sb, rec := startImageRecord(t, p, imageSpec(l.merged, sandbox.Image{}, "cat /etc/layer2 && echo x > /etc/new"))
	ex, err := sb.Wait(context.Background())
	if err != nil || ex.Code == 0 {
		t.Fatalf("program: %+v %v, want the write refused", ex, err)
	}
	if _, err := os.Lstat(filepath.Join(l.upper, "etc", "new")); err == nil {
		t.Errorf("a read-only root's write reached the upper layer")
	}
	if !hasFact(rec, evidence.Filesystem, "root_read_only") {
		t.Errorf("root fact not verified: %v", failedFacts(rec))
	}
}

// TestImageOverlayRootRefusals: what cordon cannot read back from an
// engine's overlay it refuses, by name, before any sandbox exists.
func TestImageOverlayRootRefusals(t *testing.T) {
	p := newImageProvider(t)
	provision := func(root string, img sandbox.Image) error {
		sb, err := p.Provision(context.Background(), imageSpec(root, img, "true"))
		if err == nil {
			sb.Deprovision(context.Background())
		}
		return err
	}
	t.Run("index=on", func(t *testing.T) {
		l := newEngineOverlay(t, ",index=on")
		err := provision(l.merged, sandbox.Image{Writable: true})
		if failure.KindOf(err) != failure.KindUnsupported || !strings.Contains(fmt.Sprint(err), "index=on") {
			t.Fatalf("Provision = %v, want %s naming index=on", err, failure.KindUnsupported)
		}
	})
	t.Run("subdirectory", func(t *testing.T) {
		l := newEngineOverlay(t, "")
		err := provision(filepath.Join(l.merged, "etc"), sandbox.Image{})
		if failure.KindOf(err) != failure.KindUnsupported || !strings.Contains(fmt.Sprint(err), "not its root") {
			t.Fatalf("Provision = %v, want %s: a directory inside an overlay", err, failure.KindUnsupported)
		}
	})
	// A bind mount of a directory inside the engine's overlay is the root
	// of a mount of its own (statx says so) on the same superblock: its
	// mount table line lists the whole overlay's layers. Refused as a
	// directory inside an overlay, not rebuilt as the whole overlay.
	t.Run("bind-of-subdirectory", func(t *testing.T) {
		l := newEngineOverlay(t, "")
		bound := filepath.Join(t.TempDir(), "etc")
		if err := os.Mkdir(bound, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount(filepath.Join(l.merged, "etc"), bound, "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Unmount(bound, unix.MNT_DETACH) })
		err := provision(bound, sandbox.Image{})
		if failure.KindOf(err) != failure.KindUnsupported || !strings.Contains(fmt.Sprint(err), "not its root") {
			t.Fatalf("Provision = %v, want %s: a bind of a directory inside an overlay", err, failure.KindUnsupported)
		}
	})
	t.Run("read-only-engine-mount", func(t *testing.T) { overlayReadOnlyEngine(t, provision) })
	t.Run("escaped-upperdir", func(t *testing.T) { overlayEscapedUpperdir(t, provision) })
	t.Run("upper-renamed", func(t *testing.T) { overlayUpperRenamed(t, provision) })
	t.Run("new-mount-api", func(t *testing.T) {
		root := newAPIOverlay(t)
		err := provision(root, sandbox.Image{})
		if failure.KindOf(err) != failure.KindUnsupported || !strings.Contains(fmt.Sprint(err), "lowerdir+") {
			t.Fatalf("Provision = %v, want %s naming lowerdir+", err, failure.KindUnsupported)
		}
	})
}

// newAPIOverlay mounts a read-only overlay made with the new mount API
// (layers by descriptor): its mount table line says lowerdir+=/.
func newAPIOverlay(t *testing.T) string {
	t.Helper()
	base := t.TempDir()
	lower := imageRoot(t, base)
	merged := filepath.Join(base, "merged")
	if err := os.Mkdir(merged, 0o755); err != nil {
		t.Fatal(err)
	}
	second := filepath.Join(base, "layer2")
	if err := os.Mkdir(second, 0o755); err != nil {
		t.Fatal(err)
	}
	o := overlayOpts{Lower: []string{second, lower}}
	layers, err := openOverlayLayers(o, "/nonexistent-state", -1)
	if err != nil {
		t.Fatal(err)
	}
	defer layers.close()
	m, err := mountOverlay(o, layers, 0, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(m)
	if err := unix.MoveMount(m, "", unix.AT_FDCWD, merged, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(merged, unix.MNT_DETACH) })
	return merged
}

// engineRoot opens the engine's merged root as the provider does.
func engineRoot(t *testing.T, l engineLayers) *hostPath {
	t.Helper()
	fd, err := openNoFollow(l.merged)
	if err != nil {
		t.Fatal(err)
	}
	h := &hostPath{fd: fd, path: l.merged}
	t.Cleanup(h.close)
	return h
}

// sameViewOf builds cordon's overlay of o (unmapped) and compares it
// with the engine's root.
func sameViewOf(t *testing.T, engine *hostPath, o overlayOpts) error {
	t.Helper()
	layers, err := openOverlayLayers(o, "/nonexistent-state", -1)
	if err != nil {
		t.Fatal(err)
	}
	defer layers.close()
	m, err := mountOverlay(o, layers, 0, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(m)
	return sameView(engine, m)
}

// TestOverlaySameView is sameView's positive control: cordon's overlay of
// the engine's layers passes; the same overlay over another upper layer
// (an empty directory: what a misread path could name) or without a
// lower layer is refused.
func TestOverlaySameView(t *testing.T) {
	requireSandboxes(t)
	l := newEngineOverlay(t, "")
	if err := os.WriteFile(filepath.Join(l.merged, "etc", "engine-wrote"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	engine := engineRoot(t, l)
	other := t.TempDir()
	for _, d := range []string{"diff", "work"} {
		if err := os.Mkdir(filepath.Join(other, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		o    overlayOpts
		same bool
	}{
		{"the engine's layers", overlayOpts{Lower: []string{l.lower2, l.lower}, Upper: l.upper, Work: l.work}, true},
		{"another upper", overlayOpts{Lower: []string{l.lower2, l.lower}, Upper: filepath.Join(other, "diff"), Work: filepath.Join(other, "work")}, false},
		{"a lower missing", overlayOpts{Lower: []string{l.lower}, Upper: l.upper, Work: l.work}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := sameViewOf(t, engine, tc.o)
			if tc.same && err != nil {
				t.Fatalf("sameView = %v, want the same tree", err)
			}
			if !tc.same && (err == nil || !strings.Contains(err.Error(), "does not show the engine's tree")) {
				t.Fatalf("sameView = %v, want the difference named", err)
			}
		})
	}
}

// TestOverlayCreatorCredsRestored: the overlay is created with the
// lease's filesystem ids and raised capabilities on a locked thread; no
// thread of the process keeps them afterwards. A locked goroutine that
// exits on the main thread does not end it (Go parks the main thread for
// good), so "the thread ends with its goroutine" alone would leave the
// process's main thread with the lease's ids: the thread's own
// credentials must be given back before the goroutine reports.
func TestOverlayCreatorCredsRestored(t *testing.T) {
	requireSandboxes(t)
	base := t.TempDir()
	for _, d := range []string{"lower/etc", "snap/diff", "snap/work"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	o := overlayOpts{Lower: []string{filepath.Join(base, "lower")}, Upper: filepath.Join(base, "snap", "diff"), Work: filepath.Join(base, "snap", "work")}
	const creator = 1234567
	// Many creations: each may land on any thread, the main one included.
	for range 64 {
		l, err := openOverlayLayers(o, "/nonexistent-state", -1)
		if err != nil {
			t.Fatal(err)
		}
		m, err := mountOverlay(o, l, creator, creator, true)
		l.close()
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(m)
	}
	// The positive control: the overlay was created as the creator (its
	// work directory is the creator's), so the ids were set.
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(o.Work, "work"), &st); err != nil || st.Uid != creator || st.Gid != creator {
		t.Fatalf("work/work: %+v %v, want it made by %d:%d", st, err, creator, creator)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join("/proc/self/task", task.Name(), "status"))
		if err != nil {
			continue // the thread has exited
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) == 5 && (f[0] == "Uid:" || f[0] == "Gid:") && f[4] != "0" {
				t.Errorf("thread %s (process %d) kept filesystem id %s: %q", task.Name(), os.Getpid(), f[4], line)
			}
		}
	}
}

// TestOverlaySameViewLargeDirectory: what a container wrote may make a
// top-level directory of its root larger than sameView reads; the next
// start of the same container (the same layers) must still pass, and
// another upper layer is still refused.
func TestOverlaySameViewLargeDirectory(t *testing.T) {
	requireSandboxes(t)
	l := newEngineOverlay(t, "")
	data := filepath.Join(l.upper, "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range viewBudget*4 + 10 {
		f, err := os.Create(filepath.Join(data, fmt.Sprintf("f%05d", i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	l.remount(t)
	engine := engineRoot(t, l)
	other := t.TempDir()
	for _, d := range []string{"diff/data", "work"} {
		if err := os.MkdirAll(filepath.Join(other, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name  string
		upper string
		same  bool
	}{
		{"the engine's layers", l.upper, true},
		{"another upper", filepath.Join(other, "diff"), false},
	} {
		o := overlayOpts{Lower: []string{l.lower2, l.lower}, Upper: tc.upper, Work: filepath.Join(filepath.Dir(tc.upper), "work")}
		err := sameViewOf(t, engine, o)
		if tc.same && err != nil {
			t.Errorf("%s: sameView = %v, want the same tree", tc.name, err)
		}
		if !tc.same && (err == nil || !strings.Contains(err.Error(), "does not show the engine's tree")) {
			t.Errorf("%s: sameView = %v, want the difference named", tc.name, err)
		}
	}
}

// overlayEscapedUpperdir: overlayfs unescapes upperdir as it does
// lowerdir — "u\b" names the directory ub — and the mount table shows
// u\134b. Read literally it names a decoy directory "u\b" beside it.
func overlayEscapedUpperdir(t *testing.T, provision func(string, sandbox.Image) error) {
	base := t.TempDir()
	lower := imageRoot(t, base)
	for _, d := range []string{"ub", `u\b`, "work", "merged"} {
		if err := os.Mkdir(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	merged := filepath.Join(base, "merged")
	opts := fmt.Sprintf(`lowerdir=%s,upperdir=%s/u\b,workdir=%s/work`, lower, base, base)
	if err := unix.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(merged, unix.MNT_DETACH) })
	if err := os.WriteFile(filepath.Join(merged, "etc", "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(base, "ub", "etc", "x")); err != nil {
		t.Fatalf("the kernel's upper layer is not ub: %v", err)
	}
	err := provision(merged, sandbox.Image{Writable: true})
	if failure.KindOf(err) != failure.KindUnsupported || !strings.Contains(fmt.Sprint(err), "escaped characters") {
		t.Fatalf("Provision = %v, want %s naming the escaped upperdir", err, failure.KindUnsupported)
	}
}

// overlayUpperRenamed: the upper layer's path names another directory
// by the time cordon reads it (a link on the way retargeted): cordon
// must not mount a writable overlay there — overlayfs empties its work
// directory's work/ at mount — before it sees the tree differs.
func overlayUpperRenamed(t *testing.T, provision func(string, sandbox.Image) error) {
	base := t.TempDir()
	lower := imageRoot(t, base)
	for _, d := range []string{"snapA/diff", "snapA/work", "snapB/diff", "snapB/work/work/keep", "merged"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link, merged := filepath.Join(base, "snap"), filepath.Join(base, "merged")
	if err := os.Symlink("snapA", link); err != nil {
		t.Fatal(err)
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s/diff,workdir=%s/work", lower, link, link)
	if err := unix.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(merged, unix.MNT_DETACH) })
	if err := errors.Join(os.Remove(link), os.Symlink("snapB", link)); err != nil {
		t.Fatal(err)
	}
	err := provision(merged, sandbox.Image{Writable: true})
	if failure.KindOf(err) != failure.KindUnsupported || !strings.Contains(fmt.Sprint(err), "is not the engine's upper layer") {
		t.Errorf("Provision = %v, want %s: another upper layer", err, failure.KindUnsupported)
	}
	if _, err := os.Stat(filepath.Join(base, "snapB/work/work/keep")); err != nil {
		t.Errorf("a work directory the engine never named was changed: %v", err)
	}
}

// TestOverlayCreatorKeepsParentDeathSignal: the kernel clears a thread's
// parent-death signal whenever its filesystem ids change, and the
// overlay's creation changes them twice. On the main thread that signal
// is the one cordon's own parent armed: it must survive. (The creation
// here has no layers, so the kernel refuses it; the ids change around it
// all the same.)
func TestOverlayCreatorKeepsParentDeathSignal(t *testing.T) {
	requireSandboxes(t)
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: this thread's signal is the test's
		done <- creatorKeepsPdeathsig()
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func creatorKeepsPdeathsig() error {
	get := func() int {
		var sig int32
		_ = unix.Prctl(unix.PR_GET_PDEATHSIG, uintptr(unsafe.Pointer(&sig)), 0, 0, 0)
		return int(sig)
	}
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGURG), 0, 0, 0); err != nil || get() != int(unix.SIGURG) {
		return fmt.Errorf("arm the parent-death signal: %v (%d)", err, get())
	}
	fs, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return err
	}
	defer unix.Close(fs)
	if err := createLocked(fs, 1234567, 1234567); err == nil || errors.Is(err, errThreadTainted) {
		return fmt.Errorf("createLocked = %v, want the kernel's refusal of an overlay without layers", err)
	}
	if sig := get(); sig != int(unix.SIGURG) {
		return fmt.Errorf("parent-death signal %d after the overlay's creation, want %d", sig, unix.SIGURG)
	}
	return nil
}

// overlayReadOnlyEngine: the engine's overlay is read-only — its mount
// (a read-only bind remount) or its superblock (mounted ro) — and the
// root is asked writable. A plain root's clone keeps its mount's
// read-only flag; cordon's own overlay would not, and would write in an
// upper layer the engine mounted read-only: refused.
func overlayReadOnlyEngine(t *testing.T, provision func(string, sandbox.Image) error) {
	for _, how := range []string{"mount", "superblock"} {
		l := newEngineOverlay(t, "")
		var err error
		if how == "mount" {
			err = unix.Mount("", l.merged, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, "")
		} else {
			err = unix.Mount("", l.merged, "", unix.MS_REMOUNT|unix.MS_RDONLY, "")
		}
		if err != nil {
			t.Fatalf("%s: make the engine's overlay read-only: %v", how, err)
		}
		err = provision(l.merged, sandbox.Image{Writable: true})
		if failure.KindOf(err) != failure.KindUnsupported || !strings.Contains(fmt.Sprint(err), "mounted read-only") {
			t.Errorf("%s read-only: Provision = %v, want %s naming the read-only engine overlay", how, err, failure.KindUnsupported)
		}
		if err := provision(l.merged, sandbox.Image{}); err != nil {
			t.Errorf("%s read-only, root read-only: Provision = %v, want it to work", how, err)
		}
	}
}

// TestImageOverlayRootNoexec: an engine overlay mounted noexec stays so in
// cordon's overlay (a plain root's clone keeps its mount's flags): the
// image's program cannot be executed from it. The control: the same
// overlay without noexec runs it.
func TestImageOverlayRootNoexec(t *testing.T) {
	p := newImageProvider(t)
	ctx := context.Background()
	for _, noexec := range []bool{true, false} {
		l := newEngineOverlay(t, "")
		if noexec {
			if err := unix.Mount("", l.merged, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_NOEXEC, ""); err != nil {
				t.Fatal(err)
			}
		}
		s, err := p.Provision(ctx, imageSpec(l.merged, sandbox.Image{Writable: true}, "true"))
		if err != nil {
			t.Fatal(err)
		}
		ran := false
		if _, err := s.Start(ctx); err == nil && s.Exec(ctx) == nil {
			ex, err := s.Wait(ctx)
			ran = err == nil && ex.Code == 0
		}
		s.Deprovision(ctx)
		if ran == noexec {
			t.Errorf("engine overlay noexec %v: the program ran %v", noexec, ran)
		}
	}
}

// TestImageOverlayRootOwnSockets: a socket an earlier run of the
// container left in its upper layer (a database's after an unclean stop)
// does not refuse the next start; the control: the same socket in a
// lower layer does, naming it.
func TestImageOverlayRootOwnSockets(t *testing.T) {
	p := newImageProvider(t)
	for _, inUpper := range []bool{true, false} {
		t.Run(fmt.Sprint("upper=", inUpper), func(t *testing.T) {
			l := newEngineOverlay(t, "")
			dir := filepath.Join(l.lower, "etc")
			if inUpper {
				dir = filepath.Join(l.upper, "etc")
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			leaveSocket(t, filepath.Join(dir, "db.sock"))
			l.remount(t) // the engine's mount at the next start
			sb, err := p.Provision(context.Background(), imageSpec(l.merged, sandbox.Image{Writable: true}, "true"))
			if err == nil {
				sb.Deprovision(context.Background())
			}
			if inUpper && err != nil {
				t.Fatalf("a socket the container left in its upper layer refused the start: %v", err)
			}
			if !inUpper && (failure.KindOf(err) != failure.KindPolicyRejected || !strings.Contains(fmt.Sprint(err), "db.sock")) {
				t.Fatalf("control: a socket in a lower layer: %v, want a refusal naming it", err)
			}
		})
	}
}

// leaveSocket binds a Unix socket at path and closes it: the file stays,
// nothing listens.
func leaveSocket(t *testing.T, path string) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
}
