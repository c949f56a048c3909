package cgroup

// The v2 limit path cannot be exercised for real on the development hosts
// (cgroup v1 hybrid: the v2 mount there has no memory, pids or cpu), so these
// tests run Create and friends against a fake cgroupfs made of plain files in
// t.TempDir(): a hook fills each new directory with the interface files the
// kernel would make and empties it before rmdir. They check the exact bytes
// written. The real kernel paths are covered by real_linux_test.go.

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// fakeFS is a cgroupfs of plain files. version picks the interface files;
// omit lists files the "kernel" does not provide (e.g. no swap accounting).
type fakeFS struct {
	version int
	omit    map[string]bool
}

var fakeFiles = map[int]map[string]string{
	2: {
		"cgroup.procs":           "",
		"cgroup.kill":            "",
		"cgroup.subtree_control": "",
		"cgroup.events":          "populated 0\nfrozen 0\n",
		"cgroup.controllers":     "cpu io memory pids\n",
		"memory.max":             "max\n",
		"memory.swap.max":        "max\n",
		"memory.events":          "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n",
		"pids.max":               "max\n",
		"cpu.max":                "max 100000\n",
	},
	1: {
		"cgroup.procs":                   "",
		"tasks":                          "",
		"memory.limit_in_bytes":          "9223372036854771712\n",
		"memory.memsw.limit_in_bytes":    "9223372036854771712\n",
		"memory.kmem.tcp.limit_in_bytes": "9223372036854771712\n",
		"memory.oom_control":             "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
		"pids.max":                       "max\n",
		"cpu.cfs_period_us":              "100000\n",
		"cpu.cfs_quota_us":               "-1\n",
	},
}

func (f fakeFS) populate(dir string) error {
	for name, content := range fakeFiles[f.version] {
		if f.omit[name] {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (f fakeFS) depopulate(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrInvalid) {
		return nil
	}
	for _, e := range ents {
		if e.Type().IsRegular() {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

func (f fakeFS) hooks() *hooks { return &hooks{afterMkdir: f.populate, beforeRmdir: f.depopulate} }

// newFakeV2 makes a pure-v2 fake mount and its Layout.
func newFakeV2(t *testing.T, omit ...string) (Layout, *hooks) {
	t.Helper()
	root := t.TempDir()
	f := fakeFS{version: 2, omit: map[string]bool{}}
	for _, o := range omit {
		f.omit[o] = true
	}
	if err := f.populate(root); err != nil {
		t.Fatal(err)
	}
	l := Layout{Mounts: map[Controller]Mount{}, Unified: root}
	for _, c := range needed {
		l.Mounts[c] = Mount{c, 2, root}
	}
	return l, f.hooks()
}

func readAll(t *testing.T, files map[string]string) map[string]string {
	t.Helper()
	got := map[string]string{}
	for name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		got[name] = string(b)
	}
	return got
}

func TestCreateV2Fake(t *testing.T) {
	l, h := newFakeV2(t)
	root := l.Unified
	g, err := create(l, "box-1", Limits{MemoryBytes: 64 << 20, Pids: 32, CPUs: 0.5}, h)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	dir := filepath.Join(root, "cordon", "box-1")
	if diff := cmp.Diff([]string{dir}, g.Dirs()); diff != "" {
		t.Errorf("Dirs() mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(PlannedDirs(l, "box-1"), g.Dirs()); diff != "" {
		t.Errorf("PlannedDirs differs from Dirs (-planned +created):\n%s", diff)
	}
	want := map[string]string{
		filepath.Join(root, "cgroup.subtree_control"):           "+cpu +memory +pids",
		filepath.Join(root, "cordon", "cgroup.subtree_control"): "+cpu +memory +pids",
		filepath.Join(dir, "memory.max"):                        "67108864",
		filepath.Join(dir, "memory.swap.max"):                   "0",
		filepath.Join(dir, "pids.max"):                          "32",
		filepath.Join(dir, "cpu.max"):                           "50000 100000",
	}
	if diff := cmp.Diff(want, readAll(t, want)); diff != "" {
		t.Errorf("files after Create (-want +got):\n%s", diff)
	}

	facts, err := g.ReadBack()
	if err != nil {
		t.Fatalf("ReadBack: %v", err)
	}
	wantFacts := Facts{
		MemoryBytes: 64 << 20, MemswBytes: 64 << 20, Pids: 32, CPUQuotaUs: 50000, CPUPeriodUs: 100000,
		// v2 charges socket buffers to memory.max: the TCP bound is it.
		TCPMemBytes: 64 << 20,
		Versions:    map[Controller]int{Memory: 2, Pids: 2, CPU: 2},
		Files: map[string]string{
			"MemoryBytes": filepath.Join(dir, "memory.max"), "MemswBytes": filepath.Join(dir, "memory.swap.max"),
			"TCPMemBytes": filepath.Join(dir, "memory.max"),
			"Pids":        filepath.Join(dir, "pids.max"), "CPUQuotaUs": filepath.Join(dir, "cpu.max"), "CPUPeriodUs": filepath.Join(dir, "cpu.max"),
		},
		Dirs: []string{dir},
	}
	if diff := cmp.Diff(wantFacts, facts); diff != "" {
		t.Errorf("ReadBack() mismatch (-want +got):\n%s", diff)
	}

	fd, err := g.UnifiedFD()
	if err != nil || fd < 0 {
		t.Fatalf("UnifiedFD() = %d, %v", fd, err)
	}
	os.NewFile(uintptr(fd), "cgroup").Close()

	// AddProc with a process of our own: the fake cgroup.procs keeps it listed,
	// so the file is emptied again before Kill sweeps it.
	sleep := exec.Command("sleep", "30")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleep.Process.Kill(); sleep.Wait() })
	for range 2 { // idempotent
		if err := g.AddProc(sleep.Process.Pid); err != nil {
			t.Fatalf("AddProc: %v", err)
		}
	}
	procs := filepath.Join(dir, "cgroup.procs")
	if got := readAll(t, map[string]string{procs: ""})[procs]; got != strconv.Itoa(sleep.Process.Pid) {
		t.Errorf("cgroup.procs = %q, want %d", got, sleep.Process.Pid)
	}
	os.WriteFile(procs, nil, 0o644)

	os.WriteFile(filepath.Join(dir, "memory.events"), []byte("low 0\nhigh 0\nmax 7\noom 3\noom_kill 2\n"), 0o644)
	if n, err := g.OOMKills(); n != 2 || err != nil {
		t.Errorf("OOMKills() = %d, %v, want 2, nil", n, err)
	}

	if err := g.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if got := readAll(t, map[string]string{filepath.Join(dir, "cgroup.kill"): ""}); got[filepath.Join(dir, "cgroup.kill")] != "1" {
		t.Errorf("cgroup.kill = %q, want %q", got, "1")
	}
	if err := g.Remove(); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after Remove, Lstat(%s) = %v, want not exist", dir, err)
	}
	if err := g.Remove(); err != nil {
		t.Errorf("second Remove() = %v, want nil", err)
	}
	if res, err := Residue(l); err != nil || len(res) != 0 {
		t.Errorf("Residue() = %v, %v, want none", res, err)
	}
}

// Controllers already enabled are not written again; without swap
// accounting the memory limit holds and the missing cap is a fact.
func TestCreateV2FakeNoSwapAccounting(t *testing.T) {
	l, h := newFakeV2(t, "memory.swap.max")
	os.WriteFile(filepath.Join(l.Unified, "cgroup.subtree_control"), []byte("cpu memory pids\n"), 0o644)
	g, err := create(l, "noswap", Limits{MemoryBytes: 32 << 20}, h)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { g.Remove() })
	if !g.NoSwapAccounting() {
		t.Errorf("NoSwapAccounting() = false, want true")
	}
	if b, _ := os.ReadFile(filepath.Join(l.Unified, "cgroup.subtree_control")); string(b) != "cpu memory pids\n" {
		t.Errorf("root subtree_control rewritten to %q", b)
	}
	facts, err := g.ReadBack()
	if err != nil {
		t.Fatal(err)
	}
	want := Facts{MemoryBytes: 32 << 20, NoSwapAccounting: true, TCPMemBytes: 32 << 20, Pids: -1, CPUQuotaUs: -1, CPUPeriodUs: 100000}
	if diff := cmp.Diff(want, facts, cmpopts.IgnoreFields(Facts{}, "Versions", "Files", "Dirs")); diff != "" {
		t.Errorf("ReadBack() mismatch (-want +got):\n%s", diff)
	}
}

// A hybrid: v1 hierarchies (cpu shared with cpuacct) enforce, a v2 mount
// without controllers tracks.
func TestCreateHybridFake(t *testing.T) {
	base := t.TempDir()
	v1, v2 := fakeFS{version: 1}, fakeFS{version: 2, omit: map[string]bool{}}
	mk := func(sub string, f fakeFS) string {
		p := filepath.Join(base, sub)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := f.populate(p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mem, pids, cpu, uni := mk("memory", v1), mk("pids", v1), mk("cpu,cpuacct", v1), mk("unified", v2)
	l := Layout{Mounts: map[Controller]Mount{Memory: {Memory, 1, mem}, Pids: {Pids, 1, pids}, CPU: {CPU, 1, cpu}}, Unified: uni}
	// Both fakes share one hook: the v1 file set plus cgroup.kill for unified.
	h := &hooks{
		afterMkdir: func(d string) error {
			if strings.HasPrefix(d, uni) {
				return v2.populate(d)
			}
			return v1.populate(d)
		},
		beforeRmdir: v1.depopulate,
	}
	g, err := create(l, "hy", Limits{MemoryBytes: 64 << 20, Pids: 32, CPUs: 1.5}, h)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { g.Remove() })
	wantDirs := []string{filepath.Join(uni, "cordon/hy"), filepath.Join(mem, "cordon/hy"), filepath.Join(pids, "cordon/hy"), filepath.Join(cpu, "cordon/hy")}
	if diff := cmp.Diff(wantDirs, g.Dirs()); diff != "" {
		t.Errorf("Dirs() mismatch (-want +got):\n%s", diff)
	}
	want := map[string]string{
		filepath.Join(mem, "cordon/hy/memory.limit_in_bytes"):          "67108864",
		filepath.Join(mem, "cordon/hy/memory.memsw.limit_in_bytes"):    "67108864",
		filepath.Join(mem, "cordon/hy/memory.kmem.tcp.limit_in_bytes"): "67108864",
		filepath.Join(pids, "cordon/hy/pids.max"):                      "32",
		filepath.Join(cpu, "cordon/hy/cpu.cfs_period_us"):              "100000",
		filepath.Join(cpu, "cordon/hy/cpu.cfs_quota_us"):               "150000",
		filepath.Join(uni, "cgroup.subtree_control"):                   "", // no v2 controllers: untouched
	}
	if diff := cmp.Diff(want, readAll(t, want)); diff != "" {
		t.Errorf("files after Create (-want +got):\n%s", diff)
	}
	if _, err := os.Stat(filepath.Join(uni, "cordon", "cgroup.subtree_control")); err != nil {
		t.Errorf("tracking parent not created: %v", err)
	}
}

// On v1 the TCP socket-buffer limit is its own file: TCPBytes when set,
// the memory limit otherwise; a kernel without the file leaves it unset
// (ReadBack reports 0, which evidence does not accept).
func TestCreateV1FakeTCPLimit(t *testing.T) {
	for _, tt := range []struct {
		name     string
		lim      Limits
		omit     bool
		wantFile string
		wantRead int64
	}{
		{"explicit", Limits{MemoryBytes: 64 << 20, TCPBytes: 16 << 20}, false, "16777216", 16 << 20},
		{"memory by default", Limits{MemoryBytes: 32 << 20}, false, "33554432", 32 << 20},
		{"kernel without kmem.tcp", Limits{MemoryBytes: 32 << 20}, true, "", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			base := t.TempDir()
			v1 := fakeFS{version: 1, omit: map[string]bool{tcpLimitV1: tt.omit}}
			l := Layout{Mounts: map[Controller]Mount{}}
			for _, c := range []Controller{Memory, Pids, CPU} {
				p := filepath.Join(base, string(c))
				if err := os.Mkdir(p, 0o755); err != nil {
					t.Fatal(err)
				}
				l.Mounts[c] = Mount{c, 1, p}
			}
			g, err := create(l, "tcp", tt.lim, &hooks{afterMkdir: v1.populate, beforeRmdir: v1.depopulate})
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			t.Cleanup(func() { g.Remove() })
			p := filepath.Join(base, string(Memory), "cordon/tcp", tcpLimitV1)
			if b, err := os.ReadFile(p); (err == nil) == tt.omit || (err == nil && string(b) != tt.wantFile) {
				t.Errorf("%s = %q, %v; want %q (absent: %v)", tcpLimitV1, b, err, tt.wantFile, tt.omit)
			}
			f, err := g.ReadBack()
			if err != nil || f.TCPMemBytes != tt.wantRead {
				t.Errorf("ReadBack().TCPMemBytes = %d, %v; want %d", f.TCPMemBytes, err, tt.wantRead)
			}
		})
	}
	if err := (Limits{TCPBytes: -1}).validate(); !errors.Is(err, ErrInvalidLimits) {
		t.Errorf("validate(TCPBytes -1) = %v, want ErrInvalidLimits", err)
	}
}

// A failing limit write undoes every directory already made; a name in use
// is refused without touching the existing group.
func TestCreateFakeCleansUp(t *testing.T) {
	l, h := newFakeV2(t, "cpu.max")
	if _, err := create(l, "broken", Limits{CPUs: 1}, h); err == nil {
		t.Fatalf("create without cpu.max = nil error, want error")
	}
	if res, err := Residue(l); err != nil || len(res) != 0 {
		t.Errorf("Residue() after failed create = %v, %v, want none", res, err)
	}

	g, err := create(l, "taken", Limits{}, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Remove() })
	if _, err := create(l, "taken", Limits{}, h); !errors.Is(err, fs.ErrExist) {
		t.Errorf("second create(%q) = %v, want ErrExist", "taken", err)
	}
	if res, _ := Residue(l); !cmp.Equal(res, []string{"taken"}) {
		t.Errorf("Residue() = %v, want [taken]", res)
	}
}

func TestCreateRefusesMissingController(t *testing.T) {
	l, h := newFakeV2(t)
	delete(l.Mounts, CPU)
	_, err := create(l, "nocpu", Limits{CPUs: 1}, h)
	if !errors.Is(err, ErrMissingController) {
		t.Errorf("create with cpu limit and no cpu controller = %v, want ErrMissingController", err)
	}
	if _, err := os.Lstat(filepath.Join(l.Unified, "cordon", "nocpu")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("group dir exists after refused create: %v", err)
	}
}

func TestValidation(t *testing.T) {
	l, h := newFakeV2(t)
	tests := []struct {
		name    string
		lim     Limits
		wantErr string // "" = valid
	}{
		{"ok", Limits{MemoryBytes: 8 << 20, Pids: 8, CPUs: 0.01}, ""},
		{"unset", Limits{}, ""},
		{"ok-max", Limits{CPUs: 1024, Pids: 1 << 22}, ""},
		{"a", Limits{MemoryBytes: 4 << 20}, "invalid limits: memory limit 4MiB is below the 8MiB minimum needed to start"},
		{"a", Limits{MemoryBytes: 1000}, "invalid limits: memory limit 1000 bytes is below the 8MiB minimum needed to start"},
		{"a", Limits{MemoryBytes: -1}, "invalid limits: memory limit -1 is negative"},
		{"a", Limits{Pids: 7}, "invalid limits: pids limit 7 is below the minimum of 8"},
		{"a", Limits{Pids: -3}, "invalid limits: pids limit -3 is negative"},
		{"a", Limits{CPUs: nan()}, "invalid limits: cpu limit NaN is not a non-negative number"},
		{"a", Limits{CPUs: -0.5}, "invalid limits: cpu limit -0.5 is not a non-negative number"},
		{"a", Limits{CPUs: 0.001}, "invalid limits: cpu limit 0.001 is below the minimum of 0.01"},
		{"a", Limits{CPUs: 1e9}, "invalid limits: cpu limit 1e+09 is above 1024"},
		{"", Limits{}, `invalid cgroup name "": want [a-z0-9-]{1,64}`},
		{"../x", Limits{}, `invalid cgroup name "../x": want [a-z0-9-]{1,64}`},
		{"Upper", Limits{}, `invalid cgroup name "Upper": want [a-z0-9-]{1,64}`},
		{strings.Repeat("a", 65), Limits{}, `invalid cgroup name "` + strings.Repeat("a", 65) + `": want [a-z0-9-]{1,64}`},
		{strings.Repeat("a", 64), Limits{}, ""},
	}
	for _, tt := range tests {
		g, err := create(l, tt.name, tt.lim, h)
		got := ""
		if err != nil {
			got = err.Error()
		} else {
			g.Remove()
		}
		if got != tt.wantErr {
			t.Errorf("create(%q, %+v) error = %q, want %q", tt.name, tt.lim, got, tt.wantErr)
		}
	}
	if PlannedDirs(l, "../x") != nil {
		t.Errorf("PlannedDirs with invalid name is not nil")
	}
	if err := Open(l, "../x").Remove(); !errors.Is(err, ErrInvalidName) {
		t.Errorf("Open(invalid).Remove() = %v, want ErrInvalidName", err)
	}
}

func nan() float64 { z := 0.0; return z / z }

// Remove never follows a symlink: neither a group that is a symlink nor a
// <mount>/cordon that is one leads it to remove the target.
func TestRemoveDoesNotFollowSymlinks(t *testing.T) {
	l, h := newFakeV2(t)
	target := t.TempDir()
	os.Mkdir(filepath.Join(target, "victim"), 0o755)
	os.Mkdir(filepath.Join(l.Unified, "cordon"), 0o755)
	if err := os.Symlink(filepath.Join(target, "victim"), filepath.Join(l.Unified, "cordon", "evil")); err != nil {
		t.Fatal(err)
	}
	if err := open(l, "evil", h).Remove(); err == nil {
		t.Errorf("Remove of a symlinked group = nil error, want error")
	}
	if _, err := os.Stat(filepath.Join(target, "victim")); err != nil {
		t.Errorf("symlink target removed: %v", err)
	}

	l2, h2 := newFakeV2(t)
	if err := os.Symlink(target, filepath.Join(l2.Unified, "cordon")); err != nil {
		t.Fatal(err)
	}
	if err := open(l2, "victim", h2).Remove(); err == nil {
		t.Errorf("Remove under a symlinked cordon/ = nil error, want error")
	}
	if _, err := os.Stat(filepath.Join(target, "victim")); err != nil {
		t.Errorf("directory behind symlinked cordon/ removed: %v", err)
	}
}

// Residue lists names across hierarchies, once each, and ignores what is
// not a group of ours.
func TestResidueFake(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	for _, p := range []string{"a/cordon/left-1", "a/cordon/left-2", "b/cordon/left-2", "b/cordon/Not_Ours"} {
		root := map[string]string{"a": a, "b": b}[p[:1]]
		os.MkdirAll(filepath.Join(root, p[2:]), 0o755)
	}
	os.WriteFile(filepath.Join(b, "cordon", "file"), nil, 0o644)
	l := Layout{Mounts: map[Controller]Mount{Memory: {Memory, 1, a}, Pids: {Pids, 1, b}}}
	got, err := Residue(l)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"left-1", "left-2"}, got); diff != "" {
		t.Errorf("Residue() mismatch (-want +got):\n%s", diff)
	}
}
