package cgroup

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

func openTestdata(t testing.TB, name string) *os.File {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func readTestdata(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestDetectFrom(t *testing.T) {
	tests := []struct {
		name        string
		mountinfo   string
		procCgroups string // "" = nil reader
		want        Layout
	}{{
		// A copy of this development host's mountinfo and /proc/cgroups:
		// memory, pids, cpu on separate v1 mounts; a v2 mount with only hugetlb.
		name:        "hybrid host",
		mountinfo:   "mountinfo-hybrid.txt",
		procCgroups: "proc-cgroups-hybrid.txt",
		want: Layout{
			Mounts: map[Controller]Mount{
				Memory: {Memory, 1, "/sys/fs/cgroup/memory"},
				Pids:   {Pids, 1, "/sys/fs/cgroup/pids"},
				CPU:    {CPU, 1, "/sys/fs/cgroup/cpu"},
			},
			Unified: "/sys/fs/cgroup/unified",
		},
	}, {
		name:        "pure v2",
		mountinfo:   "mountinfo-v2.txt",
		procCgroups: "proc-cgroups-v2.txt",
		want: Layout{
			Mounts: map[Controller]Mount{
				Memory: {Memory, 2, "/sys/fs/cgroup"},
				Pids:   {Pids, 2, "/sys/fs/cgroup"},
				CPU:    {CPU, 2, "/sys/fs/cgroup"},
			},
			Unified: "/sys/fs/cgroup",
		},
	}, {
		// Without /proc/cgroups (kernels built without v1) DetectFrom cannot
		// read cgroup.controllers and assumes the v2 mount has them.
		name:      "pure v2 without /proc/cgroups",
		mountinfo: "mountinfo-v2.txt",
		want: Layout{
			Mounts: map[Controller]Mount{
				Memory: {Memory, 2, "/sys/fs/cgroup"},
				Pids:   {Pids, 2, "/sys/fs/cgroup"},
				CPU:    {CPU, 2, "/sys/fs/cgroup"},
			},
			Unified: "/sys/fs/cgroup",
		},
	}, {
		// cpu shares a hierarchy with cpuacct; a bind of a memory subtree
		// (root /docker/abc) loses to the mount of the whole hierarchy.
		name:        "pure v1",
		mountinfo:   "mountinfo-v1.txt",
		procCgroups: "proc-cgroups-v1.txt",
		want: Layout{
			Mounts: map[Controller]Mount{
				Memory: {Memory, 1, "/sys/fs/cgroup/memory"},
				Pids:   {Pids, 1, "/sys/fs/cgroup/pids"},
				CPU:    {CPU, 1, "/sys/fs/cgroup/cpu,cpuacct"},
			},
		},
	}, {
		// v1 mountinfo, but /proc/cgroups of the hybrid host: memory is on
		// hierarchy 4 (enabled) and there is no v2 mount to fall back to.
		name:        "v1 mounts only",
		mountinfo:   "mountinfo-v1.txt",
		procCgroups: "proc-cgroups-hybrid.txt",
		want: Layout{
			Mounts: map[Controller]Mount{
				Memory: {Memory, 1, "/sys/fs/cgroup/memory"},
				Pids:   {Pids, 1, "/sys/fs/cgroup/pids"},
				CPU:    {CPU, 1, "/sys/fs/cgroup/cpu,cpuacct"},
			},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var pc *os.File
			if tt.procCgroups != "" {
				pc = openTestdata(t, tt.procCgroups)
			}
			var got Layout
			var err error
			if pc == nil {
				got, err = DetectFrom(openTestdata(t, tt.mountinfo), nil)
			} else {
				got, err = DetectFrom(openTestdata(t, tt.mountinfo), pc)
			}
			if err != nil {
				t.Fatalf("DetectFrom(%s) error: %v", tt.mountinfo, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("DetectFrom(%s) mismatch (-want +got):\n%s", tt.mountinfo, diff)
			}
			if len(got.Missing()) != 0 {
				t.Errorf("Missing() = %v, want none", got.Missing())
			}
		})
	}
}

func TestDetectFromEdgeCases(t *testing.T) {
	const hybridMI = "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
	tests := []struct {
		name, mountinfo, procCgroups string
		want                         Layout
		missing                      []Controller
	}{{
		// The hybrid host with the v1 memory mount gone: memory is bound to
		// v1 hierarchy 4, so it must not be taken for a v2 controller.
		name:        "v1-bound controller not mounted",
		mountinfo:   hybridMI + "39 31 0:36 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n",
		procCgroups: "memory\t4\t1\t1\npids\t8\t1\t1\ncpu\t1\t1\t1\n",
		want: Layout{
			Mounts:  map[Controller]Mount{Pids: {Pids, 1, "/sys/fs/cgroup/pids"}, CPU: {CPU, 1, "/sys/fs/cgroup/cpu"}},
			Unified: "/sys/fs/cgroup/unified",
		},
		missing: []Controller{Memory},
	}, {
		name:        "disabled controller",
		mountinfo:   "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n",
		procCgroups: "memory\t4\t1\t0\n",
		want:        Layout{Mounts: map[Controller]Mount{}},
		missing:     []Controller{Memory, Pids, CPU},
	}, {
		name:      "escaped mountpoint and relative garbage",
		mountinfo: "41 31 0:38 / /run/my\\040cgroup rw - cgroup2 cgroup2 rw\n42 31 0:39 / relative rw - cgroup cgroup rw,pids\nshort line\n",
		want: Layout{
			Mounts:  map[Controller]Mount{Memory: {Memory, 2, "/run/my cgroup"}, Pids: {Pids, 2, "/run/my cgroup"}, CPU: {CPU, 2, "/run/my cgroup"}},
			Unified: "/run/my cgroup",
		},
	}, {
		name:    "no cgroups",
		want:    Layout{Mounts: map[Controller]Mount{}},
		missing: []Controller{Memory, Pids, CPU},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DetectFrom(strings.NewReader(tt.mountinfo), strings.NewReader(tt.procCgroups))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("DetectFrom mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.missing, got.Missing()); diff != "" {
				t.Errorf("Missing() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDetectLive checks Detect on whatever host runs the test against the
// kernel's own view: each mount is a cgroup filesystem of the right version,
// and /proc/self/cgroup lists each controller found.
func TestDetectLive(t *testing.T) {
	l, err := Detect()
	if err != nil {
		t.Fatalf("Detect() error: %v", err)
	}
	t.Logf("Detect() = %+v, missing %v", l, l.Missing())
	self, err := ProcCgroups(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for c, m := range l.Mounts {
		var st unix.Statfs_t
		if err := unix.Statfs(m.Path, &st); err != nil {
			t.Fatalf("statfs %s: %v", m.Path, err)
		}
		wantMagic := map[int]int64{1: unix.CGROUP_SUPER_MAGIC, 2: unix.CGROUP2_SUPER_MAGIC}[m.Version]
		if int64(st.Type) != wantMagic {
			t.Errorf("%s: %s has fs magic %#x, want %#x for v%d", c, m.Path, st.Type, wantMagic, m.Version)
		}
		key := string(c)
		if m.Version == 2 {
			key = ""
		}
		if _, ok := self[key]; !ok {
			t.Errorf("%s is v%d but /proc/self/cgroup has no %q line: %v", c, m.Version, key, self)
		}
	}
	if l.Unified != "" {
		if _, err := os.Stat(filepath.Join(l.Unified, "cgroup.controllers")); err != nil {
			t.Errorf("Unified %s: %v", l.Unified, err)
		}
	}
}

func TestParseProcCgroup(t *testing.T) {
	tests := []struct {
		file string
		want map[string]string
	}{{
		"proc-pid-cgroup-hybrid.txt",
		map[string]string{"name=systemd": "/", "pids": "/", "blkio": "/", "freezer": "/", "devices": "/",
			"memory": "/session/7b4ae493", "cpuset": "/", "cpuacct": "/", "cpu": "/", "": "/"},
	}, {
		"proc-pid-cgroup-v2.txt",
		map[string]string{"": "/user.slice/user-1000.slice/session-2.scope"},
	}, {
		"proc-pid-cgroup-v1.txt",
		map[string]string{"pids": "/user.slice", "memory": "/user.slice", "cpu": "/user.slice",
			"cpuacct": "/user.slice", "name=systemd": "/user.slice/a:b"},
	}}
	for _, tt := range tests {
		got, err := parseProcCgroup(openTestdata(t, tt.file))
		if err != nil {
			t.Fatalf("parseProcCgroup(%s) error: %v", tt.file, err)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("parseProcCgroup(%s) mismatch (-want +got):\n%s", tt.file, diff)
		}
	}
	if _, err := parseProcCgroup(strings.NewReader("no colons\n")); err == nil {
		t.Errorf("parseProcCgroup(%q) = nil error, want error", "no colons")
	}
}

func FuzzDetectFrom(f *testing.F) {
	for _, s := range []string{"hybrid", "v1", "v2"} {
		f.Add(readTestdata(f, "mountinfo-"+s+".txt"), readTestdata(f, "proc-cgroups-"+s+".txt"))
	}
	f.Fuzz(func(t *testing.T, mountinfo, procCgroups string) {
		l, err := DetectFrom(strings.NewReader(mountinfo), strings.NewReader(procCgroups))
		if err != nil {
			return
		}
		for c, m := range l.Mounts {
			if m.Controller != c || (m.Version != 1 && m.Version != 2) || !filepath.IsAbs(m.Path) {
				t.Fatalf("bad mount %v for %s", m, c)
			}
			if m.Version == 2 && m.Path != l.Unified {
				t.Fatalf("v2 mount %v is not Unified %q", m, l.Unified)
			}
		}
		for _, d := range PlannedDirs(l, "fuzz-1") {
			if filepath.Base(filepath.Dir(d)) != Prefix || filepath.Base(d) != "fuzz-1" {
				t.Fatalf("planned dir %q not under %s/", d, Prefix)
			}
		}
	})
}

func FuzzParseProcCgroup(f *testing.F) {
	for _, s := range []string{"hybrid", "v1", "v2"} {
		f.Add(readTestdata(f, "proc-pid-cgroup-"+s+".txt"))
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := parseProcCgroup(strings.NewReader(s))
		if err != nil {
			return
		}
		for k := range m {
			if strings.Contains(k, ",") || strings.Contains(k, ":") {
				t.Fatalf("key %q not split", k)
			}
		}
	})
}
