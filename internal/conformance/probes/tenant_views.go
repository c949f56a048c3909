package probes

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/fixture"
	"github.com/cordon-project/cordon/internal/conformance/probeops"
	"github.com/cordon-project/cordon/internal/conformance/record"
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/store"
)

// Receipts and approvals have no per-tenant view: they are read from the
// host's store by root (cordon receipts, cordon approvals) and through the
// approval console (loopback, login token). These probes try every route
// that exists to another tenant's: from inside a sandbox (the store's
// files by path, the console's port) and from a non-root host user (the
// CLI, the store file, the console without its token). Each is refused,
// and answered like the same attempt at a state directory that does not
// exist; where the answers differ, the fact says what that reveals.
func init() {
	for _, what := range []string{"receipts", "approvals"} {
		conformance.Register(conformance.Probe{
			ID:      "tenant." + what,
			Class:   record.CrossTenant,
			Clause:  "§2.5 cross-tenant, §3 foreign access denied indistinguishably: another tenant's " + what,
			Title:   "another tenant's " + what + " are read by no route a sandbox or a non-root host user has (store files, the approval console, the CLI), each answered like an absent state directory; root lists them",
			Daemon:  true,
			Timeout: 90 * time.Second,
			Run:     tenantView(what),
		})
	}
}

// The probe's throwaway host user (no account is likely to have it),
// shared with tenant.sandboxes.
const viewerUID = otherUID

func tenantView(what string) func(context.Context, *conformance.Env) conformance.Outcome {
	return func(ctx context.Context, e *conformance.Env) conformance.Outcome {
		// A daemon whose socket admits the throwaway users' group. Tenant
		// A's state directory is apart from the daemon's: no process
		// holds it open while the host watches who opens its files.
		d, err := e.DaemonWith(ctx, "--group", strconv.Itoa(usersGID))
		if err != nil {
			return conformance.Outcome{Err: err}
		}
		if err := os.Chmod(filepath.Dir(d.Socket), 0o711); err != nil {
			return conformance.Outcome{Err: err}
		}
		st := e.StateDir()
		mark, err := tenantItem(ctx, e, st, what)
		if err != nil {
			return conformance.Outcome{Err: err}
		}
		// The non-root user reaches the state directory itself (its
		// parents become traversable, as a real /var/lib is): what it
		// meets is the state directory's own protection.
		for _, d := range []string{e.Dir, st} {
			if err := os.Chmod(d, 0o711); err != nil {
				return conformance.Outcome{Err: err}
			}
		}
		absentDir := filepath.Join(e.Dir, "state-never")
		var facts []record.Fact
		var hint []string
		f, h, err := sandboxReadsStore(ctx, e, st, absentDir)
		if err != nil {
			return conformance.Outcome{Err: err}
		}
		facts, hint = append(facts, f...), append(hint, h)
		f, err = hostUserCLI(ctx, e, st, absentDir, what)
		if err != nil {
			return conformance.Outcome{Err: err}
		}
		facts = append(facts, f...)
		f, err = daemonRoutes(ctx, e, d.Socket, what)
		if err != nil {
			return conformance.Outcome{Err: err}
		}
		facts = append(facts, f...)
		f, h, err = consoleRoutes(ctx, e, st)
		if err != nil {
			return conformance.Outcome{Err: err}
		}
		facts, hint = append(facts, f...), append(hint, h)
		return conformance.Outcome{Hint: strings.Join(hint, "\n"), Facts: append(facts, mark)}
	}
}

// tenantItem makes tenant A's receipt (a model crossing) or approval (an
// egress connection its policy holds for approval) in st, and returns the
// control fact: root lists it.
func tenantItem(ctx context.Context, e *conformance.Env, st, what string) (record.Fact, error) {
	const src = "root's cordon %s on the host (the store)"
	if what == "receipts" {
		key := secretValue()
		up := upstream(e, key)
		cfg, err := keyedModelConfig(e, up.URL(), key, "")
		if err != nil {
			return record.Fact{}, err
		}
		r, _, err := markedRun(ctx, e, st, "out-a", "--config", cfg)
		if errors.Is(err, errNoGateway) {
			return seedItem(ctx, e, st, what)
		}
		if err != nil || r.Code != 0 {
			return record.Fact{}, fmt.Errorf("tenant A's gateway run: exit %d, %v: %s", r.Code, err, firstLineOf(r.Stderr))
		}
		rcs, err := receipts(ctx, e, st)
		if err != nil {
			return record.Fact{}, err
		}
		n := 0
		for _, rc := range rcs {
			if rc.Identity.Workload == "conformance" && rc.Broker == "model" {
				n++
			}
		}
		return record.Fact{Name: "tenant A's model receipts, listed by root", Want: "1", Got: strconv.Itoa(n), OK: n == 1,
			Source: fmt.Sprintf(src, "receipts --json"), Control: true}, nil
	}
	target := fixture.NewTarget("stale")
	e.Cleanup(target.Close)
	cfg, err := approvalConfig(e, target.Port())
	if err != nil {
		return record.Fact{}, err
	}
	r, err := gwRun(ctx, e, conformance.RunOpts{StateDir: st, Flags: []string{"--config", cfg},
		Op: []string{"request", "GET", "http://stale.test:" + target.Port() + "/"}})
	if errors.Is(err, errNoGateway) {
		return seedItem(ctx, e, st, what)
	}
	if err != nil {
		return record.Fact{}, err
	}
	as, err := listApprovals(ctx, e, st, true)
	if err != nil {
		return record.Fact{}, err
	}
	n := 0
	for _, a := range as {
		if a.Target == "stale.test" && a.Action == "egress.connect" {
			n++
		}
	}
	return record.Fact{Name: "tenant A's approval for stale.test, listed by root", Want: "1", Got: fmt.Sprintf("%d (run exit %d)", n, r.Code), OK: n == 1,
		Source: fmt.Sprintf(src, "approvals list --all --json"), Control: true}, nil
}

// seedItem is tenantItem on a provider that runs no gateway: the
// receipt or approval is written through the store's own API, as the
// gateway's authority would, so the routes are probed all the same.
func seedItem(ctx context.Context, e *conformance.Env, st, what string) (record.Fact, error) {
	s, err := store.Open(st, store.DefaultPool)
	if err != nil {
		return record.Fact{}, err
	}
	if what == "receipts" {
		_, err = s.RecordReceipt(ctx, crossing.Receipt{Time: time.Now().UTC(), Identity: crossing.Identity{Workload: "conformance", Tenant: "probe", Purpose: "testing"},
			Broker: "model", Action: "anthropic.messages", Target: "claude-probe-1", Decision: crossing.Allow, Reason: "seeded by the conformance probe"})
	} else {
		_, err = s.RequestApproval(ctx, store.Approval{Workload: "conformance-stale", SandboxID: "conformance-seeded", Action: "egress.connect", Target: "stale.test",
			Digest: "sha256:" + strings.Repeat("0", 64), Arguments: json.RawMessage(`{}`)}, 5*time.Minute)
	}
	s.Close()
	if err != nil {
		return record.Fact{}, err
	}
	list := []string{"receipts", "--json"}
	if what == "approvals" {
		list = []string{"approvals", "list", "--all", "--json"}
	}
	r, err := e.Cordon(ctx, st, list...)
	if err != nil {
		return record.Fact{}, err
	}
	n := strings.Count(r.Stdout, "stale.test") + strings.Count(r.Stdout, "seeded by the conformance probe")
	return record.Fact{Name: "tenant A's " + strings.TrimSuffix(what, "s") + " (seeded through the store: this provider runs no gateway), listed by root", Want: "1",
		Got: strconv.Itoa(n), OK: n == 1, Source: "root's cordon " + strings.Join(list, " ") + " on the host (the store)", Control: true}, nil
}

// sandboxReadsStore: tenant B's sandbox (its own state directory) reads
// tenant A's store files by their host paths and through its own
// /proc/1/root, and the same paths under a state directory that does not
// exist. From the host, inotify on A's state directory sees no file
// opened or read. Control: the same reads on the host are seen.
func sandboxReadsStore(ctx context.Context, e *conformance.Env, st, absentDir string) ([]record.Fact, string, error) {
	var paths []string
	for _, d := range []string{st, absentDir} {
		for _, f := range []string{"cordon.db", "cordon.db-wal", "evidence/log.key"} {
			paths = append(paths, filepath.Join(d, f), "/proc/1/root"+filepath.Join(d, f))
		}
	}
	w, err := watchDir(st)
	if err != nil {
		return nil, "", err
	}
	defer w.Close()
	r, err := e.Run(ctx, conformance.RunOpts{Op: append([]string{"opens"}, paths...)})
	if err != nil {
		return nil, "", err
	}
	seen := w.Events()
	// The control: the host's root opens the same store file.
	hr, err := e.HostOp(ctx, "opens", filepath.Join(st, "cordon.db"))
	if err != nil {
		return nil, "", err
	}
	control := w.Events()
	const src = "inotify (IN_OPEN, IN_ACCESS) on tenant A's state directory and its evidence directory, on the host"
	return []record.Fact{
		{Name: "opens or reads of tenant A's store files from tenant B's sandbox", Want: "0", Got: strconv.Itoa(seen), OK: seen == 0, Source: src},
		{Name: "opens or reads of the same store file by root on the host", Want: "> 0", Got: fmt.Sprintf("%d (host read ok=%v)", control, hr.OK), OK: control > 0 && hr.OK,
			Source: src, Control: true},
	}, "sandbox reads: " + r.Hint(), nil
}

// hostUserCLI: a non-root host user runs `cordon receipts` / `cordon
// approvals list` against tenant A's state directory and against one that
// does not exist, and opens A's store file directly.
func hostUserCLI(ctx context.Context, e *conformance.Env, st, absentDir, what string) ([]record.Fact, error) {
	args := []string{"receipts", "--json"}
	if what == "approvals" {
		args = []string{"approvals", "list", "--all", "--json"}
	}
	answer := func(dir string) (string, error) {
		r, err := asHostUser(ctx, e, viewerUID, append([]string{"--state-dir", dir}, args...)...)
		return fmt.Sprintf("exit %d: %s", r.Code, strings.ReplaceAll(strings.TrimSpace(r.Stderr+r.Stdout), dir, "STATE-DIR")), err
	}
	theirs, err := answer(st)
	if err != nil {
		return nil, err
	}
	never, err := answer(absentDir)
	if err != nil {
		return nil, err
	}
	cmd := "cordon " + strings.Join(args, " ")
	uid := strconv.Itoa(viewerUID)
	facts := []record.Fact{{Name: "uid " + uid + "'s " + cmd + " on tenant A's state directory", Want: never + " (a nonexistent state directory's answer), non-zero",
		Got: theirs, OK: theirs == never && !strings.HasPrefix(theirs, "exit 0:"), Source: "the answer of cordon run as uid " + uid + " on the host"}}
	r, err := asHostUser(ctx, e, viewerUID, "__probe", "opens", filepath.Join(st, "cordon.db"), filepath.Join(absentDir, "cordon.db"))
	if err != nil {
		return nil, err
	}
	var got map[string]string
	if r.Op == nil || json.Unmarshal([]byte(r.Op.Data), &got) != nil {
		return nil, fmt.Errorf("uid %s's reads of the store file: no result: %s", uid, firstLineOf(r.Stderr))
	}
	a, n := got[filepath.Join(st, "cordon.db")], got[filepath.Join(absentDir, "cordon.db")]
	// The answers differ (EACCES, ENOENT): the state directory is 0711 so
	// that sandbox inits can traverse it, so a host user learns that a
	// store exists at a path it named, as for any root-owned file, and
	// nothing of what it holds. Judged not worth hiding; the fact says so.
	facts = append(facts, record.Fact{Name: "uid " + uid + " opening tenant A's store file directly (an absent state directory answers " + n +
		"; the difference reveals only that a store exists at the path named, never its content)", Want: "EACCES, no byte read", Got: a,
		OK: a == "EACCES", Source: "open(2) as uid " + uid + " on the host (cordon __probe opens, a host process the runner started)"})
	return facts, nil
}

// daemonRoutes: a non-root host user in the daemon socket's group asks
// the daemon for receipts or approvals under every name such an
// operation could have; each answer must be the daemon's answer to an
// operation that does not exist. Control: the same user's ls is served.
func daemonRoutes(ctx context.Context, e *conformance.Env, sock, what string) ([]record.Fact, error) {
	// Operation names are a-z, '.', '_' and '-': the nonexistent one's
	// random part is letters.
	bogus := "no-such-op-" + strings.Map(func(r rune) rune { return 'a' + (r % 26) }, randomHex(4))
	ops := []string{what, what + ".list", "list-" + what, "list_" + what, "sandbox." + what}
	r, err := asHostUser(ctx, e, viewerUID, append(append([]string{"__probe", "daemon-call", sock}, ops...), bogus, "ls")...)
	if err != nil {
		return nil, err
	}
	var got map[string]string
	if r.Op == nil || json.Unmarshal([]byte(r.Op.Data), &got) != nil {
		return nil, fmt.Errorf("uid %d's daemon calls: no result: %s", viewerUID, firstLineOf(r.Stderr))
	}
	uid := strconv.Itoa(viewerUID)
	src := "the daemon's answers to cordon __probe daemon-call, run as uid " + uid + " on the host"
	never := strings.ReplaceAll(got[bogus], bogus, "OP")
	var facts []record.Fact
	for _, op := range ops {
		a := strings.ReplaceAll(got[op], op, "OP")
		facts = append(facts, record.Fact{Name: "uid " + uid + "'s daemon operation " + strconv.Quote(op), Want: never + " (a nonexistent operation's answer)",
			Got: a, OK: a == never && !strings.HasPrefix(a, "ok"), Source: src})
	}
	return append(facts, record.Fact{Name: "uid " + uid + "'s daemon operation \"ls\" (the socket serves this user)", Want: "ok", Got: got["ls"],
		OK: got["ls"] == "ok", Source: src, Control: true}), nil
}

// consoleRoutes starts `cordon approvals console` for tenant A's state
// directory and for an empty one (the console shows approvals and recent
// receipts). While tenant B's sandbox holds a connect to A's console's
// port, the host's network namespace has no connection to that port
// (control: the host's own held connection is counted); a non-root host
// user without the login token gets the same answer from both consoles;
// root with the token (console.url, 0600) is let in (the control).
func consoleRoutes(ctx context.Context, e *conformance.Env, st string) ([]record.Fact, string, error) {
	theirs, err := startConsole(ctx, e, st)
	if err != nil {
		return nil, "", err
	}
	empty, err := startConsole(ctx, e, e.StateDir())
	if err != nil {
		return nil, "", err
	}
	port := theirs.Port()
	h, err := e.Start(ctx, conformance.RunOpts{Op: []string{"hold", "dial-keep", "127.0.0.1:" + port}})
	if err != nil {
		return nil, "", err
	}
	socks, err := hostSockets(port)
	if err != nil {
		return nil, "", err
	}
	r, err := h.Finish(ctx)
	if err != nil {
		return nil, "", err
	}
	// The control: the host's own connection, held the same way, is seen.
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, 3*time.Second)
	if err != nil {
		return nil, "", fmt.Errorf("the host cannot connect to the console: %w", err)
	}
	hostSocks, err := hostSockets(port)
	c.Close()
	if err != nil {
		return nil, "", err
	}
	uid := strconv.Itoa(viewerUID)
	ask := func(c *url.URL) (string, error) {
		r, err := asHostUser(ctx, e, viewerUID, "__probe", "request", "GET", "http://"+c.Host+"/")
		if r.Op == nil {
			return "", fmt.Errorf("uid %s's console request: no result (%v): %s", uid, err, firstLineOf(r.Stderr))
		}
		return strings.ReplaceAll(r.Op.Data+r.Op.Err, c.Host, "HOST"), err
	}
	a, err := ask(theirs)
	if err != nil {
		return nil, "", err
	}
	n, err := ask(empty)
	if err != nil {
		return nil, "", err
	}
	status, err := consoleLogin(ctx, theirs)
	if err != nil {
		return nil, "", err
	}
	return []record.Fact{
		{Name: "TCP connections to tenant A's console port in the host's network namespace while tenant B's sandbox holds its connect to 127.0.0.1:" + port, Want: "0",
			Got: strconv.Itoa(socks), OK: socks == 0, Source: "/proc/net/tcp and tcp6 on the host (every state but LISTEN)"},
		{Name: "the same count while the host holds a connection to the console", Want: "> 0", Got: strconv.Itoa(hostSocks), OK: hostSocks > 0,
			Source: "/proc/net/tcp and tcp6 on the host (every state but LISTEN)", Control: true},
		{Name: "uid " + uid + "'s request to tenant A's console without the login token", Want: n + " (an empty store's console's answer), status 401",
			Got: a, OK: a == n && strings.Contains(a, "status=401"), Source: "the answer to cordon __probe request, run as uid " + uid + " on the host"},
		{Name: "root's login to tenant A's console with the token from console.url", Want: "200", Got: strconv.Itoa(status), OK: status == 200,
			Source: "an HTTP client of the runner on the host", Control: true},
	}, "sandbox connect: " + r.Hint(), nil
}

// startConsole runs `cordon approvals console --listen 127.0.0.1:0` on
// stateDir until the probe ends, and returns its login URL.
func startConsole(ctx context.Context, e *conformance.Env, stateDir string) (*url.URL, error) {
	cmd := exec.Command(e.Bin, "--state-dir", stateDir, "approvals", "console", "--listen", "127.0.0.1:0")
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Dir = e.Dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	e.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	var u *url.URL
	err := pollUntil(ctx, func() (bool, error) {
		b, err := os.ReadFile(filepath.Join(stateDir, "console.url"))
		if err != nil {
			return false, nil
		}
		u, err = url.Parse(strings.TrimSpace(string(b)))
		return err == nil && u.Port() != "", nil
	})
	if err != nil {
		return nil, fmt.Errorf("the approval console wrote no console.url: %w: %s", err, firstLineOf(out.String()))
	}
	return u, nil
}

// consoleLogin opens the login URL as a browser would and returns the
// status of the page it lands on.
func consoleLogin(ctx context.Context, login *url.URL) (int, error) {
	jar, err := cookiejar.New(nil)
	if err != nil {
		return 0, err
	}
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, login.String(), nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// hostSockets counts the TCP sockets in the host's network namespace
// (this process's) with local or remote port port, in any state but
// LISTEN.
func hostSockets(port string) (int, error) {
	p, err := strconv.Atoi(port)
	if err != nil {
		return 0, err
	}
	hexPort := fmt.Sprintf(":%04X", p)
	n := 0
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return 0, err
		}
		for _, l := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(l)
			if len(fs) < 4 || fs[3] == "0A" { // 0A: LISTEN
				continue
			}
			if strings.HasSuffix(fs[1], hexPort) || strings.HasSuffix(fs[2], hexPort) {
				n++
			}
		}
	}
	return n, nil
}

// asHostUser runs cordon as uid (group usersGID) on the host, no daemon.
func asHostUser(ctx context.Context, e *conformance.Env, uid uint32, args ...string) (conformance.RunResult, error) {
	cmd := exec.CommandContext(ctx, e.Bin, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: usersGID}}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		return conformance.RunResult{}, ctx.Err()
	}
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		return conformance.RunResult{}, err
	}
	r := conformance.RunResult{Code: cmd.ProcessState.ExitCode(), Stdout: out.String(), Stderr: errb.String()}
	if len(args) > 0 && args[0] == "__probe" {
		var op probeops.Result
		if line, _, _ := strings.Cut(r.Stdout, "\n"); json.Unmarshal([]byte(line), &op) == nil && op.Op != "" {
			r.Op = &op
		}
	}
	return r, nil
}

// dirWatch counts file opens and reads in a directory tree's first two
// levels (the state directory and its evidence directory).
type dirWatch struct{ fd int }

func watchDir(dir string) (*dirWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	for _, d := range []string{dir, filepath.Join(dir, "evidence")} {
		if _, err := unix.InotifyAddWatch(fd, d, unix.IN_OPEN|unix.IN_ACCESS); err != nil && !(errors.Is(err, unix.ENOENT) && d != dir) {
			unix.Close(fd)
			return nil, fmt.Errorf("inotify watch %s: %w", d, err)
		}
	}
	return &dirWatch{fd: fd}, nil
}

// Events drains and counts the events so far.
func (w *dirWatch) Events() int {
	n := 0
	buf := make([]byte, 64<<10)
	for {
		k, err := unix.Read(w.fd, buf)
		if k <= 0 || err != nil {
			return n
		}
		for off := 0; off+unix.SizeofInotifyEvent <= k; {
			// struct inotify_event: wd, mask, cookie, len (u32 each), name.
			off += unix.SizeofInotifyEvent + int(binary.NativeEndian.Uint32(buf[off+12:]))
			n++
		}
	}
}

func (w *dirWatch) Close() { unix.Close(w.fd) }
