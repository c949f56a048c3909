package e2e

// Host facts in the sandbox's /proc (issue 9, item 6). The program reads
// every masked path; the test compares what it got with the host's own
// /proc and reads the same paths from outside through the program's root
// (/proc/PID/root, which walks the sandbox's mounts). Positive control:
// the test build without the masks (--test-skip-layer masks) shows the
// host's bytes at the same paths, and its evidence refuses the filesystem
// boundary.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/sandbox/linux/sbinit"
	"github.com/cordon-project/cordon/internal/testkit"
)

// PathView mirrors the probe's view of one path.
type PathView struct {
	Type    string   `json:"type"`
	Len     int      `json:"len"`
	SHA256  string   `json:"sha256"`
	Entries []string `json:"entries"`
	RO      bool     `json:"ro"`
	Err     string   `json:"err"`
}

// hostFile is one path of the host's /proc as root reads it.
type hostFile struct {
	exists  bool
	dir     bool
	content []byte
	entries []string
}

func (h hostFile) sha() string {
	s := sha256.Sum256(h.content)
	return hex.EncodeToString(s[:])
}

func readHost(t *testing.T, p string) hostFile {
	t.Helper()
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return hostFile{}
	}
	if err != nil {
		t.Fatalf("host lstat %s: %v", p, err)
	}
	h := hostFile{exists: true, dir: fi.IsDir()}
	if h.dir {
		es, err := os.ReadDir(p)
		if err != nil {
			t.Fatalf("host readdir %s: %v", p, err)
		}
		for _, e := range es {
			h.entries = append(h.entries, e.Name())
		}
		return h
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatalf("host open %s: %v", p, err)
	}
	defer f.Close()
	h.content, err = io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		t.Fatalf("host read %s: %v", p, err)
	}
	return h
}

// issueFacts are the host facts the attack review read inside a sandbox
// (issue 9, item 6), pinned here so that the table cannot lose one
// unnoticed.
var issueFacts = []string{
	"/proc/cmdline", "/proc/config.gz", "/proc/pressure", "/proc/diskstats", "/proc/interrupts",
	"/proc/zoneinfo", "/proc/buddyinfo", "/proc/pagetypeinfo", "/proc/vmallocinfo", "/proc/bus",
	"/proc/ioports", "/proc/iomem", "/proc/sys/kernel/random/boot_id",
	// The kernel command line also reaches /proc/bootconfig (kernels with
	// CONFIG_BOOT_CONFIG); host disks also show in /proc/mdstat.
	"/proc/bootconfig", "/proc/mdstat",
}

func maskPaths(t *testing.T) []string {
	var ps []string
	for _, m := range sbinit.Masks {
		ps = append(ps, m.Path)
	}
	for _, p := range issueFacts {
		if !slices.Contains(ps, p) {
			t.Errorf("sbinit.Masks does not mask %s", p)
		}
	}
	return ps
}

func pathViews(t *testing.T, data string) map[string]PathView {
	t.Helper()
	m := map[string]PathView{}
	if err := json.Unmarshal([]byte(data), &m); err != nil {
		t.Fatalf("probe data %q: %v", data, err)
	}
	return m
}

// outsideRead reads a path of the sandbox from the host, through the
// program's root: the mounts the host walks are the sandbox's.
func outsideRead(t *testing.T, prog int, p string) hostFile {
	t.Helper()
	return readHost(t, fmt.Sprintf("/proc/%d/root%s", prog, p))
}

func evidenceFacts(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read --evidence file: %v", err)
	}
	var rec struct {
		Boundaries map[string]struct {
			Verified bool `json:"verified"`
			Facts    []struct {
				Name string `json:"name"`
				OK   bool   `json:"ok"`
			} `json:"facts"`
		} `json:"boundaries"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, f := range rec.Boundaries["filesystem"].Facts {
		out[f.Name] = f.OK
	}
	return out
}

// TestProcMasksHideHostFacts: every masked path reads empty in the
// sandbox (a file: zero bytes from /dev/null; a directory: no entries;
// /proc/sys and /proc/sysrq-trigger read-only), while the host's own
// file has content; the host sees the same through the program's root.
// The control run without the masks reads the host's exact bytes.
func TestProcMasksHideHostFacts(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	paths := maskPaths(t)
	host := map[string]hostFile{}
	for _, p := range paths {
		host[p] = readHost(t, p)
	}
	// The comparison must be able to fail: these hold host facts here.
	for _, p := range []string{"/proc/cmdline", "/proc/sys/kernel/random/boot_id", "/proc/interrupts"} {
		if len(host[p].content) == 0 {
			t.Fatalf("host %s is empty: nothing to compare the sandbox's read with", p)
		}
	}
	if len(host["/proc/bus"].entries) == 0 {
		t.Fatalf("host /proc/bus lists nothing: nothing to compare the sandbox's listing with")
	}

	ev := filepath.Join(t.TempDir(), "ev.json")
	h := startHeld(t, cordonBin, newStateDir(t), probeArgs([]string{"--json", "--evidence", ev}, "hold", append([]string{"readpaths"}, paths...)...)...)
	got := pathViews(t, h.Probe.Data)
	_, prog := h.pids()
	for _, m := range sbinit.Masks {
		hv, v := host[m.Path], got[m.Path]
		if !hv.exists {
			if v.Err != "ENOENT" {
				t.Errorf("%s: absent on the host, the sandbox got %+v, want ENOENT", m.Path, v)
			}
			continue
		}
		out := outsideRead(t, prog, m.Path)
		switch m.Kind {
		case sbinit.MaskNull:
			if v.Type != "char" || v.Len != 0 || v.Err != "" {
				t.Errorf("%s: the sandbox got %+v, want zero bytes from /dev/null (the host has %d bytes)", m.Path, v, len(hv.content))
			}
			if len(hv.content) > 0 && v.SHA256 == hv.sha() {
				t.Errorf("%s: the sandbox read the host's bytes", m.Path)
			}
			if len(out.content) != 0 || out.dir {
				t.Errorf("%s seen from the host through the program's root: %d bytes, want 0", m.Path, len(out.content))
			}
		case sbinit.MaskEmpty:
			if v.Type != "dir" || len(v.Entries) != 0 || !v.RO || v.Err != "" {
				t.Errorf("%s: the sandbox got %+v, want an empty read-only directory (the host lists %d entries)", m.Path, v, len(hv.entries))
			}
			if len(out.entries) != 0 {
				t.Errorf("%s seen from the host through the program's root: %v, want no entries", m.Path, out.entries)
			}
		case sbinit.MaskReadOnly:
			if !v.RO || v.Err != "" {
				t.Errorf("%s: the sandbox got %+v, want it read-only", m.Path, v)
			}
			var st unix.Statfs_t
			if err := unix.Statfs(fmt.Sprintf("/proc/%d/root%s", prog, m.Path), &st); err != nil || st.Flags&unix.ST_RDONLY == 0 {
				t.Errorf("%s seen from the host through the program's root: statfs flags %#x, %v; want read-only", m.Path, st.Flags, err)
			}
		}
	}
	// Still readable: /proc/sys is read-only, not hidden.
	if v := got["/proc/sys"]; len(v.Entries) == 0 {
		t.Errorf("/proc/sys in the sandbox lists nothing (%+v): it is to stay readable", v)
	}
	r := h.finish()
	if r.Code != 0 || r.Outcome.EnforcementMode != "VERIFIED" || r.Outcome.LevelAdmitted != "DEDICATED_CONTAINER" {
		t.Fatalf("production run = %d, %+v, want 0, VERIFIED at DEDICATED_CONTAINER\nstderr: %s", r.Code, r.Outcome, r.Stderr)
	}
	facts := evidenceFacts(t, ev)
	for _, p := range paths {
		if ok, present := facts["mask:"+p]; !ok || !present {
			t.Errorf("evidence fact mask:%s = %v (present %v), want true", p, ok, present)
		}
	}

	// Positive control: the same reads in a test build without the masks
	// get the host's content, and the evidence refuses the filesystem
	// boundary.
	evc := filepath.Join(t.TempDir(), "ev.json")
	hc := startHeld(t, hooksBin, newStateDir(t), withoutLayer("masks", probeArgs([]string{"--json", "--evidence", evc, "--level", "DOMAIN_ISOLATED"}, "hold", append([]string{"readpaths"}, paths...)...))...)
	gotc := pathViews(t, hc.Probe.Data)
	_, progc := hc.pids()
	for _, p := range []string{"/proc/cmdline", "/proc/sys/kernel/random/boot_id"} {
		if v := gotc[p]; v.Type != "file" || v.SHA256 != host[p].sha() {
			t.Errorf("control: %s: the sandbox got %+v, want the host's %d bytes", p, v, len(host[p].content))
		}
		if out := outsideRead(t, progc, p); !bytes.Equal(out.content, host[p].content) {
			t.Errorf("control: %s seen from the host through the program's root = %q, want the host's %q", p, out.content, host[p].content)
		}
	}
	if v := gotc["/proc/interrupts"]; v.Type != "file" || v.Len == 0 {
		t.Errorf("control: /proc/interrupts: the sandbox got %+v, want the host's interrupt table", v)
	}
	if v := gotc["/proc/bus"]; len(v.Entries) == 0 {
		t.Errorf("control: /proc/bus: the sandbox got %+v, want the host's %v", v, host["/proc/bus"].entries)
	}
	if v := gotc["/proc/sys"]; v.RO {
		t.Errorf("control: /proc/sys is read-only without the masks (%+v): the control does not leave the layer out", v)
	}
	rc := hc.finish()
	if rc.Code != 0 || !slices.Contains(rc.Outcome.Unverified, "filesystem") || rc.Outcome.EnforcementMode == "VERIFIED" {
		t.Errorf("control run = %d, %+v, want 0 with the filesystem boundary unverified\nstderr: %s", rc.Code, rc.Outcome, rc.Stderr)
	}
	factsc := evidenceFacts(t, evc)
	for _, p := range []string{"/proc/cmdline", "/proc/sys", "/proc/sys/kernel/random/boot_id", "/proc/bus"} {
		if ok, present := factsc["mask:"+p]; ok || !present {
			t.Errorf("control: evidence fact mask:%s = %v (present %v), want a failed check", p, ok, present)
		}
	}
}

// TestProcMasksCannotBeRemoved: the program tries to unmount each mask,
// to remount /proc/sys read-write, to mount a fresh proc over /proc and
// to bind a host file over a mask. Each is refused (EPERM), and from the
// host the masks are still in the program's mountinfo and still read
// empty through its root. Which layer denies: the seccomp filter (alone,
// on the host as root: umount2 works without it, EPERM with it) and the
// missing CAP_SYS_ADMIN (the test build without seccomp is refused too).
func TestProcMasksCannotBeRemoved(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	paths := []string{"/proc/cmdline", "/proc/interrupts", "/proc/bus", "/proc/sys", "/proc/sys/kernel/random/boot_id"}
	hostCmdline := readHost(t, "/proc/cmdline").content
	if len(hostCmdline) == 0 {
		t.Fatal("host /proc/cmdline is empty: nothing to compare with")
	}
	for _, tc := range []struct {
		name string
		bin  string
		args []string
	}{
		{"production", cordonBin, probeArgs(nil, "hold", append([]string{"unmask"}, paths...)...)},
		{"without seccomp", hooksBin, withoutLayer("seccomp", probeArgs(lowerLevel, "hold", append([]string{"unmask"}, paths...)...))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := startHeld(t, tc.bin, newStateDir(t), tc.args...)
			var got map[string]json.RawMessage
			if err := json.Unmarshal([]byte(h.Probe.Data), &got); err != nil || !h.Probe.OK {
				t.Fatalf("probe = %+v: %v", h.Probe, err)
			}
			for k, v := range got {
				if k != "after" && string(v) != `"EPERM"` {
					t.Errorf("%s: %s = %s, want EPERM", tc.name, k, v)
				}
			}
			var after map[string]PathView
			if err := json.Unmarshal(got["after"], &after); err != nil {
				t.Fatal(err)
			}
			if v := after["/proc/cmdline"]; v.Type != "char" || v.Len != 0 {
				t.Errorf("%s: /proc/cmdline read again = %+v, want zero bytes", tc.name, v)
			}
			if v := after["/proc/bus"]; len(v.Entries) != 0 {
				t.Errorf("%s: /proc/bus listed again = %+v, want no entries", tc.name, v)
			}
			if v := after["/proc/sys"]; !v.RO {
				t.Errorf("%s: /proc/sys = %+v, want read-only still", tc.name, v)
			}
			// From outside: the masks are still mounted, and still empty.
			_, prog := h.pids()
			mi, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", prog))
			if err != nil {
				t.Fatal(err)
			}
			targets := map[string]bool{}
			for _, l := range strings.Split(string(mi), "\n") {
				if f := strings.Fields(l); len(f) > 4 {
					targets[f[4]] = true
				}
			}
			for _, p := range paths {
				if !targets[p] {
					t.Errorf("%s: the program's mountinfo has no mount at %s any more", tc.name, p)
				}
			}
			for _, p := range []string{"/proc/cmdline", "/proc/sys/kernel/random/boot_id"} {
				if out := outsideRead(t, prog, p); len(out.content) != 0 {
					t.Errorf("%s: %s seen from the host through the program's root = %q, want empty", tc.name, p, out.content)
				}
			}
			if r := h.finish(); r.Code != 0 {
				t.Errorf("%s: cordon = %d\nstderr: %s", tc.name, r.Code, r.Stderr)
			}
		})
	}
	t.Run("filter alone", func(t *testing.T) {
		const tmpfsMagic = "fstype=0x1021994"
		dir := t.TempDir()
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil {
			t.Fatal(err)
		}
		under := fmt.Sprintf("fstype=%#x", st.Type)
		if under == tmpfsMagic {
			t.Fatalf("%s is on a tmpfs: the test cannot tell the mount from what is under it", dir)
		}
		if p := runFilterChild(t, "umount", false, dir, nil, nil); !p.OK || p.Data != under {
			t.Errorf("root without the filter: umount2 = %+v, want ok and %s (the tmpfs gone)", p, under)
		}
		if p := runFilterChild(t, "umount", true, dir, nil, nil); p.OK || p.Errno != "EPERM" || p.Data != tmpfsMagic {
			t.Errorf("root with the filter: umount2 = %+v, want EPERM and the tmpfs still there", p)
		}
	})
}
