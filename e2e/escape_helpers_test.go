package e2e

// Helpers for the escape tests: sandboxes held open while the host looks
// at them through /proc, the probe run directly on the host (the positive
// controls that show a test can see a success), and re-executed children
// of this test binary that install the seccomp filter on the host.

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// wsOwner owns the test workspaces: a user, so cordon idmaps them onto the
// program's uid, and a uid that exists nowhere else on the host.
const wsOwner = 2345

// randHex returns n random bytes in hex.
func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// workspace returns a fresh workspace directory owned by wsOwner.
func workspace(t *testing.T) string {
	t.Helper()
	d := filepath.Join(t.TempDir(), "ws")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(d, wsOwner, wsOwner); err != nil {
		t.Fatal(err)
	}
	return d
}

// attempts decodes the per-attempt map an escape op puts in Data.
func attempts(t *testing.T, p ProbeResult) map[string]string {
	t.Helper()
	if !p.OK {
		t.Fatalf("probe %s failed: %s (%s)", p.Op, p.Err, p.Errno)
	}
	m := map[string]string{}
	if err := json.Unmarshal([]byte(p.Data), &m); err != nil {
		t.Fatalf("probe %s data %q: %v", p.Op, p.Data, err)
	}
	return m
}

// wantAttempts checks every listed attempt's reported outcome.
func wantAttempts(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			t.Errorf("%s: attempt %q = %q, want %q (all: %v)", what, k, g, w, got)
		}
	}
}

func parseProbe(out string) ProbeResult {
	var p ProbeResult
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimRight(l, "\r")
		// On a terminal the line may follow what the terminal echoed.
		if i := strings.Index(l, `{"op"`); i >= 0 {
			_ = json.Unmarshal([]byte(l[i:]), &p)
			break
		}
	}
	return p
}

// hostProbe runs the probe directly on the host, unsandboxed, as root or
// with cred: the positive control that shows the probe's attempt works
// and that the test sees its effect.
func hostProbe(t *testing.T, cred *syscall.Credential, op string, args ...string) ProbeResult {
	t.Helper()
	cmd := exec.Command(filepath.Join(probeDir, "probe"), append([]string{op}, args...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	p := parseProbe(string(out))
	if p.Op == "" {
		t.Fatalf("host probe %s %v: %v, no result\nstdout: %s\nstderr: %s", op, args, err, out, errb.String())
	}
	return p
}

// held is a cordon run whose program was started under the probe's hold
// op: it printed its result and now waits until its stdin is closed.
type held struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  *os.File
	lines  chan string
	mu     sync.Mutex
	out    bytes.Buffer
	errb   bytes.Buffer
	waited chan struct{}
	Probe  ProbeResult
	// outcome reads descriptor 3 of a run --json (outcomeFD).
	outcome func() string
}

// startHeld starts bin with args (which must run the probe's hold op) and
// waits for the probe's result line.
func startHeld(t *testing.T, bin, state string, args ...string) *held {
	t.Helper()
	h := &held{t: t, lines: make(chan string, 64), waited: make(chan struct{})}
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	h.stdin = inW
	h.cmd = exec.Command(bin, append([]string{"--state-dir", state}, args...)...)
	h.cmd.Env = []string{"PATH=/usr/bin:/bin"}
	h.cmd.Stdin, h.cmd.Stdout, h.cmd.Stderr = inR, outW, &h.errb
	h.outcome = outcomeFD(t, h.cmd)
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	inR.Close()
	outW.Close()
	go func() {
		defer close(h.lines)
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			h.mu.Lock()
			h.out.WriteString(sc.Text() + "\n")
			h.mu.Unlock()
			h.lines <- sc.Text()
		}
		outR.Close()
	}()
	go func() {
		_ = h.cmd.Wait()
		close(h.waited)
	}()
	t.Cleanup(func() {
		h.stdin.Close()
		select {
		case <-h.waited:
		case <-time.After(30 * time.Second):
			h.cmd.Process.Kill()
			<-h.waited
		}
	})
	deadline := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-h.lines:
			if !ok {
				<-h.waited
				t.Fatalf("cordon %v ended before the probe reported (exit %d)\nstdout: %s\nstderr: %s", args, h.cmd.ProcessState.ExitCode(), h.stdout(), h.errb.String())
			}
			if strings.HasPrefix(l, `{"op"`) {
				if err := json.Unmarshal([]byte(l), &h.Probe); err != nil {
					t.Fatalf("probe line %q: %v", l, err)
				}
				return h
			}
		case <-deadline:
			t.Fatalf("cordon %v: no probe result within 60s\nstderr: %s", args, h.errb.String())
		}
	}
}

func (h *held) stdout() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.out.String()
}

// pids returns the host pids of the sandbox init and of the program.
func (h *held) pids() (initPid, progPid int) {
	h.t.Helper()
	inits := childPids(h.cmd.Process.Pid)
	if len(inits) != 1 {
		h.t.Fatalf("cordon %d has children %v, want exactly the sandbox init", h.cmd.Process.Pid, inits)
	}
	progs := childPids(inits[0])
	if len(progs) != 1 {
		h.t.Fatalf("sandbox init %d has children %v, want exactly the program", inits[0], progs)
	}
	return inits[0], progs[0]
}

// finish releases the probe and waits for cordon to end.
func (h *held) finish() result {
	h.t.Helper()
	h.stdin.Close()
	select {
	case <-h.waited:
	case <-time.After(60 * time.Second):
		h.cmd.Process.Kill()
		<-h.waited
		h.t.Fatalf("cordon did not end within 60s of releasing the probe")
	}
	for range h.lines {
	}
	r := parseResult(h.cmd.ProcessState.ExitCode(), h.stdout(), h.errb.String(), h.outcome())
	r.Probe = h.Probe
	return r
}

// childPids lists the processes whose parent is pid.
func childPids(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _ := procState(n); ppid == pid {
			out = append(out, n)
		}
	}
	return out
}

// procState returns a process's parent pid and state letter from
// /proc/PID/stat; state is "" when the process does not exist.
func procState(pid int) (ppid int, state string) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0, ""
	}
	ppid, _ = strconv.Atoi(f[1])
	return ppid, f[0]
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	_, st := procState(pid)
	return st != "" && st != "Z" && st != "X"
}

// fdTargets returns where each of a process's descriptors points.
func fdTargets(t *testing.T, pid int) []string {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("read %s: %v", dir, err)
	}
	var out []string
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil {
			out = append(out, l)
		}
	}
	return out
}

// hostUID is the host uid a process runs as (the effective one).
func hostUID(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Uid:"); ok {
			if f := strings.Fields(v); len(f) == 4 {
				return f[1]
			}
		}
	}
	t.Fatalf("no Uid line in /proc/%d/status", pid)
	return ""
}

// keyCount is the number of keys the host's /proc/key-users charges to
// uid (0 when it lists no such user).
func keyCount(t *testing.T, uid string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/key-users")
	if err != nil {
		t.Fatalf("read /proc/key-users: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 3 && f[0] == uid+":" {
			n, _, _ := strings.Cut(f[2], "/")
			k, _ := strconv.Atoi(n)
			return k
		}
	}
	return 0
}

func containsAny(s string, subs ...string) bool {
	for _, x := range subs {
		if strings.Contains(s, x) {
			return true
		}
	}
	return false
}
