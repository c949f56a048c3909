package probes

// Host-side observation helpers of the allowed and bypass probes. Every
// one reads the live system from outside the sandbox (/proc on the host,
// files under the probe's own directory); none trusts what the program
// inside printed.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/record"
)

// wsOwnerUID owns the probes' workspaces: not root, so cordon maps the
// workspace onto the program's uid, and a uid no host account uses.
const wsOwnerUID = 2345

// workspace is a probe's --workspace. Ops aim at In, a subdirectory with
// a random name: under a provider that isolates nothing the program runs
// on the host, where no /workspace/cordon-RANDOM exists, so the attempt
// fails instead of touching a host /workspace the probe did not make.
type workspace struct {
	Dir string // the host directory given as --workspace
	Sub string // the subdirectory's host path
	In  string // the subdirectory's path inside the sandbox
}

// newWorkspace makes DIR/name and its random subdirectory, owned by
// wsOwnerUID.
func newWorkspace(e *conformance.Env, name string) (workspace, error) {
	sub := "cordon-" + randToken(6)
	w := workspace{Dir: filepath.Join(e.Dir, name), In: "/workspace/" + sub}
	w.Sub = filepath.Join(w.Dir, sub)
	for _, d := range []string{w.Dir, w.Sub} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return w, err
		}
		if err := os.Chown(d, wsOwnerUID, wsOwnerUID); err != nil {
			return w, err
		}
	}
	return w, nil
}

// newDir makes DIR/name with mode (chmod'ed past the umask).
func newDir(e *conformance.Env, name string, mode os.FileMode) (string, error) {
	d := filepath.Join(e.Dir, name)
	if err := os.Mkdir(d, mode); err != nil {
		return "", err
	}
	return d, os.Chmod(d, mode)
}

// randToken is n random bytes in hex.
func randToken(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

var skipLayer sync.Map // binary path -> bool

// hasSkipLayer says whether the binary under test is a test build offering
// --test-skip-layer (positive controls that leave one layer out).
func hasSkipLayer(ctx context.Context, e *conformance.Env) bool {
	if v, ok := skipLayer.Load(e.Bin); ok {
		return v.(bool)
	}
	out, _ := exec.CommandContext(ctx, e.Bin, "--help").CombinedOutput()
	has := strings.Contains(string(out), "--test-skip-layer")
	skipLayer.Store(e.Bin, has)
	return has
}

// absent says whether nothing exists at p (lstat: ENOENT).
func absent(p string) (bool, string) {
	fi, err := os.Lstat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return true, "absent"
	case err != nil:
		return false, err.Error()
	}
	return false, "present (" + fi.Mode().String() + ")"
}

// procStatus reads /proc/PID/status into a map of its fields.
func procStatus(pid int) (map[string]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m, nil
}

// hostUID is pid's real uid on the host.
func hostUID(pid int) (string, error) {
	st, err := procStatus(pid)
	if err != nil {
		return "", err
	}
	f := strings.Fields(st["Uid"])
	if len(f) != 4 {
		return "", fmt.Errorf("/proc/%d/status: Uid %q", pid, st["Uid"])
	}
	return f[0], nil
}

// pidAlive says whether pid exists and is neither a zombie nor dead.
func pidAlive(pid int) bool {
	st, err := procStatus(pid)
	if err != nil {
		return false
	}
	s := st["State"]
	return s != "" && s[0] != 'Z' && s[0] != 'X'
}

// fdLinks lists what pid's descriptors point to (/proc/PID/fd).
func fdLinks(pid int) ([]string, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, en := range ents {
		if l, err := os.Readlink(filepath.Join(dir, en.Name())); err == nil {
			out = append(out, l)
		}
	}
	return out, nil
}

// countLinks counts pid's descriptors whose target contains what.
func countLinks(pid int, what string) (int, error) {
	ls, err := fdLinks(pid)
	n := 0
	for _, l := range ls {
		if strings.Contains(l, what) {
			n++
		}
	}
	return n, err
}

// keyUserCount is how many keys /proc/key-users charges to uid.
func keyUserCount(uid string) (int, error) {
	b, err := os.ReadFile("/proc/key-users")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 3 && f[0] == uid+":" {
			n, _, _ := strings.Cut(f[2], "/")
			return strconv.Atoi(n)
		}
	}
	return 0, nil
}

// hostHeld is a probe op held on the host (no sandbox): a sacrificial
// process the probe owns, or the positive control of an attempt whose
// effect the host reads through /proc while the op holds it.
type hostHeld struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}
	// Line is the op's report (a hint).
	Line string
}

// startHostHeld runs `BIN __probe hold OP ARGS...` on the host, as cred
// (nil: as the runner), and returns once the op has reported. It is
// killed when the probe ends.
func startHostHeld(ctx context.Context, e *conformance.Env, cred *syscall.Credential, op ...string) (*hostHeld, error) {
	cmd := exec.Command(e.Bin, append([]string{"__probe", "hold"}, op...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Dir = e.Dir
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	h := &hostHeld{cmd: cmd, stdin: stdin, done: make(chan struct{})}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, out)
	}()
	go func() { _ = cmd.Wait(); close(h.done) }()
	e.Cleanup(h.stop)
	select {
	case l, ok := <-lines:
		if !ok {
			return nil, fmt.Errorf("host op %v ended without a report", op)
		}
		h.Line = l
		return h, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Pid is the held process's pid.
func (h *hostHeld) Pid() int { return h.cmd.Process.Pid }

// Ended says whether the process has ended (been reaped).
func (h *hostHeld) Ended(wait time.Duration) bool {
	select {
	case <-h.done:
		return true
	case <-time.After(wait):
		return false
	}
}

// WaitStatus is how the process ended (after Ended).
func (h *hostHeld) WaitStatus() syscall.WaitStatus {
	if h.cmd.ProcessState == nil {
		return 0
	}
	ws, _ := h.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ws
}

func (h *hostHeld) stop() {
	h.stdin.Close()
	if !h.Ended(2 * time.Second) {
		_ = h.cmd.Process.Kill()
		<-h.done
	}
}

// udpCounter is a UDP socket on the host that counts the datagrams it
// receives and answers none.
type udpCounter struct {
	conn *net.UDPConn
	n    atomic.Int64
}

func listenUDP(e *conformance.Env, addr string) (*udpCounter, error) {
	a, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, err
	}
	c, err := net.ListenUDP("udp", a)
	if err != nil {
		return nil, err
	}
	u := &udpCounter{conn: c}
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := c.ReadFromUDP(buf); err != nil {
				return
			}
			u.n.Add(1)
		}
	}()
	e.Cleanup(func() { c.Close() })
	return u, nil
}

func (u *udpCounter) Addr() string { return u.conn.LocalAddr().String() }

// Settle waits until n datagrams arrived (or 2 s), then a little longer.
func (u *udpCounter) Settle(n int64) int64 {
	for deadline := time.Now().Add(2 * time.Second); u.n.Load() < n && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	return u.n.Load()
}

// opData decodes the per-attempt map an escape op reports (a hint).
func opData(r *conformance.RunResult) map[string]string {
	m := map[string]string{}
	if r != nil && r.Op != nil {
		_ = json.Unmarshal([]byte(r.Op.Data), &m)
	}
	return m
}

// ranOp is an error when a run did not run the probe op at all.
func ranOp(r conformance.RunResult) error {
	if r.Op == nil {
		return fmt.Errorf("the run (exit %d) did not run the probe: %s", r.Code, headLine(r.Stderr))
	}
	return nil
}

func headLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// fact builds an observed fact; control marks a positive control.
func fact(name, want, got string, ok bool, source string) record.Fact {
	return record.Fact{Name: name, Want: want, Got: got, OK: ok, Source: source}
}

func control(name, want, got string, ok bool, source string) record.Fact {
	return record.Fact{Name: name, Want: want, Got: got, OK: ok, Source: source, Control: true}
}

func broke(err error) conformance.Outcome { return conformance.Outcome{Err: err} }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// parentPid is pid's parent, from /proc/PID/stat.
func parentPid(pid int) (int, error) {
	if pid <= 0 {
		return 0, fmt.Errorf("no such process")
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+1:])
	if i < 0 || len(f) < 2 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	return strconv.Atoi(f[1])
}
