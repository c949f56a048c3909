package trapscan

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

func scanDir(t *testing.T, dir string, lim Limits) Report {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	return Scan(fd, dir, lim)
}

func TestScanFindsEachTrap(t *testing.T) {
	dir := t.TempDir()
	mk := func(p string) string { p = filepath.Join(dir, p); os.MkdirAll(filepath.Dir(p), 0o755); return p }
	link := func(target, p string) {
		if err := os.Symlink(target, mk(p)); err != nil {
			t.Fatal(err)
		}
	}
	// Traps.
	link("/root/.ssh/id_rsa", "README.md")
	link("../../etc/passwd", "a/up")
	link("..", "dotdot")
	link("../../../nowhere", "a/b/dangling-up")
	// Inside as written, outside as resolved: x/y/d -> ../.. is the root,
	// so x/y/e -> d/../z climbs above it.
	link("../..", "x/y/d")
	link("d/../z", "x/y/e")
	if err := syscall.Mkfifo(mk("q/fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", mk("sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var devs []Trap
	if os.Geteuid() == 0 {
		if err := unix.Mknod(mk("null"), unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mknod(mk("dev/blk"), unix.S_IFBLK|0o600, int(unix.Mkdev(7, 0))); err != nil {
			t.Fatal(err)
		}
		devs = []Trap{{Path: "dev/blk", Kind: BlockDev}, {Path: "null", Kind: CharDevice}}
	}
	// Not traps: regular files, directories, links that stay inside.
	os.WriteFile(mk("src/main.go"), []byte("package main"), 0o644)
	link("src/main.go", "main.go")
	link("../src", "a/src")
	link("missing-inside", "dangling-in")
	link("loop", "loop")
	link("x/y/d", "root-again") // resolves to the root itself

	rep := scanDir(t, dir, DefaultLimits)
	want := append([]Trap{
		{Path: "README.md", Kind: SymlinkOut, Target: "/root/.ssh/id_rsa"},
		{Path: "a/b/dangling-up", Kind: SymlinkOut, Target: "../../../nowhere"},
		{Path: "a/up", Kind: SymlinkOut, Target: "../../etc/passwd"},
		{Path: "dotdot", Kind: SymlinkOut, Target: ".."},
		{Path: "q/fifo", Kind: FIFO},
		{Path: "sock", Kind: Socket},
		{Path: "x/y/e", Kind: SymlinkOut, Target: "d/../z"},
	}, devs...)
	sortTraps(rep.Traps)
	sortTraps(want)
	if diff := cmp.Diff(want, rep.Traps); diff != "" {
		t.Errorf("Scan(%s) traps (-want +got):\n%s", dir, diff)
	}
	if rep.Truncated != "" || rep.Root != dir || rep.Entries < 20 {
		t.Errorf("Scan(%s) = truncated %q, root %q, %d entries; want the whole tree", dir, rep.Truncated, rep.Root, rep.Entries)
	}
}

func TestScanCleanTree(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "a/b"), 0o755)
	os.WriteFile(filepath.Join(dir, "a/b/f"), nil, 0o644)
	os.Symlink("b/f", filepath.Join(dir, "a/link"))
	rep := scanDir(t, dir, DefaultLimits)
	if len(rep.Traps) != 0 || rep.Truncated != "" || rep.Entries != 4 {
		t.Errorf("Scan(clean tree) = %+v, want no traps, 4 entries, not truncated", rep)
	}
}

func TestScanBounds(t *testing.T) {
	dir := t.TempDir()
	deep := dir
	for range 5 {
		deep = filepath.Join(deep, "d")
	}
	os.MkdirAll(deep, 0o755)
	for i := range 5 {
		os.Symlink("/etc", filepath.Join(dir, "l"+string(rune('0'+i))))
	}
	tests := []struct {
		name      string
		lim       Limits
		wantWhy   string
		wantTraps int
	}{
		{"depth", Limits{MaxEntries: 100, MaxDepth: 2, MaxTraps: 100}, "deep", -1},
		{"entries", Limits{MaxEntries: 3, MaxDepth: 100, MaxTraps: 100}, "entries", -1},
		{"traps", Limits{MaxEntries: 100, MaxDepth: 100, MaxTraps: 2}, "traps", 2},
	}
	for _, tt := range tests {
		rep := scanDir(t, dir, tt.lim)
		if !strings.Contains(rep.Truncated, tt.wantWhy) || (tt.wantTraps >= 0 && len(rep.Traps) != tt.wantTraps) {
			t.Errorf("%s: Scan with %+v = truncated %q, %d traps; want truncated mentioning %q", tt.name, tt.lim, rep.Truncated, len(rep.Traps), tt.wantWhy)
		}
	}
}

func sortTraps(ts []Trap) {
	for i := range ts {
		for j := i + 1; j < len(ts); j++ {
			if ts[j].Path < ts[i].Path {
				ts[i], ts[j] = ts[j], ts[i]
			}
		}
	}
}

// FuzzScanSymlink: a symlink with any target (the program chooses it) is
// reported exactly when it is absolute, climbs out as written, or the
// kernel resolving it beneath the root leaves the root.
func FuzzScanSymlink(f *testing.F) {
	for _, s := range []string{"/etc/passwd", "..", "../x", "a/../../b", "sub/../sub/f", "d/../z", "./.", "sub", "x\x1b]0;title\x07", "//", "sub/../.."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, target string) {
		if target == "" || strings.IndexByte(target, 0) >= 0 || len(target) > 4000 {
			return
		}
		dir := t.TempDir()
		os.MkdirAll(filepath.Join(dir, "sub"), 0o755)
		os.WriteFile(filepath.Join(dir, "sub", "f"), nil, 0o644)
		os.Symlink("..", filepath.Join(dir, "sub", "d")) // the root
		if err := os.Symlink(target, filepath.Join(dir, "sub", "l")); err != nil {
			t.Skip(err)
		}
		rep := scanDir(t, dir, DefaultLimits)
		reported := false
		for _, tr := range rep.Traps {
			if tr.Path == "sub/l" {
				reported = tr.Kind == SymlinkOut && tr.Target == target
			}
		}
		root, _ := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		defer unix.Close(root)
		fd, err := unix.Openat2(root, "sub/l", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH})
		if err == nil {
			unix.Close(fd)
		}
		clean := filepath.Clean(filepath.Join("sub", target))
		mustReport := strings.HasPrefix(target, "/") || clean == ".." || strings.HasPrefix(clean, "../") || err == unix.EXDEV
		if mustReport != reported {
			t.Errorf("symlink sub/l -> %q: reported %v, want %v (beneath: %v)", target, reported, mustReport, err)
		}
	})
}

// symlinkFarm builds, in dir, n symlinks that each cost the kernel a
// resolution of 40 hops of ~1600 components (what a program can leave in
// its workspace: every target stays inside, so each one is resolved).
func symlinkFarm(t *testing.T, dir string, n int) {
	t.Helper()
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("d/../", 800)
	for i := range 40 {
		next := "missing"
		if i < 39 {
			next = "l" + strconv.Itoa(i+1)
		}
		if err := os.Symlink(pad+next, filepath.Join(dir, "l"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "s"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := os.Symlink("../l0", filepath.Join(dir, "s", strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
}

// Attack review: the scan runs as root after the program, outside the
// sandbox's CPU limit. Each symlink that stays inside is resolved by the
// kernel, and a program can make each resolution cost milliseconds: at
// DefaultLimits' 200,000 entries that kept `cordon run` (and the daemon's
// stop) busy for over ten minutes. The scan is bounded in time, and a scan
// stopped by the bound says so. Control: the same tree scanned without the
// time bound takes several times longer (the bound is what stops it).
func TestScanTimeBound(t *testing.T) {
	if DefaultLimits.MaxTime <= 0 || DefaultLimits.MaxTime > 30*time.Second {
		t.Fatalf("DefaultLimits.MaxTime = %v, want a bound of at most 30s", DefaultLimits.MaxTime)
	}
	dir := t.TempDir()
	symlinkFarm(t, dir, 600)
	lim := DefaultLimits
	lim.MaxTime = 100 * time.Millisecond
	start := time.Now()
	rep := scanDir(t, dir, lim)
	bounded := time.Since(start)
	if !strings.Contains(rep.Truncated, "time") || bounded > lim.MaxTime+time.Second {
		t.Errorf("Scan with MaxTime %v took %v, truncated %q; want it stopped by the time bound and saying so", lim.MaxTime, bounded, rep.Truncated)
	}

	lim.MaxTime = 10 * time.Minute
	start = time.Now()
	rep = scanDir(t, dir, lim)
	unbounded := time.Since(start)
	if rep.Truncated != "" || unbounded < 3*100*time.Millisecond {
		t.Errorf("control: the whole farm took %v (truncated %q); want over %v, or the farm is not costly enough to show the bound", unbounded, rep.Truncated, 3*100*time.Millisecond)
	}
	t.Logf("bounded scan %v, whole scan %v", bounded, unbounded)
}

// The listed traps are bounded in bytes, control bytes counted as JSON
// escapes: a scan stops listing past MaxBytes, and Fit cuts reports to a
// reply's budget, saying so. Control: without the bounds all are listed.
func TestScanAndFitBytes(t *testing.T) {
	dir := t.TempDir()
	target := "/" + strings.Repeat("\x01", 1000)
	for i := range 50 {
		if err := os.Symlink(target, filepath.Join(dir, "l"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	all := scanDir(t, dir, Limits{MaxEntries: 100, MaxDepth: 4, MaxTraps: 100})
	if len(all.Traps) != 50 || all.Truncated != "" {
		t.Fatalf("control: %d traps, truncated %q; want 50, whole", len(all.Traps), all.Truncated)
	}
	rep := scanDir(t, dir, Limits{MaxEntries: 100, MaxDepth: 4, MaxTraps: 100, MaxBytes: 20000})
	if n := len(rep.Traps); n == 0 || n >= 4 || !strings.Contains(rep.Truncated, "bytes") {
		t.Errorf("MaxBytes 20000 (each trap ~6 KB as JSON): %d traps, truncated %q; want 1-3 and the reason", n, rep.Truncated)
	}
	fit := Fit([]Report{all, all}, 20000)
	size := 0
	for _, r := range fit {
		for _, tr := range r.Traps {
			size += tr.Size()
		}
		if !strings.Contains(r.Truncated, "not listed") {
			t.Errorf("Fit: report truncated %q, want it to say traps are not listed", r.Truncated)
		}
	}
	if size > 20000 || len(fit[0].Traps) == 0 || len(fit[1].Traps) != 0 || len(all.Traps) != 50 {
		t.Errorf("Fit: %d+%d traps, %d bytes; want some of the first only, at most 20000 bytes, input unchanged", len(fit[0].Traps), len(fit[1].Traps), size)
	}
}

// Names and targets are the program's bytes, not always UTF-8; JSON
// strings cannot carry invalid UTF-8 (encoding/json writes U+FFFD), so two
// different names could show as one and neither could be found. The
// report carries the exact bytes too (base64) whenever the text is not
// valid UTF-8. Control: a valid name carries no copy.
func TestReportKeepsExactBytes(t *testing.T) {
	dir := t.TempDir()
	name, target := "README\xff.md", "/etc/\xfe"
	if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "ok")); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(scanDir(t, dir, DefaultLimits))
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Traps []struct {
			Path        string `json:"path"`
			PathBytes   []byte `json:"path_bytes"`
			TargetBytes []byte `json:"target_bytes"`
		} `json:"traps"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	sort.Slice(rep.Traps, func(i, j int) bool { return rep.Traps[i].Path < rep.Traps[j].Path })
	if len(rep.Traps) != 2 || string(rep.Traps[0].PathBytes) != name || string(rep.Traps[0].TargetBytes) != target {
		t.Fatalf("report %s: want the first trap's exact name %q and target %q in path_bytes/target_bytes", b, name, target)
	}
	if rep.Traps[1].Path != "ok" || rep.Traps[1].PathBytes != nil || rep.Traps[1].TargetBytes != nil {
		t.Errorf("control: valid UTF-8 trap %+v carries bytes", rep.Traps[1])
	}
}
