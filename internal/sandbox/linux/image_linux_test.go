package linux

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/setns"
	"github.com/cordon-project/cordon/internal/testkit"
)

// These tests run an image's program (Spec.Image) in real sandboxes. The
// image is a tiny root built here: Debian's static busybox (package
// busybox-static, installed by scripts/test.sh) and the directories the
// init mounts on. Every judgement reads the host: /proc/<host pid> of the
// program, the rootfs directory on the host's disk, the sandbox's root
// through /proc/<init>/root.

const busybox = "/bin/busybox"

// imageRoot builds a root filesystem in a fresh host directory.
func imageRoot(t *testing.T, base string) string {
	t.Helper()
	fi, err := os.Stat(busybox)
	if err != nil || fi.Size() < 1<<20 {
		testkit.Unavailable(t, "needs a static busybox at %s (apt-get install busybox-static): %v", busybox, err)
	}
	if base == "" {
		base = t.TempDir()
	}
	root := filepath.Join(base, "rootfs")
	for _, d := range []string{"bin", "proc", "dev", "tmp", "etc", "sys", "work", "scratch"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(busybox)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "busybox"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	// /work belongs to the image's uid 1234 (as a layer would store it).
	if err := os.Chown(filepath.Join(root, "work"), 1234, 1234); err != nil {
		t.Fatal(err)
	}
	return root
}

// imageSpec is a spec running argv (a busybox applet) from root.
func imageSpec(root string, img sandbox.Image, script string) sandbox.Spec {
	return sandbox.Spec{
		Argv: []string{"/bin/busybox", "sh", "-c", script}, Rootfs: root,
		Level: sandbox.DedicatedContainer, Image: &img, Stdout: io.Discard, Stderr: io.Discard,
	}
}

// startImage provisions and starts spec, requires DEDICATED_CONTAINER
// admitted from evidence, and execs the program.
func startImage(t *testing.T, p *Provider, spec sandbox.Spec) *linuxSandbox {
	t.Helper()
	sb, _ := startImageRecord(t, p, spec)
	return sb
}

// startImageRecord is startImage that also returns the evidence record.
func startImageRecord(t *testing.T, p *Provider, spec sandbox.Spec) (*linuxSandbox, *evidence.Record) {
	t.Helper()
	ctx := context.Background()
	s, err := p.Provision(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Deprovision(context.Background()) })
	adm, err := s.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if adm.Level != sandbox.DedicatedContainer || !adm.Verified {
		t.Fatalf("admitted %v (verified %v), want DEDICATED_CONTAINER verified; failed facts: %v", adm.Level, adm.Verified, failedFacts(adm.Record))
	}
	if err := s.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	return s.(*linuxSandbox), adm.Record
}

func hasFact(r *evidence.Record, boundary, name string) bool {
	for _, f := range r.Boundaries[boundary].Facts {
		if f.Name == name && f.OK {
			return true
		}
	}
	return false
}

func failedFacts(r *evidence.Record) []string {
	var out []string
	for name, b := range r.Boundaries {
		for _, f := range b.Facts {
			if !f.OK {
				out = append(out, fmt.Sprintf("%s/%s: want %q got %q", name, f.Name, f.Want, f.Got))
			}
		}
	}
	return out
}

// waitFor polls cond until it holds or the sandbox ended (not a timing
// assertion: the bound only keeps a broken test from hanging).
func waitFor(t *testing.T, sb *linuxSandbox, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
		select {
		case <-sb.done:
			t.Fatalf("the sandbox ended before %s", what)
		default:
		}
	}
	t.Fatalf("no %s", what)
}

// programPid is the host pid of the init's child running the busybox
// applet (its argv[1]).
func programPid(t *testing.T, sb *linuxSandbox, applet string) int {
	t.Helper()
	pid := 0
	waitFor(t, sb, "program "+applet, func() bool {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", sb.InitPid(), sb.InitPid()))
		for _, f := range strings.Fields(string(b)) {
			c, _ := os.ReadFile("/proc/" + f + "/cmdline")
			if argv := strings.Split(string(c), "\x00"); len(argv) > 1 && argv[1] == applet {
				pid, _ = strconv.Atoi(f)
				return true
			}
		}
		return false
	})
	return pid
}

func statusField(t *testing.T, pid int, field string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return ""
}

func newImageProvider(t *testing.T) *Provider {
	t.Helper()
	requireSandboxes(t)
	dir, st := newStateDir(t)
	p, err := New(Options{StateDir: dir, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestImageIdentity runs the image's program as uid 0 and as uid 1234 in
// a writable root and reads, from the host: its credentials (the ids
// asked for, mapped into the lease), every capability set empty (uid 0
// included), the lowered rlimit, the bounded tmpfs, and the files it
// wrote, stored on the host's disk with the image's ids.
func TestImageIdentity(t *testing.T) {
	p := newImageProvider(t)
	for _, tc := range []struct {
		uid, gid uint32
		groups   []uint32
		file     string // written by the program, relative to the root
	}{{0, 0, nil, "etc/written"}, {1234, 1234, []uint32{55}, "work/written"}} {
		t.Run(fmt.Sprint("uid", tc.uid), func(t *testing.T) {
			root := imageRoot(t, "")
			img := sandbox.Image{UID: tc.uid, GID: tc.gid, AdditionalGIDs: tc.groups, Writable: true, Hostname: "img-host",
				Rlimits: []sandbox.Rlimit{{Type: unix.RLIMIT_NOFILE, Soft: 100, Hard: 200}, {Type: unix.RLIMIT_NPROC, Soft: 500, Hard: 600}},
				Tmpfs:   []sandbox.Tmpfs{{Target: "/scratch", Bytes: 1 << 20}}}
			sb, rec := startImageRecord(t, p, imageSpec(root, img, "echo hi > /"+tc.file+" && exec /bin/busybox sleep 600"))
			if !hasFact(rec, evidence.Process, "init_non_dumpable") {
				t.Errorf("no verified init_non_dumpable fact")
			}
			for _, f := range rec.Boundaries[evidence.Process].Facts {
				if f.Name == "init_non_dumpable" && (tc.uid == 0) != strings.Contains(f.Want, "holds /proc/1/mem") {
					t.Errorf("uid %d: init_non_dumpable wants %q; the /proc/1/mem probe is for uid 0:0 only", tc.uid, f.Want)
				}
			}
			pid := programPid(t, sb, "sleep")
			l := sb.Lease()
			wantUID := strconv.FormatUint(uint64(l.UID+tc.uid), 10)
			if got, want := statusField(t, pid, "Uid"), strings.Repeat(wantUID+" ", 4); got != strings.TrimSpace(want) {
				t.Errorf("Uid = %q, want %q", got, strings.TrimSpace(want))
			}
			wantGroups := ""
			for _, g := range tc.groups {
				wantGroups = strconv.FormatUint(uint64(l.GID+g), 10)
			}
			if got := statusField(t, pid, "Groups"); got != wantGroups {
				t.Errorf("Groups = %q, want %q", got, wantGroups)
			}
			for _, f := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
				if got := statusField(t, pid, f); strings.Trim(got, "0") != "" {
					t.Errorf("%s = %s, want all zero", f, got)
				}
			}
			if got := statusField(t, pid, "NoNewPrivs"); got != "1" {
				t.Errorf("NoNewPrivs = %s, want 1", got)
			}
			limits, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range [][]string{{"Max open files", "100", "200"}, {"Max processes", "500", "600"}} {
				if !hasLimit(string(limits), want...) {
					t.Errorf("/proc/%d/limits has no %q:\n%s", pid, want, limits)
				}
			}
			checkScratch(t, pid)
			var st unix.Stat_t
			waitFor(t, sb, "the program's file on the host", func() bool { return unix.Lstat(filepath.Join(root, tc.file), &st) == nil && st.Size > 0 })
			if st.Uid != tc.uid || st.Gid != tc.gid {
				t.Errorf("%s on the host's disk is owned by %d:%d, want the image's %d:%d", tc.file, st.Uid, st.Gid, tc.uid, tc.gid)
			}
		})
	}
}

func hasLimit(limits string, want ...string) bool {
	for _, l := range strings.Split(limits, "\n") {
		if strings.HasPrefix(l, want[0]) {
			f := strings.Fields(l[len(want[0]):])
			return len(f) >= 2 && f[0] == want[1] && f[1] == want[2]
		}
	}
	return false
}

// checkScratch: the image's tmpfs is mounted at /scratch, 1 MiB, nosuid
// and nodev (read from the program's mountinfo).
func checkScratch(t *testing.T, pid int) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 10 || f[4] != "/scratch" {
			continue
		}
		sep := 6
		for f[sep] != "-" {
			sep++
		}
		if f[sep+1] != "tmpfs" || !strings.Contains(f[sep+3], "size=1024k") || !strings.Contains(f[5], "nosuid") || !strings.Contains(f[5], "nodev") {
			t.Errorf("/scratch = %q, want a 1024k tmpfs, nosuid, nodev", l)
		}
		return
	}
	t.Errorf("no /scratch mount in the program's mountinfo:\n%s", b)
}

// TestImageReadOnlyRoot: with Writable false the same write fails and
// nothing lands on the host; the writable row is its positive control.
func TestImageReadOnlyRoot(t *testing.T) {
	p := newImageProvider(t)
	for _, writable := range []bool{true, false} {
		t.Run(fmt.Sprint("writable=", writable), func(t *testing.T) {
			root := imageRoot(t, "")
			spec := imageSpec(root, sandbox.Image{Writable: writable}, "echo hi > /etc/written")
			sb, rec := startImageRecord(t, p, spec)
			ex, err := sb.Wait(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			_, statErr := os.Lstat(filepath.Join(root, "etc", "written"))
			if writable && (ex.Code != 0 || statErr != nil) {
				t.Fatalf("writable root: exit %+v, host file: %v; want the write to land", ex, statErr)
			}
			if !writable && (ex.Code == 0 || !errors.Is(statErr, os.ErrNotExist)) {
				t.Fatalf("read-only root: exit %+v, host file: %v; want the write refused", ex, statErr)
			}
			// The record says which root it checked.
			want := map[bool]string{true: "root_writable_idmapped", false: "root_read_only"}[writable]
			if !hasFact(rec, evidence.Filesystem, want) {
				t.Errorf("the filesystem boundary has no verified %s fact", want)
			}
		})
	}
}

// TestImageWritableRootDenials: a writable root widens nothing else. The
// namespace's root (uid 0) owns the Landlock probe dir and its netns
// sysctls (DAC allows both: the positive control, read from the host),
// yet both writes are denied, judged from the host.
func TestImageWritableRootDenials(t *testing.T) {
	p := newImageProvider(t)
	root := imageRoot(t, "")
	// The netns copied ip_forward from the host's at its creation: the
	// program writes the other value.
	host, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
	if err != nil {
		t.Fatal(err)
	}
	script := "echo x > /top-level; echo x > /dev/.cordon-probe/escape; v=$(cat /proc/sys/net/ipv4/ip_forward); echo $((1-v)) > /proc/sys/net/ipv4/ip_forward; echo done > /tmp/done; exec /bin/busybox sleep 600"
	sb, rec := startImageRecord(t, p, imageSpec(root, sandbox.Image{Writable: true}, script))
	// The in-situ set ran and held with the writable root: its Landlock
	// attempt (under /dev) denied, its control (under /tmp) present.
	if rec.InSitu == nil || len(rec.InSitu.Checks) == 0 || len(evidence.MissingInSitu(rec.InSitu)) > 0 {
		t.Fatalf("in-situ set: %+v, want every check of the default set", rec.InSitu)
	}
	for _, c := range rec.InSitu.Checks {
		if !c.OK {
			t.Errorf("in-situ %s: want %q got %q", c.Name, c.Want, c.Got)
		}
	}
	pid := programPid(t, sb, "sleep")
	proc := fmt.Sprintf("/proc/%d/root", pid)
	l := sb.Lease()
	var st unix.Stat_t
	if err := unix.Stat(proc+"/dev/.cordon-probe", &st); err != nil || st.Uid != l.UID {
		t.Fatalf("probe dir owner %d (%v), want the namespace root %d: the control needs DAC to allow the write", st.Uid, err, l.UID)
	}
	if _, err := os.Lstat(proc + "/dev/.cordon-probe/escape"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the write under /dev/.cordon-probe landed (%v)", err)
	}
	// / itself is not among Landlock's writable paths, though the root
	// directory is uid 0's (DAC would allow) and the mount is read-write.
	if err := unix.Stat(root, &st); err != nil || st.Uid != 0 {
		t.Fatalf("the image's / on disk: owner %d (%v), want 0 (the control)", st.Uid, err)
	}
	if _, err := os.Lstat(filepath.Join(root, "top-level")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file created at the writable root's top level landed on the host (%v)", err)
	}
	var fwd string
	err = setns.Do(fmt.Sprintf("/proc/%d/ns/net", pid), unix.CLONE_NEWNET, func() error {
		if err := unix.Stat("/proc/sys/net/ipv4/ip_forward", &st); err != nil {
			return err
		}
		b, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
		fwd = strings.TrimSpace(string(b))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.Uid != l.UID || st.Mode&0o200 == 0 {
		t.Fatalf("ip_forward of the sandbox's netns: owner %d mode %o, want owner-writable by the namespace root %d (the control)", st.Uid, st.Mode, l.UID)
	}
	if want := strings.TrimSpace(string(host)); fwd != want {
		t.Errorf("ip_forward in the sandbox's netns = %s, want %s as created: the program's write landed", fwd, want)
	}
	if _, err := os.Stat(proc + "/tmp/done"); err != nil {
		t.Errorf("the program did not get past its attempts: %v", err)
	}
}

// TestImageSetuidRootDoesNothing: a setuid-root binary in the image
// (owned by the image's uid 0, which is the sandbox's uid 0: the
// positive control, read through the sandbox's root from the host) run
// by uid 1234 gives it nothing: nosuid, no_new_privs.
func TestImageSetuidRootDoesNothing(t *testing.T) {
	p := newImageProvider(t)
	root := imageRoot(t, "")
	// In a directory of its own: busybox picks its applet by argv[0]'s name.
	suid := filepath.Join(root, "suid", "busybox")
	b, err := os.ReadFile(busybox)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Dir(suid), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(suid, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(suid, 0o4755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	sb := startImage(t, p, imageSpec(root, sandbox.Image{UID: 1234, GID: 1234, Writable: true}, "exec /suid/busybox sleep 600"))
	pid := programPid(t, sb, "sleep")
	l := sb.Lease()
	var st unix.Stat_t
	if err := unix.Stat(fmt.Sprintf("/proc/%d/root/suid/busybox", pid), &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != l.UID || st.Mode&unix.S_ISUID == 0 {
		t.Fatalf("inside, /suid/busybox is owned by %d mode %o; want setuid and owned by the sandbox's uid 0 (%d)", st.Uid, st.Mode, l.UID)
	}
	want := strconv.FormatUint(uint64(l.UID+1234), 10)
	if got := statusField(t, pid, "Uid"); got != strings.Join([]string{want, want, want, want}, " ") {
		t.Errorf("Uid after exec of a setuid-root binary = %q, want all %s", got, want)
	}
	if got := statusField(t, pid, "CapEff"); strings.Trim(got, "0") != "" {
		t.Errorf("CapEff = %s, want zero", got)
	}
}

// TestImageRootfsUnderRun: a root under /run is accepted only when it is
// a mount of its own (an engine's), not a plain directory of /run.
func TestImageRootfsUnderRun(t *testing.T) {
	p := newImageProvider(t)
	base, err := os.MkdirTemp("/run", "cordon-image-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	plain := imageRoot(t, filepath.Join(base, "plain"))
	_, err = p.Provision(context.Background(), imageSpec(plain, sandbox.Image{}, "true"))
	if failure.KindOf(err) != failure.KindPolicyRejected {
		t.Fatalf("a plain directory under /run: Provision = %v, want %s", err, failure.KindPolicyRejected)
	}
	// As containerd's native snapshotter does it: the snapshot directory
	// bound at the bundle's rootfs (a mount of its own).
	snap := imageRoot(t, t.TempDir())
	mnt := filepath.Join(base, "mounted", "rootfs")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(snap, mnt, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	sb := startImage(t, p, imageSpec(mnt, sandbox.Image{Writable: true}, "echo hi > /etc/layer && exit 7"))
	if ex, err := sb.Wait(context.Background()); err != nil || ex.Code != 7 {
		t.Fatalf("the program in a mounted root under /run: %+v, %v; want exit 7", ex, err)
	}
	// What the container wrote is in the snapshot, owned by the image's
	// uid 0.
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(snap, "etc", "layer"), &st); err != nil || st.Uid != 0 {
		t.Errorf("the write in the snapshot: owner %d, %v; want uid 0's file there", st.Uid, err)
	}
}

// TestImageRefusals: what image mode refuses before it builds anything.
func TestImageRefusals(t *testing.T) {
	p := newImageProvider(t)
	root := imageRoot(t, "")
	for _, tc := range []struct {
		name string
		spec func(s *sandbox.Spec)
		kind failure.Kind
		msg  string
	}{
		{"no root", func(s *sandbox.Spec) { s.Rootfs = "" }, failure.KindUsage, "explicit root"},
		{"uid outside the lease", func(s *sandbox.Spec) { s.Image.UID = 1 << 30 }, failure.KindUsage, "uid 1073741824"},
		{"gid outside the lease", func(s *sandbox.Spec) { s.Image.AdditionalGIDs = []uint32{1 << 30} }, failure.KindUsage, "additional gid 1073741824"},
		{"bad hostname", func(s *sandbox.Spec) { s.Image.Hostname = "a_b" }, failure.KindUsage, "hostname"},
		{"long hostname", func(s *sandbox.Spec) { s.Image.Hostname = strings.Repeat("a", 65) }, failure.KindUsage, "hostname"},
		{"tmpfs on /proc", func(s *sandbox.Spec) { s.Image.Tmpfs = []sandbox.Tmpfs{{Target: "/proc/x"}} }, failure.KindPolicyRejected, "/proc"},
		{"tmpfs on /", func(s *sandbox.Spec) { s.Image.Tmpfs = []sandbox.Tmpfs{{Target: "/"}} }, failure.KindPolicyRejected, "tmpfs /"},
		{"bind on /dev", func(s *sandbox.Spec) { s.Binds = []sandbox.Bind{{Source: root + "/etc", Target: "/dev/x"}} }, failure.KindPolicyRejected, "reserved"},
		{"terminal at start without a terminal", func(s *sandbox.Spec) { s.Image.TerminalAtStart = true }, failure.KindUsage, "TerminalAtStart"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := imageSpec(root, sandbox.Image{}, "true")
			tc.spec(&spec)
			sb, err := p.Provision(context.Background(), spec)
			if err == nil {
				sb.Deprovision(context.Background())
			}
			if failure.KindOf(err) != tc.kind || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Provision = %v, want %s naming %q", err, tc.kind, tc.msg)
			}
		})
	}
}

// TestImageEnvDirHostname: the program's environment is exactly Spec.Env
// with the default PATH added, its directory Image.Dir and its hostname
// Image.Hostname (all read from the host), and no cordon HOME.
func TestImageEnvDirHostname(t *testing.T) {
	p := newImageProvider(t)
	root := imageRoot(t, "")
	spec := imageSpec(root, sandbox.Image{Dir: "/work", Hostname: "img-host"}, "")
	spec.Argv, spec.Env = []string{"/bin/busybox", "sleep", "600"}, []string{"FOO=bar"}
	sb := startImage(t, p, spec)
	pid := programPid(t, sb, "sleep")
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	if want := "FOO=bar\x00" + defaultPath + "\x00"; string(env) != want {
		t.Errorf("environment = %q, want %q", env, want)
	}
	var st, want unix.Stat_t
	if err := unix.Stat(fmt.Sprintf("/proc/%d/cwd", pid), &st); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(filepath.Join(root, "work"), &want); err != nil {
		t.Fatal(err)
	}
	if st.Ino != want.Ino || st.Dev != want.Dev {
		t.Errorf("the program's directory is inode %d, want the image's /work (%d)", st.Ino, want.Ino)
	}
	var host string
	err = setns.Do(fmt.Sprintf("/proc/%d/ns/uts", pid), unix.CLONE_NEWUTS, func() error {
		var u unix.Utsname
		err := unix.Uname(&u)
		host = unix.ByteSliceToString(u.Nodename[:])
		return err
	})
	if err != nil || host != "img-host" {
		t.Errorf("hostname = %q (%v), want img-host", host, err)
	}
}

// TestImageBinds: the engine's file binds land on the image's files (an
// existing one in a read-only root; a missing one created in a writable
// root, on the host's disk too); a missing target in a read-only root and
// a symlink on a target's path in the image are refused by name.
func TestImageBinds(t *testing.T) {
	p := newImageProvider(t)
	hosts := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hosts, []byte("127.0.0.1 cordon-hosts\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	check := "/bin/busybox grep -q cordon-hosts /etc/hosts"
	for _, tc := range []struct {
		name     string
		writable bool
		prepare  func(root string) error
		start    string // "" when Start must succeed, else the error it names
	}{
		{"existing file, read-only root", false, func(root string) error { return os.WriteFile(filepath.Join(root, "etc", "hosts"), nil, 0o644) }, ""},
		{"missing file, writable root", true, func(string) error { return nil }, ""},
		{"missing file, read-only root", false, func(string) error { return nil }, "/etc/hosts does not exist"},
		{"symlink in the image", true, func(root string) error {
			if err := os.RemoveAll(filepath.Join(root, "etc")); err != nil {
				return err
			}
			return os.Symlink("/tmp", filepath.Join(root, "etc"))
		}, "symlink"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := imageRoot(t, "")
			if err := tc.prepare(root); err != nil {
				t.Fatal(err)
			}
			spec := imageSpec(root, sandbox.Image{Writable: tc.writable}, check)
			spec.Binds = []sandbox.Bind{{Source: hosts, Target: "/etc/hosts"}}
			ctx := context.Background()
			s, err := p.Provision(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Deprovision(ctx)
			_, err = s.Start(ctx)
			if tc.start != "" {
				if err == nil || !strings.Contains(err.Error(), tc.start) {
					t.Fatalf("Start = %v, want a refusal naming %q", err, tc.start)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Exec(ctx); err != nil {
				t.Fatal(err)
			}
			if ex, err := s.Wait(ctx); err != nil || ex.Code != 0 {
				t.Fatalf("grep of the bound /etc/hosts: %+v, %v; want exit 0", ex, err)
			}
			if fi, err := os.Lstat(filepath.Join(root, "etc", "hosts")); err != nil || !fi.Mode().IsRegular() {
				t.Errorf("the mount point on the host's disk: %v, %v; want a regular file", fi, err)
			}
		})
	}
}
