package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/cordon-project/cordon/internal/testkit"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// The lease pool cordon uses by default: 4096 ranges of 65536 ids from 2^30.
const (
	poolBase = 0x40000000
	poolEnd  = poolBase + 4096*65536
)

// runOpts are how a test starts a cordon process beyond its arguments.
type runOpts struct {
	env   []string            // cordon's own environment; PATH only when nil
	stdin []byte              // nil: /dev/null
	cred  *syscall.Credential // nil: as the test (root)
	dir   string              // cordon's working directory ("": the test's)
}

// cordonProc is a cordon process started in the background. Its stdout
// and stderr are files, not pipes, so that it counts as ended when cordon
// exits even if a sandbox process it leaked still holds them open.
type cordonProc struct {
	cmd      *exec.Cmd
	out, err *os.File
	done     chan struct{}
	outcome  func() string // descriptor 3 of a run --json (outcomeFD)
}

func (p *cordonProc) stderr() string {
	b, _ := os.ReadFile(p.err.Name())
	return string(b)
}

// startCordon starts cordon --state-dir st ARGS without waiting for it.
func startCordon(t *testing.T, st string, o runOpts, args ...string) *cordonProc {
	t.Helper()
	cmd := exec.Command(cordonBin, append([]string{"--state-dir", st}, args...)...)
	cmd.Env = o.env
	if cmd.Env == nil {
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
	}
	if o.stdin != nil {
		cmd.Stdin = bytes.NewReader(o.stdin)
	}
	if o.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: o.cred}
	}
	cmd.Dir = o.dir
	dir := t.TempDir()
	p := &cordonProc{cmd: cmd, done: make(chan struct{})}
	var err error
	if p.out, err = os.Create(filepath.Join(dir, "stdout")); err != nil {
		t.Fatal(err)
	}
	if p.err, err = os.Create(filepath.Join(dir, "stderr")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.out.Close(); p.err.Close() })
	cmd.Stdout, cmd.Stderr = p.out, p.err
	p.outcome = outcomeFD(t, cmd)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start cordon %v: %v", args, err)
	}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait waits up to within for cordon to end and returns what it did
// (Code -1 when cordon itself was killed by a signal).
func (p *cordonProc) wait(t *testing.T, within time.Duration) result {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("cordon %v: still running after %s\nstderr: %s", p.cmd.Args[1:], within, p.stderr())
	}
	out, _ := os.ReadFile(p.out.Name())
	outcome := ""
	if p.outcome != nil {
		outcome = p.outcome()
	}
	return parseResult(p.cmd.ProcessState.ExitCode(), string(out), p.stderr(), outcome)
}

// runCordon runs cordon to completion (up to a minute).
func runCordon(t *testing.T, st string, o runOpts, args ...string) result {
	t.Helper()
	return startCordon(t, st, o, args...).wait(t, time.Minute)
}

// gcReport is the output of cordon gc --json.
type gcReport struct {
	Reclaimed      []string `json:"reclaimed"`
	Live           []string `json:"live"`
	Unattributable []string `json:"unattributable"`
}

// runGC runs cordon gc --json in st.
func runGC(t *testing.T, st string) gcReport {
	t.Helper()
	r := runCordon(t, st, runOpts{}, "gc", "--json")
	var rep gcReport
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.Stdout)), &rep); r.Code != 0 || err != nil {
		t.Fatalf("cordon gc --json = %d (%v)\nstdout: %s\nstderr: %s", r.Code, err, r.Stdout, r.Stderr)
	}
	return rep
}

// requireNoResidue checks that st holds no record, live or dead.
func requireNoResidue(t *testing.T, st string) {
	t.Helper()
	if rep := runGC(t, st); len(rep.Reclaimed) != 0 || len(rep.Live) != 0 {
		t.Errorf("cordon gc after the runs: reclaimed %v, live %v; want none", rep.Reclaimed, rep.Live)
	}
}

// cgroupDirsOf lists the cgroup directories of sandbox id present on the
// host, in every hierarchy (v1 controllers, the unified tree, pure v2).
func cgroupDirsOf(id string) []string {
	var out []string
	for _, pat := range []string{"/sys/fs/cgroup/cordon/" + id, "/sys/fs/cgroup/*/cordon/" + id} {
		m, _ := filepath.Glob(pat)
		out = append(out, m...)
	}
	return out
}

// cgroupProcsOf is the union of the pids in the cgroup.procs files of id.
func cgroupProcsOf(id string) []int {
	var out []int
	for _, d := range cgroupDirsOf(id) {
		b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 && !slices.Contains(out, pid) {
				out = append(out, pid)
			}
		}
	}
	return out
}

// hostProc is a process as the host's /proc shows it.
type hostProc struct {
	Pid   int
	Comm  string
	State string
	Start string // field 22 of stat: tells a reused pid apart
	UIDs  string // the Uid: line of status
}

func (p hostProc) String() string {
	return fmt.Sprintf("pid %d (%s) state %s uids %s", p.Pid, p.Comm, p.State, p.UIDs)
}

// readHostProc reads pid from /proc; ok is false when it does not exist.
func readHostProc(pid int) (hostProc, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return hostProc{}, false
	}
	s := string(b)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return hostProc{}, false
	}
	rest := strings.Fields(s[closing+1:])
	if len(rest) < 20 {
		return hostProc{}, false
	}
	p := hostProc{Pid: pid, Comm: s[open+1 : closing], State: rest[0], Start: rest[19]}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return hostProc{}, false
	}
	for _, l := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(l, "Uid:"); ok {
			p.UIDs = strings.Join(strings.Fields(v), " ")
		}
	}
	return p, true
}

// running reports whether p still runs: same pid, same start time, not a
// zombie (a zombie runs nothing and holds nothing but its pid).
func (p hostProc) running() bool {
	now, ok := readHostProc(p.Pid)
	return ok && now.Start == p.Start && now.State != "Z"
}

// procsWithUIDIn scans the host's /proc for running processes with any of
// their uids in [lo, hi) that may belong to sandbox id: a process in
// another sandbox's cgroup is that sandbox's (other sandboxes run on this
// host at the same time, and once id's lease is released another one may
// get the same range), so it is left out; one in id's cgroups, or in no
// sandbox's, counts.
func procsWithUIDIn(id string, lo, hi uint64) []hostProc {
	ents, _ := os.ReadDir("/proc")
	var out []hostProc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p, ok := readHostProc(pid)
		if !ok || p.State == "Z" {
			continue
		}
		for _, f := range strings.Fields(p.UIDs) {
			if u, err := strconv.ParseUint(f, 10, 64); err == nil && u >= lo && u < hi {
				if !inOtherSandbox(pid, id) {
					out = append(out, p)
				}
				break
			}
		}
	}
	return out
}

// inOtherSandbox reports whether pid sits in the cgroup of a sandbox other
// than id (read from the host's /proc/PID/cgroup: a sandbox process cannot
// move itself out of its cgroups).
func inOtherSandbox(pid int, id string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		_, rest, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		_, p, _ := strings.Cut(rest, ":")
		if other, ok := strings.CutPrefix(p, "/cordon/"); ok {
			other, _, _ = strings.Cut(other, "/")
			if isSandboxID(other) && other != id {
				return true
			}
		}
	}
	return false
}

// inOtherUserns reports whether pid is in a user namespace other than the
// test's (the host's).
func inOtherUserns(pid int) bool {
	mine, err1 := os.Readlink("/proc/self/ns/user")
	theirs, err2 := os.Readlink(fmt.Sprintf("/proc/%d/ns/user", pid))
	return err1 == nil && err2 == nil && mine != theirs
}

// leaseOf reads the host range a sandbox process's user namespace maps,
// from /proc/PID/uid_map ("0 BASE SIZE").
func leaseOf(t *testing.T, pid int) (lo, hi uint64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", pid))
	if err != nil {
		t.Fatalf("read uid_map of sandbox pid %d: %v", pid, err)
	}
	f := strings.Fields(string(b))
	if len(f) != 3 {
		t.Fatalf("uid_map of sandbox pid %d = %q, want one line of three fields", pid, b)
	}
	lo, _ = strconv.ParseUint(f[1], 10, 64)
	n, _ := strconv.ParseUint(f[2], 10, 64)
	if lo < poolBase || lo+n > poolEnd || n == 0 {
		t.Fatalf("uid_map of sandbox pid %d = %q, want a range inside the lease pool [%#x, %#x)", pid, b, poolBase, poolEnd)
	}
	return lo, lo + n
}

// waitSandboxRunning waits until the one sandbox of st, started by p, runs
// a process named comm, and returns its id and its processes as the host
// sees them.
func waitSandboxRunning(t *testing.T, p *cordonProc, st, comm string) (string, []hostProc) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			r := p.wait(t, time.Second)
			t.Fatalf("cordon %v ended (%d) before its sandbox ran %q\nstderr: %s", p.cmd.Args[1:], r.Code, comm, r.Stderr)
		default:
		}
		if rep := runGC(t, st); len(rep.Live) == 1 {
			id := rep.Live[0]
			var procs []hostProc
			for _, pid := range cgroupProcsOf(id) {
				// cordon's own spawning thread may sit in the sandbox's v1
				// groups for a moment; only the sandbox's user namespace counts.
				if p, ok := readHostProc(pid); ok && inOtherUserns(pid) {
					procs = append(procs, p)
				}
			}
			if slices.ContainsFunc(procs, func(p hostProc) bool { return p.Comm == comm }) {
				return id, procs
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no sandbox of %s ran %q within 20s", st, comm)
	return "", nil
}

// waitGone polls until every process in procs has ended, none runs with a
// uid in [lo, hi) and the cgroups of id hold no process, or fails at
// deadline.
func waitGone(t *testing.T, id string, procs []hostProc, lo, hi uint64, deadline time.Time) {
	t.Helper()
	for {
		var left []string
		for _, p := range procs {
			if p.running() {
				left = append(left, "snapshot "+p.String())
			}
		}
		for _, p := range procsWithUIDIn(id, lo, hi) {
			left = append(left, "leased "+p.String())
		}
		if pids := cgroupProcsOf(id); len(pids) > 0 {
			left = append(left, fmt.Sprintf("cgroup members %v", pids))
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s: at the deadline, still running:\n  %s", id, strings.Join(left, "\n  "))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cgroupWatch sees every cgroup a sandbox creates on the host: inotify on
// the cordon/ directory of each hierarchy. It sees every sandbox on the
// host, this test's and others': see createdDuring.
type cgroupWatch struct{ fd int }

func watchCgroups(t *testing.T) *cgroupWatch {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatalf("inotify_init1: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*/cordon")
	if _, err := os.Stat("/sys/fs/cgroup/cordon"); err == nil {
		dirs = append(dirs, "/sys/fs/cgroup/cordon")
	}
	if len(dirs) == 0 {
		t.Fatal("no cordon cgroup directory to watch: run a sandbox first")
	}
	for _, d := range dirs {
		if _, err := unix.InotifyAddWatch(fd, d, unix.IN_CREATE|unix.IN_ONLYDIR); err != nil {
			t.Fatalf("watch %s: %v", d, err)
		}
	}
	return &cgroupWatch{fd: fd}
}

// created returns the names created since the last call.
func (w *cgroupWatch) created(t *testing.T) []string {
	t.Helper()
	var out []string
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(w.fd, buf)
		if err == unix.EAGAIN || n <= 0 {
			return out
		}
		if err != nil {
			t.Fatalf("read inotify: %v", err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			// Only sandbox ids count (16 hex digits): other packages' tests
			// may create groups of their own under cordon/.
			if s := string(bytes.TrimRight(name, "\x00")); isSandboxID(s) && !slices.Contains(out, s) {
				out = append(out, s)
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
}

// createdDuring runs f and returns the sandbox cgroups created meanwhile.
// The watch sees every sandbox on the host, and other sandboxes run on it
// at the same time: when something was created, f runs again (up to three
// times in all), and only what appears every time is returned — a refused
// request that creates a cgroup does so on every try, while another
// sandbox's creation coinciding three times with a refused request that
// takes milliseconds is not to be expected.
func (w *cgroupWatch) createdDuring(t *testing.T, f func()) []string {
	t.Helper()
	w.created(t) // drain what came before
	var got []string
	for try := 0; try < 3; try++ {
		f()
		got = w.created(t)
		if len(got) == 0 {
			return nil
		}
		t.Logf("try %d: cgroups %v created on the host meanwhile (another sandbox?); trying again", try+1, got)
	}
	return got
}

func isSandboxID(s string) bool {
	return len(s) == 16 && strings.Trim(s, "0123456789abcdef") == ""
}

// evidenceRecord is the part of cordon.evidence/v1 the tests judge.
type evidenceRecord struct {
	Schema          string                                `json:"schema"`
	SandboxID       string                                `json:"sandbox_id"`
	LevelRequested  string                                `json:"level_requested"`
	LevelAdmitted   string                                `json:"level_admitted"`
	EnforcementMode string                                `json:"enforcement_mode"`
	Boundaries      map[string]map[string]json.RawMessage `json:"boundaries"`
	Host            struct {
		Kernel      string            `json:"kernel"`
		Cgroups     map[string]string `json:"cgroup_controllers"`
		LandlockABI *int              `json:"landlock_abi"`
	} `json:"host"`
	Provider struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	} `json:"provider"`
	CordonSHA256 string `json:"cordon_sha256"`
	Lease        struct {
		UID  uint64 `json:"uid"`
		GID  uint64 `json:"gid"`
		Size uint64 `json:"size"`
	} `json:"lease"`
	TCB         []string   `json:"tcb"`
	NonClaims   []string   `json:"non_claims"`
	CreatedAt   time.Time  `json:"created_at"`
	CollectedAt time.Time  `json:"collected_at"`
	FinishedAt  *time.Time `json:"finished_at"`
	Outcome     *struct {
		ExitCode int  `json:"exit_code"`
		Signal   int  `json:"signal"`
		OOM      bool `json:"oom"`
		TimedOut bool `json:"timed_out"`
	} `json:"outcome"`
}

// evidenceFact is one fact of a boundary.
type evidenceFact struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Got    string `json:"got"`
	Source string `json:"source"`
}

func readEvidenceFile(t *testing.T, path string) evidenceRecord {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read --evidence file: %v", err)
	}
	var rec evidenceRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatalf("parse --evidence file: %v\n%s", err, b)
	}
	return rec
}

// facts decodes the facts of boundary name.
func (r evidenceRecord) facts(t *testing.T, name string) []evidenceFact {
	t.Helper()
	var fs []evidenceFact
	if err := json.Unmarshal(r.Boundaries[name]["facts"], &fs); err != nil {
		t.Fatalf("boundary %s: facts: %v", name, err)
	}
	return fs
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// TestRunStdio: stdin reaches the program, its stdout and stderr come out
// on cordon's stdout and stderr, unmixed, byte for byte.
func TestRunStdio(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	st := newStateDir(t)
	var in bytes.Buffer
	for i := 0; in.Len() < 256<<10; i++ { // more than a pipe buffer
		fmt.Fprintf(&in, "line %d of the stdin test\n", i)
	}
	tests := []struct {
		name             string
		stdin            []byte
		argv             []string
		wantOut, wantErr string
	}{
		{"cat echoes stdin", in.Bytes(), []string{"/bin/cat"}, in.String(), ""},
		{"stderr is separate", nil, []string{"/bin/sh", "-c", "echo to-out; echo to-err >&2"}, "to-out\n", "to-err\n"},
		{"no stdin is empty stdin", nil, []string{"/bin/cat"}, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runCordon(t, st, runOpts{stdin: tt.stdin}, append([]string{"run", "--"}, tt.argv...)...)
			if r.Code != 0 {
				t.Fatalf("cordon run %q = %d, want 0\nstderr: %s", tt.argv, r.Code, r.Stderr)
			}
			if r.Stdout != tt.wantOut {
				t.Errorf("cordon run %q: stdout (%d bytes) differs from want (%d bytes): %s", tt.argv, len(r.Stdout), len(tt.wantOut), firstDiff(r.Stdout, tt.wantOut))
			}
			if r.Stderr != tt.wantErr {
				t.Errorf("cordon run %q: stderr = %q, want %q", tt.argv, r.Stderr, tt.wantErr)
			}
		})
	}
	requireNoResidue(t, st)
}

func firstDiff(a, b string) string {
	for i := 0; i < min(len(a), len(b)); i++ {
		if a[i] != b[i] {
			return fmt.Sprintf("first difference at byte %d: %q vs %q", i, a[i:min(i+20, len(a))], b[i:min(i+20, len(b))])
		}
	}
	return fmt.Sprintf("one is a prefix of the other (%d vs %d bytes)", len(a), len(b))
}

// TestRunExitCodes: cordon's exit status is the program's own, 127 for a
// program that is not there, 126 for one that cannot be executed, 128+n
// for one killed by signal n; --json says the same.
func TestRunExitCodes(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	st := newStateDir(t)
	tests := []struct {
		name       string
		argv       []string
		wantCode   int
		wantSignal int
		wantKind   string
	}{
		{"success", []string{"/bin/true"}, 0, 0, ""},
		{"own code", []string{"/bin/sh", "-c", "exit 7"}, 7, 0, ""},
		{"own code 255", []string{"/bin/sh", "-c", "exit 255"}, 255, 0, ""},
		{"not found by path", []string{"/nonexistent/program"}, 127, 0, "exec_failed"},
		{"not found on PATH", []string{"no-such-program-e2e"}, 127, 0, "exec_failed"},
		{"not executable", []string{"/etc/passwd"}, 126, 0, "exec_failed"},
		{"a directory", []string{"/tmp"}, 126, 0, "exec_failed"},
		{"killed by SIGTERM", []string{"/bin/sh", "-c", "kill -TERM $$"}, 143, 15, ""},
		{"killed by SIGKILL", []string{"/bin/sh", "-c", "kill -KILL $$"}, 137, 9, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := runCordon(t, st, runOpts{}, append([]string{"run", "--json", "--"}, tt.argv...)...)
			if r.Code != tt.wantCode {
				t.Errorf("cordon run %q = %d, want %d\nstderr: %s", tt.argv, r.Code, tt.wantCode, r.Stderr)
			}
			o := r.Outcome
			if o.ExitCode != tt.wantCode || o.Signal != tt.wantSignal || o.FailureKind != tt.wantKind {
				t.Errorf("cordon run --json %q: outcome exit_code %d signal %d failure_kind %q, want %d %d %q",
					tt.argv, o.ExitCode, o.Signal, o.FailureKind, tt.wantCode, tt.wantSignal, tt.wantKind)
			}
			if tt.wantKind != "" && !strings.Contains(r.Stderr, tt.argv[0]) {
				t.Errorf("cordon run %q: stderr %q does not name the program", tt.argv, r.Stderr)
			}
		})
	}
	t.Cleanup(func() { requireNoResidue(t, st) })
}

// TestRunEvidence: --json and --evidence describe the run. The evidence
// file is parsed and judged field by field; the binary digest is checked
// against the cordon file on disk.
func TestRunEvidence(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	st := newStateDir(t)
	ev := filepath.Join(t.TempDir(), "evidence.json")
	began := time.Now()
	r := runCordon(t, st, runOpts{}, "run", "--json", "--evidence", ev, "--", "/bin/sh", "-c", "exit 3")
	ended := time.Now()
	if r.Code != 3 {
		t.Fatalf("cordon run exit 3 = %d, want 3\nstderr: %s", r.Code, r.Stderr)
	}
	o := r.Outcome
	if !isSandboxID(o.SandboxID) {
		t.Errorf("outcome sandbox_id = %q, want 16 lowercase hex digits", o.SandboxID)
	}
	if o.LevelRequested != "DEDICATED_CONTAINER" || o.LevelAdmitted != "DEDICATED_CONTAINER" || o.EnforcementMode != "VERIFIED" || o.ExitCode != 3 || len(o.Unverified) != 0 {
		t.Errorf("outcome = %+v, want DEDICATED_CONTAINER requested and admitted, VERIFIED, exit_code 3, nothing unverified", o)
	}

	rec := readEvidenceFile(t, ev)
	for _, c := range []struct{ field, got, want string }{
		{"schema", rec.Schema, "cordon.evidence/v1"},
		{"sandbox_id", rec.SandboxID, o.SandboxID},
		{"level_requested", rec.LevelRequested, "DEDICATED_CONTAINER"},
		{"level_admitted", rec.LevelAdmitted, "DEDICATED_CONTAINER"},
		{"enforcement_mode", rec.EnforcementMode, "VERIFIED"},
		{"provider.name", rec.Provider.Name, "linux-native"},
		{"cordon_sha256", rec.CordonSHA256, fileSHA256(t, cordonBin)},
	} {
		if c.got != c.want {
			t.Errorf("evidence %s = %q, want %q", c.field, c.got, c.want)
		}
	}
	if rec.Provider.Version == "" {
		t.Errorf("evidence provider.version is empty")
	}

	var names []string
	for name, b := range rec.Boundaries {
		names = append(names, name)
		var keys []string
		for k := range b {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if diff := cmp.Diff([]string{"facts", "verified"}, keys); diff != "" {
			t.Errorf("boundary %s keys (-want +got):\n%s", name, diff)
		}
		if string(b["verified"]) != "true" {
			t.Errorf("boundary %s verified = %s, want true", name, b["verified"])
		}
		fs := rec.facts(t, name)
		if len(fs) == 0 {
			t.Errorf("boundary %s has no facts", name)
		}
		for _, f := range fs {
			if f.Name == "" || f.Source == "" || !f.OK {
				t.Errorf("boundary %s fact %+v: want a name, a source and ok", name, f)
			}
		}
	}
	slices.Sort(names)
	if diff := cmp.Diff([]string{"credential", "filesystem", "ipc", "network", "process", "resource"}, names); diff != "" {
		t.Errorf("evidence boundaries (-want +got):\n%s", diff)
	}

	osrelease, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	if k := strings.TrimSpace(string(osrelease)); rec.Host.Kernel != k {
		t.Errorf("evidence host.kernel = %q, want %q", rec.Host.Kernel, k)
	}
	for _, c := range []string{"memory", "pids", "cpu"} {
		if v := rec.Host.Cgroups[c]; v != "v1" && v != "v2" {
			t.Errorf("evidence host.cgroup_controllers[%q] = %q, want v1 or v2", c, v)
		}
	}
	if rec.Host.LandlockABI == nil || *rec.Host.LandlockABI < 1 {
		t.Errorf("evidence host.landlock_abi = %v, want >= 1", rec.Host.LandlockABI)
	}
	if len(rec.CordonSHA256) != 64 {
		t.Errorf("evidence cordon_sha256 = %q, want 64 hex digits", rec.CordonSHA256)
	}
	if l := rec.Lease; l.UID < poolBase || l.UID+l.Size > poolEnd || l.GID != l.UID || l.Size != 65536 {
		t.Errorf("evidence lease = %+v, want a 65536-id slot of the pool [%#x, %#x) with gid == uid", l, poolBase, poolEnd)
	}
	if len(rec.TCB) == 0 || len(rec.NonClaims) == 0 {
		t.Errorf("evidence tcb has %d entries, non_claims %d; want both non-empty", len(rec.TCB), len(rec.NonClaims))
	}
	switch {
	case rec.FinishedAt == nil:
		t.Errorf("evidence finished_at is missing")
	case rec.CreatedAt.Before(began.Add(-time.Second)) || rec.CollectedAt.Before(rec.CreatedAt) ||
		rec.FinishedAt.Before(rec.CollectedAt) || rec.FinishedAt.After(ended.Add(time.Second)):
		t.Errorf("evidence times created %v collected %v finished %v, want in that order within the run [%v, %v]",
			rec.CreatedAt, rec.CollectedAt, *rec.FinishedAt, began, ended)
	}
	if rec.Outcome == nil || rec.Outcome.ExitCode != 3 || rec.Outcome.Signal != 0 || rec.Outcome.OOM || rec.Outcome.TimedOut {
		t.Errorf("evidence outcome = %+v, want exit_code 3 only", rec.Outcome)
	}
	requireNoResidue(t, st)
}

// TestRunEnvironment: the program sees the sandbox defaults plus --env,
// never the environment cordon was started with.
func TestRunEnvironment(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	st := newStateDir(t)
	hostEnv := []string{"PATH=/usr/bin:/bin", "CORDON_E2E_HOST_SECRET=s3cr3t-e2e", "AWS_SECRET_ACCESS_KEY=host-only", "HOME=/root", "TERM=host-term"}
	tests := []struct {
		name   string
		flags  []string
		want   map[string]string // K -> V that must appear exactly once
		absent []string          // keys that must not appear
	}{
		{
			name: "defaults",
			want: map[string]string{
				"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
				"HOME": "/home/agent", "LANG": "C.UTF-8", "TERM": "xterm-256color",
			},
			absent: []string{"CORDON_E2E_HOST_SECRET", "AWS_SECRET_ACCESS_KEY", "CORDON_STATE_DIR"},
		},
		{
			name:   "--env overrides and adds",
			flags:  []string{"--env", "TERM=dumb", "--env", "FOO=bar=baz", "--env", "EMPTY="},
			want:   map[string]string{"TERM": "dumb", "FOO": "bar=baz", "EMPTY": "", "HOME": "/home/agent"},
			absent: []string{"CORDON_E2E_HOST_SECRET"},
		},
		{
			name:  "last --env wins",
			flags: []string{"--env", "X=1", "--env", "X=2"},
			want:  map[string]string{"X": "2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runCordon(t, st, runOpts{env: hostEnv}, probeArgs(tt.flags, "env")...)
			if r.Code != 0 || !r.Probe.OK {
				t.Fatalf("probe env %v = %d %+v\nstderr: %s", tt.flags, r.Code, r.Probe, r.Stderr)
			}
			seen := map[string][]string{}
			for _, kv := range strings.Split(r.Probe.Data, "\n") {
				k, v, _ := strings.Cut(kv, "=")
				seen[k] = append(seen[k], v)
			}
			for k, v := range tt.want {
				if got := seen[k]; len(got) != 1 || got[0] != v {
					t.Errorf("probe env %v: %s = %q, want exactly [%q]", tt.flags, k, got, v)
				}
			}
			for _, k := range tt.absent {
				if got, ok := seen[k]; ok {
					t.Errorf("probe env %v: %s = %q, want absent (host environment leaked)", tt.flags, k, got)
				}
			}
			if strings.Contains(r.Probe.Data, "s3cr3t-e2e") || strings.Contains(r.Probe.Data, "host-term") {
				t.Errorf("probe env %v: a host value reached the program:\n%s", tt.flags, r.Probe.Data)
			}
		})
	}
	requireNoResidue(t, st)
}

// TestRunWorkspace: the program works in /workspace; what it creates
// there belongs on the host to the directory's owner, never to the lease.
func TestRunWorkspace(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	st := newStateDir(t)
	const owner = 2345
	ws := filepath.Join(t.TempDir(), "ws")
	if err := os.Mkdir(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	seed := filepath.Join(ws, "seed")
	if err := os.WriteFile(seed, []byte("from the host\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{ws, seed} {
		if err := os.Chown(p, owner, owner); err != nil {
			t.Fatal(err)
		}
	}
	script := `pwd; cat seed; mkdir -p sub/deeper; echo nested > sub/deeper/f; echo top > top; ln -s top link`
	r := runCordon(t, st, runOpts{}, "run", "--workspace", ws, "--", "/bin/sh", "-c", script)
	if r.Code != 0 {
		t.Fatalf("cordon run --workspace = %d, want 0\nstderr: %s", r.Code, r.Stderr)
	}
	if want := "/workspace\nfrom the host\n"; r.Stdout != want {
		t.Errorf("in the workspace: stdout = %q, want %q (cwd /workspace, the owner's 0600 file readable)", r.Stdout, want)
	}
	// Observed after the run, on the host.
	for _, c := range []struct{ path, content string }{
		{"sub", ""}, {"sub/deeper", ""}, {"sub/deeper/f", "nested\n"}, {"top", "top\n"}, {"link", ""},
	} {
		p := filepath.Join(ws, c.path)
		var sb unix.Stat_t
		if err := unix.Lstat(p, &sb); err != nil {
			t.Errorf("host lstat %s: %v (the file did not persist)", c.path, err)
			continue
		}
		if sb.Uid != owner || sb.Gid != owner {
			t.Errorf("host lstat %s: owner %d:%d, want %d:%d (lease range starts at %#x)", c.path, sb.Uid, sb.Gid, owner, owner, poolBase)
		}
		if c.content != "" {
			if b, err := os.ReadFile(p); err != nil || string(b) != c.content {
				t.Errorf("host read %s = %q, %v; want %q", c.path, b, err, c.content)
			}
		}
	}
	requireNoResidue(t, st)
}

// TestRunUnsafeRootWorkspace: a root-owned workspace is refused unless
// --unsafe-root-workspace, and then the files belong to its owner, root.
func TestRunUnsafeRootWorkspace(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	st := newStateDir(t)
	ws := t.TempDir() // owned by root
	r := runCordon(t, st, runOpts{}, "run", "--json", "--workspace", ws, "--", "/bin/sh", "-c", "echo x > f")
	if r.Code != 125 || !strings.Contains(r.Stderr, "--unsafe-root-workspace") || r.Outcome.SandboxID != "" {
		t.Errorf("cordon run --workspace ROOT-OWNED = %d, sandbox %q, stderr %q; want 125, no sandbox, naming --unsafe-root-workspace", r.Code, r.Outcome.SandboxID, r.Stderr)
	}
	if _, err := os.Lstat(filepath.Join(ws, "f")); err == nil {
		t.Errorf("refused run: %s/f exists on the host", ws)
	}
	r = runCordon(t, st, runOpts{}, "run", "--unsafe-root-workspace", "--workspace", ws, "--", "/bin/sh", "-c", "echo x > f")
	if r.Code != 0 {
		t.Fatalf("cordon run --unsafe-root-workspace = %d, want 0\nstderr: %s", r.Code, r.Stderr)
	}
	if !strings.Contains(r.Stderr, "UNSAFE") || !strings.Contains(r.Stderr, "--unsafe-root-workspace") {
		t.Errorf("cordon run --unsafe-root-workspace: stderr %q, want a warning naming the unsafe option", r.Stderr)
	}
	var sb unix.Stat_t
	if err := unix.Lstat(filepath.Join(ws, "f"), &sb); err != nil || sb.Uid != 0 || sb.Gid != 0 {
		t.Errorf("host lstat f = %d:%d, %v; want 0:0 (the directory's owner, not the lease)", sb.Uid, sb.Gid, err)
	}
	requireNoResidue(t, st)
}

// TestRunWorkspaceRefused: workspaces that are not plain absolute
// directories are refused with 125 before any host resource is created,
// which the test sees through inotify on the cgroup trees. Sequential: the
// watch sees every sandbox on the host.
func TestRunWorkspaceRefused(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	mustMkdirOwned(t, filepath.Join(real, "ws"), 2345)
	if err := os.Symlink(filepath.Join(real, "ws"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(dir, "ancestor")); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chown(file, 2345, 2345)
	rootOwned := filepath.Join(dir, "rootowned")
	if err := os.Mkdir(rootOwned, 0o755); err != nil {
		t.Fatal(err)
	}

	// Positive control: the real workspace works, and the watch sees the
	// sandbox's cgroups being created.
	if r := runCordon(t, st, runOpts{}, "run", "--", "/bin/true"); r.Code != 0 {
		t.Fatalf("cordon run /bin/true = %d\nstderr: %s", r.Code, r.Stderr)
	}
	w := watchCgroups(t)
	r := runCordon(t, st, runOpts{}, "run", "--json", "--workspace", filepath.Join(real, "ws"), "--", "/bin/true")
	if r.Code != 0 {
		t.Fatalf("cordon run --workspace %s = %d, want 0\nstderr: %s", filepath.Join(real, "ws"), r.Code, r.Stderr)
	}
	if got := w.created(t); !slices.Contains(got, r.Outcome.SandboxID) {
		t.Fatalf("control: the watch saw %v created, want %q among them", got, r.Outcome.SandboxID)
	}

	tests := []struct {
		name, workspace, wantErr string
	}{
		{"symlink", filepath.Join(dir, "link"), "symlink"},
		{"symlink in an ancestor", filepath.Join(dir, "ancestor", "ws"), "symlink"},
		// Relative paths resolve against cordon's working directory (the
		// test's: e2e/), where these do not exist.
		{"relative", "real/ws", "no such file"},
		{"dot-dot relative", "../ws", "no such file"},
		{"regular file", file, "not a directory"},
		{"missing", filepath.Join(dir, "missing"), "no such file"},
		{"owned by root", rootOwned, "--unsafe-root-workspace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := w.createdDuring(t, func() {
				r := runCordon(t, st, runOpts{}, "run", "--json", "--workspace", tt.workspace, "--", "/bin/true")
				if r.Code != 125 || !strings.Contains(r.Stderr, tt.wantErr) {
					t.Errorf("cordon run --workspace %q = %d, stderr %q; want 125 mentioning %q", tt.workspace, r.Code, r.Stderr, tt.wantErr)
				}
				if r.Outcome.SandboxID != "" {
					t.Errorf("cordon run --workspace %q: outcome names sandbox %q, want none provisioned", tt.workspace, r.Outcome.SandboxID)
				}
			}); len(got) != 0 {
				t.Errorf("cordon run --workspace %q: cgroups %v were created on the host, want none", tt.workspace, got)
			}
		})
	}
	requireNoResidue(t, st)
}

func mustMkdirOwned(t *testing.T, p string, uid int) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, uid, uid); err != nil {
		t.Fatal(err)
	}
}

// TestRunSignals: SIGTERM or SIGINT to cordon reaches the program; cordon
// exits 128+n soon after and nothing of the sandbox is left running.
// Sequential: it scans the host for processes in the leased range.
func TestRunSignals(t *testing.T) {
	testkit.RequireRoot(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		t.Run(unix.SignalName(sig), func(t *testing.T) {
			st := newStateDir(t)
			p := startCordon(t, st, runOpts{}, "run", "--json", "--", "/bin/sleep", "30")
			id, procs := waitSandboxRunning(t, p, st, "sleep")
			lo, hi := leaseOf(t, procs[0].Pid)
			sent := time.Now()
			if err := p.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			r := p.wait(t, 10*time.Second)
			took := time.Since(sent)
			if want := 128 + int(sig); r.Code != want || r.Outcome.Signal != int(sig) {
				t.Errorf("cordon run sleep, sent %v = %d (outcome signal %d), want %d (signal %d)", sig, r.Code, r.Outcome.Signal, want, int(sig))
			}
			if took > 5*time.Second {
				t.Errorf("cordon run sleep, sent %v: exited after %s, want within 5s", sig, took)
			}
			waitGone(t, id, procs, lo, hi, time.Now().Add(2*time.Second))
			if d := cgroupDirsOf(id); len(d) != 0 {
				t.Errorf("after %v: cgroup dirs %v remain, want removed", sig, d)
			}
			requireNoResidue(t, st)
		})
	}
}

// TestRunTimeout: --timeout kills the program and cordon exits 124.
func TestRunTimeout(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	st := newStateDir(t)
	began := time.Now()
	r := runCordon(t, st, runOpts{}, "run", "--json", "--timeout", "1s", "--", "/bin/sleep", "30")
	took := time.Since(began)
	if r.Code != 124 || !r.Outcome.TimedOut || r.Outcome.ExitCode != 124 {
		t.Errorf("cordon run --timeout 1s sleep 30 = %d, outcome %+v; want 124 and timed_out", r.Code, r.Outcome)
	}
	if took < time.Second || took > 6*time.Second {
		t.Errorf("cordon run --timeout 1s sleep 30 took %s, want between 1s and 6s", took)
	}
	if !strings.Contains(r.Stderr, "timeout") {
		t.Errorf("stderr %q does not mention the timeout", r.Stderr)
	}
	if d := cgroupDirsOf(r.Outcome.SandboxID); len(d) != 0 {
		t.Errorf("after the timeout: cgroup dirs %v remain, want removed", d)
	}
	// A program that ends in time is not touched by the timeout.
	if r := runCordon(t, st, runOpts{}, "run", "--json", "--timeout", "30s", "--", "/bin/sh", "-c", "exit 5"); r.Code != 5 || r.Outcome.TimedOut {
		t.Errorf("cordon run --timeout 30s exit 5 = %d, outcome %+v; want 5, not timed out", r.Code, r.Outcome)
	}
	requireNoResidue(t, st)
}

// TestRunSIGKILLResidue: when cordon itself is SIGKILLed, the sandbox dies
// with it (parent-death signal to the init ends the PID namespace); what
// remains on the host is the cgroups and the lease record, which cordon gc
// or the next cordon run reclaims. Sequential: it scans the leased range.
func TestRunSIGKILLResidue(t *testing.T) {
	testkit.RequireRoot(t)
	tests := []struct {
		name    string
		reclaim func(t *testing.T, st string) (reclaimed []string, nextLease uint64)
	}{
		{"cordon gc", func(t *testing.T, st string) ([]string, uint64) {
			return runGC(t, st).Reclaimed, 0
		}},
		{"next cordon run", func(t *testing.T, st string) ([]string, uint64) {
			ev := filepath.Join(t.TempDir(), "ev.json")
			if r := runCordon(t, st, runOpts{}, "run", "--evidence", ev, "--", "/bin/true"); r.Code != 0 {
				t.Fatalf("next cordon run = %d\nstderr: %s", r.Code, r.Stderr)
			}
			return nil, readEvidenceFile(t, ev).Lease.UID
		}},
	}
	// nextRun leases again in st; used when another sandbox on the host
	// may have held the reclaimed slot during the first try.
	nextRun := func(t *testing.T, st string) uint64 {
		ev := filepath.Join(t.TempDir(), "ev.json")
		if r := runCordon(t, st, runOpts{}, "run", "--evidence", ev, "--", "/bin/true"); r.Code != 0 {
			t.Fatalf("next cordon run = %d\nstderr: %s", r.Code, r.Stderr)
		}
		return readEvidenceFile(t, ev).Lease.UID
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newStateDir(t)
			t.Cleanup(func() {
				if t.Failed() {
					runGC(t, st) // the owner is dead: gc kills what is left
				}
			})
			p := startCordon(t, st, runOpts{}, "run", "--", "/bin/sleep", "60")
			id, procs := waitSandboxRunning(t, p, st, "sleep")
			lo, hi := leaseOf(t, procs[0].Pid)
			killed := time.Now()
			if err := p.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			p.wait(t, 2*time.Second)
			// Nobody tells the sandbox: the kernel's parent-death signal
			// must end its init, and with it the PID namespace.
			waitGone(t, id, procs, lo, hi, killed.Add(2*time.Second))

			if d := cgroupDirsOf(id); len(d) == 0 {
				t.Errorf("after SIGKILL of cordon: no cgroup dir of %s remains, want the residue to be there", id)
			}
			if d := cgroupDirsOf(id + "--gw"); len(d) == 0 {
				t.Errorf("after SIGKILL of cordon: no gateway cgroup dir of %s remains, want the residue to be there", id)
			}
			reclaimed, nextLease := tt.reclaim(t, st)
			if reclaimed != nil && !slices.Contains(reclaimed, id) {
				t.Errorf("%s: reclaimed %v, want %s among them", tt.name, reclaimed, id)
			}
			// The store hands out its lowest slot whose host-wide lock it
			// can take: the reclaimed slot again, unless a lower one became
			// free or another state dir's sandbox (other runs share this
			// host) holds it at that moment. Only a store that skips the
			// reclaimed slot while nobody holds it fails.
			for try := 0; nextLease > lo && try < 5; try++ {
				if leaseLockHeld(t, lo, hi-lo) {
					t.Logf("%s: slot %d is held by another sandbox on this host; the next run took %d", tt.name, lo, nextLease)
					nextLease = 0
					break
				}
				nextLease = nextRun(t, st)
			}
			if nextLease > lo {
				t.Errorf("%s: the next sandbox leased uid %d while the reclaimed slot %d was free, want the reclaimed slot", tt.name, nextLease, lo)
			}
			if d := cgroupDirsOf(id); len(d) != 0 {
				t.Errorf("%s: cgroup dirs %v remain, want removed", tt.name, d)
			}
			if d := cgroupDirsOf(id + "--gw"); len(d) != 0 {
				t.Errorf("%s: gateway cgroup dirs %v remain, want removed", tt.name, d)
			}
			requireNoResidue(t, st)
		})
	}
}

// leaseLockHeld reports whether some process holds the host-wide lock of
// the lease range [uid, uid+size) (see leaselock_linux.go).
func leaseLockHeld(t *testing.T, uid, size uint64) bool {
	t.Helper()
	fd, err := unix.Open(fmt.Sprintf("/run/cordon/leases/%d-%d.lock", uid, size), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	return unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) == unix.EWOULDBLOCK
}

// TestRunConcurrentLeases: two sandboxes alive at once get different ids
// and disjoint UID/GID ranges.
func TestRunConcurrentLeases(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	st := newStateDir(t)
	dir := t.TempDir()
	var ps []*cordonProc
	var evs []string
	for i := range 2 {
		ev := filepath.Join(dir, fmt.Sprintf("ev%d.json", i))
		evs = append(evs, ev)
		ps = append(ps, startCordon(t, st, runOpts{}, "run", "--evidence", ev, "--", "/bin/sleep", "2"))
	}
	var recs []evidenceRecord
	for i, p := range ps {
		if r := p.wait(t, 30*time.Second); r.Code != 0 {
			t.Fatalf("sandbox %d = %d\nstderr: %s", i, r.Code, r.Stderr)
		}
		recs = append(recs, readEvidenceFile(t, evs[i]))
	}
	a, b := recs[0], recs[1]
	if !a.CollectedAt.Before(*b.FinishedAt) || !b.CollectedAt.Before(*a.FinishedAt) {
		t.Fatalf("the two sandboxes did not overlap in time (%v–%v, %v–%v); the test proves nothing", a.CollectedAt, *a.FinishedAt, b.CollectedAt, *b.FinishedAt)
	}
	if a.SandboxID == b.SandboxID {
		t.Errorf("both sandboxes have id %s", a.SandboxID)
	}
	if a.Lease.UID < b.Lease.UID+b.Lease.Size && b.Lease.UID < a.Lease.UID+a.Lease.Size {
		t.Errorf("leases overlap: %+v and %+v", a.Lease, b.Lease)
	}
	requireNoResidue(t, st)
}

// TestRunFreshStateDirConcurrent: two cordon processes opening a new
// state directory at the same moment both work (the first one switches
// the new database to WAL, which SQLite does without waiting on its busy
// handler).
func TestRunFreshStateDirConcurrent(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	for i := range 25 {
		st := newStateDir(t)
		run := startCordon(t, st, runOpts{}, "run", "--", "/bin/true")
		gc := startCordon(t, st, runOpts{}, "gc", "--json")
		for _, p := range []*cordonProc{run, gc} {
			if r := p.wait(t, time.Minute); r.Code != 0 {
				t.Fatalf("round %d: cordon %q = %d, want 0\nstderr: %s", i, p.cmd.Args[3:], r.Code, r.Stderr)
			}
		}
	}
}

// TestRunLeaseExhausted: with one lease slot, a second concurrent sandbox
// is refused with lease_exhausted; once the first ends the slot is free.
// Lease slots are claimed host-wide, so another sandbox on this host (other
// state dirs, other tests) may hold the one slot for a while: the runs that
// must get it wait for such a holder, and only a refusal while nobody else
// holds the slot fails.
func TestRunLeaseExhausted(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	const slot0, size = 0x40000000, 65536 // store.DefaultPool's first range
	// waitSlotFree waits (up to 30s) until no process holds slot 0.
	waitSlotFree := func() {
		for deadline := time.Now().Add(30 * time.Second); leaseLockHeld(t, slot0, size) && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
		}
	}
	var first *cordonProc
	for try := 0; ; try++ {
		waitSlotFree()
		first = startCordon(t, st, runOpts{}, "--lease-slots", "1", "run", "--json", "--", "/bin/sleep", "30")
		if ok := waitRunningOrRefused(t, first, st, "sleep"); ok {
			break
		}
		if try == 5 {
			t.Fatalf("the first sandbox never got the one slot (held by other sandboxes on this host each time)")
		}
	}
	r := runCordon(t, st, runOpts{}, "--lease-slots", "1", "run", "--json", "--", "/bin/true")
	if r.Code != 125 || r.Outcome.FailureKind != "lease_exhausted" || r.Stderr == "" {
		t.Errorf("second sandbox with one slot = %d, failure_kind %q, stderr %q; want 125 lease_exhausted", r.Code, r.Outcome.FailureKind, r.Stderr)
	}
	first.cmd.Process.Signal(syscall.SIGTERM)
	if r := first.wait(t, 10*time.Second); r.Code != 143 {
		t.Errorf("first sandbox after SIGTERM = %d, want 143\nstderr: %s", r.Code, r.Stderr)
	}
	for try := 0; ; try++ {
		r := runCordon(t, st, runOpts{}, "--lease-slots", "1", "run", "--json", "--", "/bin/true")
		if r.Code == 0 {
			break
		}
		if r.Outcome.FailureKind != "lease_exhausted" || !leaseLockHeld(t, slot0, size) || try == 5 {
			t.Fatalf("sandbox after the first ended = %d, want 0 (slot released)\nstderr: %s", r.Code, r.Stderr)
		}
		t.Logf("slot 0 is held by another sandbox on this host; waiting for it")
		waitSlotFree()
	}
	requireNoResidue(t, st)
}

// waitRunningOrRefused waits until p's sandbox runs comm (true), or p
// ended refused with lease_exhausted (false); anything else fails.
func waitRunningOrRefused(t *testing.T, p *cordonProc, st, comm string) bool {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			r := p.wait(t, time.Second)
			if r.Code == 125 && r.Outcome.FailureKind == "lease_exhausted" {
				return false
			}
			t.Fatalf("cordon %v ended (%d) before its sandbox ran %q\nstderr: %s", p.cmd.Args[1:], r.Code, comm, r.Stderr)
		default:
		}
		if rep := runGC(t, st); len(rep.Live) == 1 {
			for _, pid := range cgroupProcsOf(rep.Live[0]) {
				if hp, ok := readHostProc(pid); ok && inOtherUserns(pid) && hp.Comm == comm {
					return true
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no sandbox of %s ran %q within 20s", st, comm)
	return false
}

// TestRunRefusesBadInput: invalid requests exit 125 with a message and
// create nothing on the host (inotify on the cgroup trees, then gc).
// Sequential: the watch sees every sandbox on the host.
func TestRunRefusesBadInput(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	if r := runCordon(t, st, runOpts{}, "run", "--", "/bin/true"); r.Code != 0 {
		t.Fatalf("control cordon run /bin/true = %d\nstderr: %s", r.Code, r.Stderr)
	}
	w := watchCgroups(t)
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"unknown flag", []string{"run", "--bogus", "--", "/bin/true"}, "unknown flag"},
		{"program without --", []string{"run", "/bin/true"}, "--"},
		{"no program", []string{"run"}, "arg"},
		{"no program after --", []string{"run", "--"}, "arg"},
		{"memory too small", []string{"run", "--memory", "1K", "--", "/bin/true"}, "too small"},
		{"memory not a size", []string{"run", "--memory", "abc", "--", "/bin/true"}, "--memory"},
		{"pids too small", []string{"run", "--pids", "3", "--", "/bin/true"}, "--pids"},
		{"pids negative", []string{"run", "--pids", "-5", "--", "/bin/true"}, "--pids"},
		{"cpus negative", []string{"run", "--cpus", "-1", "--", "/bin/true"}, "--cpus"},
		{"cpus NaN", []string{"run", "--cpus", "NaN", "--", "/bin/true"}, "--cpus"},
		{"cpus Inf", []string{"run", "--cpus", "Inf", "--", "/bin/true"}, "--cpus"},
		{"timeout negative", []string{"run", "--timeout", "-1s", "--", "/bin/true"}, "--timeout"},
		{"env without =", []string{"run", "--env", "NOEQUALS", "--", "/bin/true"}, "K=V"},
		{"env empty key", []string{"run", "--env", "=v", "--", "/bin/true"}, "K=V"},
		{"unknown level", []string{"run", "--level", "BOGUS", "--", "/bin/true"}, "BOGUS"},
		{"DEDICATED_VM", []string{"run", "--level", "DEDICATED_VM", "--", "/bin/true"}, "no provider"},
		{"ro relative target", []string{"run", "--ro", "relative:path", "--", "/bin/true"}, "SANDBOX path must be absolute"},
		{"ro relative target after an absolute host", []string{"run", "--ro", probeDir + ":rel", "--", "/bin/true"}, "absolute"},
		{"ro missing", []string{"run", "--ro", "/nonexistent-e2e", "--", "/bin/true"}, "no such file"},
		{"ro /proc", []string{"run", "--ro", "/proc", "--", "/bin/true"}, "may not be bound"},
		{"ro /sys", []string{"run", "--ro", "/sys/kernel:/k", "--", "/bin/true"}, "may not be bound"},
		{"rw /", []string{"run", "--rw", "/", "--", "/bin/true"}, "may not be bound"},
		{"ro onto /proc", []string{"run", "--ro", probeDir + ":/proc", "--", "/bin/true"}, "reserved"},
		{"ro onto /etc", []string{"run", "--ro", probeDir + ":/etc/x", "--", "/bin/true"}, "reserved"},
		{"ro the state dir", []string{"run", "--ro", st + ":/s", "--", "/bin/true"}, "state directory"},
		{"rootfs relative, resolved in the working directory", []string{"run", "--rootfs", "relative", "--", "/bin/true"}, "e2e/relative: no such file"},
		{"rootfs /", []string{"run", "--rootfs", "/", "--", "/bin/true"}, "may not be a sandbox root"},
		{"tmp-size too small", []string{"run", "--tmp-size", "1K", "--", "/bin/true"}, "--tmp-size"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := w.createdDuring(t, func() {
				r := runCordon(t, st, runOpts{}, tt.args...)
				if r.Code != 125 || !strings.Contains(r.Stderr, tt.wantErr) {
					t.Errorf("cordon %q = %d, stderr %q; want 125 with a message mentioning %q", tt.args, r.Code, r.Stderr, tt.wantErr)
				}
			}); len(got) != 0 {
				t.Errorf("cordon %q: cgroups %v were created on the host, want none", tt.args, got)
			}
		})
	}
	requireNoResidue(t, st)
}

// TestRunDoctor: doctor proves DEDICATED_CONTAINER with a probe sandbox.
func TestRunDoctor(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	st := newStateDir(t)
	r := runCordon(t, st, runOpts{}, "doctor")
	if r.Code != 0 || !strings.Contains(r.Stdout, "DEDICATED_CONTAINER") {
		t.Errorf("cordon doctor = %d, stdout %q; want 0 naming DEDICATED_CONTAINER\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	r = runCordon(t, st, runOpts{}, "doctor", "--json")
	var rep struct {
		OK    bool `json:"ok"`
		Probe *struct {
			LevelAdmitted string          `json:"level_admitted"`
			Boundaries    map[string]bool `json:"boundaries"`
			ExitCode      int             `json:"exit_code"`
		} `json:"probe_sandbox"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.Stdout)), &rep); err != nil || r.Code != 0 {
		t.Fatalf("cordon doctor --json = %d (%v)\nstdout: %s\nstderr: %s", r.Code, err, r.Stdout, r.Stderr)
	}
	if !rep.OK || rep.Probe == nil || rep.Probe.LevelAdmitted != "DEDICATED_CONTAINER" || rep.Probe.ExitCode != 0 {
		t.Fatalf("cordon doctor --json: ok %v, probe_sandbox %+v; want ok, DEDICATED_CONTAINER, exit 0", rep.OK, rep.Probe)
	}
	want := map[string]bool{"credential": true, "filesystem": true, "ipc": true, "network": true, "process": true, "resource": true}
	if diff := cmp.Diff(want, rep.Probe.Boundaries); diff != "" {
		t.Errorf("cordon doctor --json boundaries (-want +got):\n%s", diff)
	}
	requireNoResidue(t, st)
}

// TestRunNonRoot: without root cordon refuses, says what it needs, and
// creates nothing.
func TestRunNonRoot(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	st := newStateDir(t)
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}
	for _, args := range [][]string{{"run", "--", "/bin/true"}, {"gc"}, {"doctor"}} {
		r := runCordon(t, st, runOpts{cred: nobody}, args...)
		if r.Code != 125 || !strings.Contains(r.Stderr, "root") || !strings.Contains(r.Stderr, "sudo") {
			t.Errorf("cordon %q as uid 65534 = %d, stderr %q; want 125 mentioning root and sudo", args, r.Code, r.Stderr)
		}
	}
	if ents, _ := os.ReadDir(st); len(ents) != 0 {
		t.Errorf("state dir after the refused runs holds %d entries, want none", len(ents))
	}
}

// TestRunRootfs: --rootfs runs the program on that tree, read-only,
// instead of the host's /usr layout.
func TestRunRootfs(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	st := newStateDir(t)
	root := filepath.Join(t.TempDir(), "rootfs")
	for _, d := range []string{"proc", "dev", "tmp", "bin", "home/agent"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	probe, err := os.ReadFile(filepath.Join(probeDir, "probe"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "probe"), probe, 0o755); err != nil {
		t.Fatal(err)
	}
	marker := fmt.Sprintf("tiny rootfs %d\n", time.Now().UnixNano())
	if err := os.WriteFile(filepath.Join(root, "marker"), []byte(marker), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		argv     []string
		wantCode int
		wantOK   bool
		wantData string
	}{
		{"marker is visible", []string{"/bin/probe", "read", "/marker"}, 0, true, marker},
		{"host /etc is not", []string{"/bin/probe", "read", "/etc/passwd"}, 0, false, ""},
		{"root is read-only", []string{"/bin/probe", "write", "/marker"}, 0, false, ""},
		{"host /bin/sh is not", []string{"/bin/sh", "-c", "true"}, 127, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runCordon(t, st, runOpts{}, append([]string{"run", "--json", "--rootfs", root, "--"}, tt.argv...)...)
			if r.Code != tt.wantCode || (tt.wantCode == 0 && r.Outcome.LevelAdmitted != "DEDICATED_CONTAINER") {
				t.Fatalf("cordon run --rootfs %q = %d admitted %q, want %d DEDICATED_CONTAINER\nstderr: %s", tt.argv, r.Code, r.Outcome.LevelAdmitted, tt.wantCode, r.Stderr)
			}
			if tt.wantCode == 0 && (r.Probe.OK != tt.wantOK || r.Probe.Data != tt.wantData) {
				t.Errorf("cordon run --rootfs %q: probe %+v, want ok=%v data %q", tt.argv, r.Probe, tt.wantOK, tt.wantData)
			}
		})
	}
	if b, err := os.ReadFile(filepath.Join(root, "marker")); err != nil || string(b) != marker {
		t.Errorf("host marker after the runs = %q, %v; want unchanged %q", b, err, marker)
	}
	requireNoResidue(t, st)
}
