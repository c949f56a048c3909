package evidence

import (
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/sandbox/level"
)

// The masks of a live sandbox as its mountinfo showed them (trimmed):
// /proc/acpi empty, /proc/cmdline and boot_id null, /proc/sys read-only.
var testMasks = []MaskedPath{
	{"/proc/acpi", MaskEmpty},
	{"/proc/cmdline", MaskNull},
	{"/proc/sys", MaskReadOnly},
	{"/proc/sys/kernel/random/boot_id", MaskNull},
}

func readTestMountinfo(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("testdata/mountinfo-masked.txt")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// fakeStat answers like the sandbox's root: masked files are /dev/null,
// every path in exist exists as a regular file, the rest is absent.
func fakeStat(null []string, exist ...string) statFunc {
	return func(p string) (unix.Stat_t, error) {
		for _, n := range null {
			if n == p {
				return unix.Stat_t{Mode: unix.S_IFCHR | 0o666, Rdev: unix.Mkdev(1, 3)}, nil
			}
		}
		for _, e := range exist {
			if e == p {
				return unix.Stat_t{Mode: unix.S_IFREG | 0o444}, nil
			}
		}
		return unix.Stat_t{}, unix.ENOENT
	}
}

var nullPaths = []string{"/proc/cmdline", "/proc/sys/kernel/random/boot_id"}

func mustParse(t *testing.T, s string) []mountEntry {
	t.Helper()
	ms, err := parseMountinfo([]byte(s))
	if err != nil {
		t.Fatalf("parseMountinfo: %v", err)
	}
	return ms
}

func TestMaskChecksAllMasked(t *testing.T) {
	ms := mustParse(t, readTestMountinfo(t))
	for _, c := range maskChecks("mountinfo", ms, testMasks, fakeStat(nullPaths)) {
		if !c.OK {
			t.Errorf("%s: got %q, want OK (%s)", c.Name, c.Got, c.Want)
		}
	}
}

// TestMaskChecksRefuse: each way a mask can be missing or wrong fails its
// check, and with it the filesystem boundary, which lowers the admitted
// level below DEDICATED_CONTAINER and the mode below VERIFIED.
func TestMaskChecksRefuse(t *testing.T) {
	base := readTestMountinfo(t)
	drop := func(target string) string {
		var keep []string
		for _, l := range strings.Split(base, "\n") {
			if f := strings.Fields(l); len(f) > 4 && f[4] == target {
				continue
			}
			keep = append(keep, l)
		}
		return strings.Join(keep, "\n")
	}
	replace := func(old, new string) string {
		if !strings.Contains(base, old) {
			t.Fatalf("test mountinfo has no %q", old)
		}
		return strings.Replace(base, old, new, 1)
	}
	tests := []struct {
		name, mountinfo string
		stat            statFunc
		bad             string // the check that must fail
	}{
		{"cmdline not masked, present", drop("/proc/cmdline"), fakeStat(nullPaths[1:], "/proc/cmdline"), "mask:/proc/cmdline"},
		{"acpi not masked, present", drop("/proc/acpi"), fakeStat(nullPaths, "/proc/acpi"), "mask:/proc/acpi"},
		{"proc/sys not read-only", drop("/proc/sys/kernel/random/boot_id"), fakeStat(nullPaths[:1], "/proc/sys/kernel/random/boot_id"), "mask:/proc/sys/kernel/random/boot_id"},
		{"null mask writable", replace("/null /proc/cmdline ro,", "/null /proc/cmdline rw,"), fakeStat(nullPaths), "mask:/proc/cmdline"},
		{"null mask from /dev/zero", replace("0:6 /null /proc/cmdline", "0:6 /zero /proc/cmdline"), fakeStat(nullPaths), "mask:/proc/cmdline"},
		{"null mask is not the char device 1:3", base, fakeStat(nullPaths[1:], "/proc/cmdline"), "mask:/proc/cmdline"},
		{"empty mask with a writable superblock", replace("tmpfs tmpfs ro,size=4k", "tmpfs tmpfs rw,size=4k"), fakeStat(nullPaths), "mask:/proc/acpi"},
		{"empty mask not tmpfs", replace("0:48 / /proc/acpi ro,nosuid,nodev,noexec,relatime - tmpfs tmpfs", "0:48 / /proc/acpi ro,nosuid,nodev,noexec,relatime - ext4 /dev/vda"), fakeStat(nullPaths), "mask:/proc/acpi"},
		{"/proc/sys writable", replace("/sys /proc/sys ro,", "/sys /proc/sys rw,"), fakeStat(nullPaths), "mask:/proc/sys"},
		{"/proc/sys from elsewhere", replace("0:42 /sys /proc/sys", "0:42 /sysvipc /proc/sys"), fakeStat(nullPaths), "mask:/proc/sys"},
		// A later proc mount stacked on /proc hides every mask under it.
		{"masks covered by a new /proc", base + "99 73 0:60 / /proc rw,nosuid,nodev,noexec - proc proc rw\n", fakeStat(nullPaths, "/proc/acpi"), "mask:/proc/cmdline"},
		// A mask made under /proc before /proc/sys was bound is hidden by the bind.
		{"boot_id masked below the /proc/sys bind", replace("93 92 0:6 /null /proc/sys/kernel/random/boot_id", "93 73 0:6 /null /proc/sys/kernel/random/boot_id"), fakeStat(nullPaths[:1], "/proc/sys/kernel/random/boot_id"), "mask:/proc/sys/kernel/random/boot_id"},
		{"sysfs mounted", base + "99 64 0:61 / /sys ro,nosuid,nodev,noexec - sysfs sysfs ro\n", fakeStat(nullPaths), "no_sysfs"},
		{"unreadable", drop("/proc/cmdline"), func(string) (unix.Stat_t, error) { return unix.Stat_t{}, unix.EACCES }, "mask:/proc/cmdline"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := maskChecks("mountinfo", mustParse(t, tt.mountinfo), testMasks, tt.stat)
			failed := false
			for _, c := range cs {
				if c.Name == tt.bad && c.OK {
					t.Errorf("%s: OK with got %q, want a failed check", c.Name, c.Got)
				}
				failed = failed || (c.Name == tt.bad && !c.OK)
			}
			if !failed {
				t.Fatalf("maskChecks: no failed %s check in %+v", tt.bad, cs)
			}
			b := map[string]Boundary{}
			for _, n := range Boundaries() {
				b[n] = Boundary{Verified: true, Facts: []Check{{Name: "x", OK: true}}}
			}
			b[Filesystem] = judge(cs)
			lvl, mode := Admit(b)
			if b[Filesystem].Verified || mode != Unverified || lvl != level.DomainIsolated {
				t.Errorf("Admit with %s failing = %v, %v (filesystem verified %v), want DOMAIN_ISOLATED, UNVERIFIED", tt.bad, lvl, mode, b[Filesystem].Verified)
			}
		})
	}
}

func TestMaskChecksAbsent(t *testing.T) {
	ms := mustParse(t, readTestMountinfo(t))
	cs := maskChecks("mountinfo", ms, []MaskedPath{{"/proc/latency_stats", MaskNull}, {"/proc/asound", MaskEmpty}}, fakeStat(nullPaths))
	if len(cs) != 3 || cs[0].Name != "no_sysfs" || !cs[0].OK {
		t.Fatalf("maskChecks = %+v, want no_sysfs (OK) and one fact per path", cs)
	}
	for _, c := range cs[1:] {
		if !c.OK || c.Got != "absent" {
			t.Errorf("%s = %v %q, want OK %q: a path the kernel does not have cannot be read", c.Name, c.OK, c.Got, "absent")
		}
	}
	cs = maskChecks("mountinfo", ms, []MaskedPath{{"/proc/cmdline", "hidden"}}, fakeStat(nullPaths))
	if cs[1].OK {
		t.Errorf("unknown kind: %s OK, want a failed check", cs[1].Name)
	}
}

func TestVisibleMount(t *testing.T) {
	ms := mustParse(t, readTestMountinfo(t))
	for path, want := range map[string]string{
		"/":                                "/",
		"/usr/bin/sh":                      "/usr",
		"/proc":                            "/proc",
		"/proc/cmdline":                    "/proc/cmdline",
		"/proc/cmdlinex":                   "/proc",
		"/proc/acpi/wakeup":                "/proc/acpi",
		"/proc/sys/kernel/random/boot_id":  "/proc/sys/kernel/random/boot_id",
		"/proc/sys/kernel/random/uuid":     "/proc/sys",
		"/dev/null":                        "/dev/null",
		"/dev/nullx":                       "/dev",
		"/tmp/x/y":                         "/tmp",
		"/proc/sys/kernel/random/boot_idx": "/proc/sys",
	} {
		m, ok := visibleMount(ms, path)
		if !ok || m.target != want {
			t.Errorf("visibleMount(%q) = %q, %v, want %q", path, m.target, ok, want)
		}
	}
	// A loop in the parent links and a missing root end without a result.
	loop := mustParse(t, "1 9 0:1 / / ro - tmpfs tmpfs rw\n2 1 0:2 / /a ro - tmpfs tmpfs rw\n3 2 0:3 / /a ro - tmpfs tmpfs rw\n1 3 0:4 / /a ro - tmpfs tmpfs rw\n")
	if m, ok := visibleMount(loop, "/a/x"); ok {
		t.Errorf("visibleMount on a parent loop = %+v, want no result", m)
	}
	if _, ok := visibleMount(mustParse(t, "5 4 0:1 / /usr ro - tmpfs tmpfs rw\n"), "/usr"); ok {
		t.Errorf("visibleMount without a root mount: found, want no result")
	}
}

// FuzzVisibleMount: mountinfo is the sandbox's (it names the mount points),
// so the mask judgement must never panic or loop on any input, and the
// mount it settles on always lies on the path.
func FuzzVisibleMount(f *testing.F) {
	b, err := os.ReadFile("testdata/mountinfo-masked.txt")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b, "/proc/cmdline")
	f.Add(b, "/proc/sys/kernel/random/boot_id")
	f.Add([]byte("1 9 0:1 / / ro - tmpfs tmpfs rw\n2 1 0:2 / /a ro - tmpfs tmpfs rw\n3 2 0:3 / /a ro - tmpfs tmpfs rw\n1 3 0:4 / /a ro - tmpfs tmpfs rw\n"), "/a/x")
	f.Fuzz(func(t *testing.T, b []byte, path string) {
		ms, err := parseMountinfo(b)
		if err != nil {
			return
		}
		if m, ok := visibleMount(ms, path); ok && !onPath(path, m.target) {
			t.Fatalf("visibleMount(%q) = mount at %q, not on the path", path, m.target)
		}
		for _, k := range []string{MaskNull, MaskEmpty, MaskReadOnly, "x"} {
			_, _, _ = judgeMask(ms, MaskedPath{Path: path, Kind: k}, fakeStat(nullPaths, "/proc/acpi"))
		}
	})
}
