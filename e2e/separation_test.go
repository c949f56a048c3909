package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// remoteToolServer is a streamable-HTTP MCP server on host loopback that
// records the Authorization headers it was sent.
type remoteToolServer struct {
	srv   *httptest.Server
	mu    sync.Mutex
	auths []string
}

func newRemoteToolServer(t *testing.T) *remoteToolServer {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "remote", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "ping", Description: "answers pong"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "pong"}}}, nil, nil
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	r := &remoteToolServer{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.auths = append(r.auths, req.Header.Get("Authorization"))
		r.mu.Unlock()
		h.ServeHTTP(w, req)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *remoteToolServer) sawAuth(v string) (saw bool, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range r.auths {
		if a == v {
			saw = true
		}
	}
	return saw, len(r.auths)
}

func randomSecret(t *testing.T, prefix string) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return prefix + hex.EncodeToString(b)
}

// compromiseReport is what the hook printed (proc.Compromise's report).
type compromiseReport struct {
	Broker   string `json:"broker"`
	Attempts []struct {
		Probe string `json:"probe"`
		Err   string `json:"err"`
		Read  []byte `json:"read"`
	} `json:"attempts"`
}

const compromiseMarker = "CORDON-TEST-COMPROMISE "

// TestCompromisedGatewayModel (contract section 5: only the relevant
// broker reaches its target and credential). A test build makes the
// model broker process, once fully hardened, act as if agent traffic had
// taken it over: it connects to a host 127.0.0.1 TCP listener and to a
// host Unix socket, asks the privileged side's dialer for the egress
// broker's allowed upstream and the tool broker's server, re-targets the
// socket the dialer handed it for its own upstream (connect AF_UNSPEC,
// then connect to the host listener), and reads the tool broker
// process's environment, memory and descriptors and the tool
// credential's file. Each failure is observed from outside: the
// listeners and the other upstream accepted nothing, and the tool
// credential appears nowhere in what the process read and reported.
// Positive controls: the same host listeners accept a host process's
// connection; the model's own upstream IS dialled through the dialer; the
// tool server DOES receive its credential from the tool broker process.
func TestCompromisedGatewayModel(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	// Traversable by the gateway's uid: only the broker process's
	// confinement, not file permissions, may stop it.
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}

	hostTCP := testkit.NewCountingListener(t, "tcp", "127.0.0.1:0")
	sock := filepath.Join(dir, "host.sock")
	hostUnix := testkit.NewCountingListener(t, "unix", sock)
	// A world-writable socket: only the broker process's confinement, not
	// file permissions, may stop it.
	if err := os.Chmod(sock, 0o777); err != nil {
		t.Fatal(err)
	}
	modelUp := testkit.NewCountingListener(t, "tcp", "127.0.0.1:0")
	egressUp := testkit.NewCountingListener(t, "tcp", "127.0.0.1:0")
	tools := newRemoteToolServer(t)
	toolURL := tools.srv.URL + "/mcp"
	toolHostPort := strings.TrimPrefix(tools.srv.URL, "http://")

	modelKey, toolKey := randomSecret(t, "model-key-"), randomSecret(t, "tool-key-")
	modelKeyFile, toolKeyFile := filepath.Join(dir, "model-key"), filepath.Join(dir, "tool-key")
	for f, v := range map[string]string{modelKeyFile: modelKey, toolKeyFile: toolKey} {
		if err := os.WriteFile(f, []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := writeConfig(t, fmt.Sprintf(`models:
  - name: claude
    api: anthropic
    upstream: http://127.0.0.1:%s
    credential: model-key
    models: ["claude-*"]
egress:
  allow:
    - host: allowed.test
      ports: [%s]
  unsafe_allow_ranges: ["127.0.0.1/32"]
  resolve:
    allowed.test: 127.0.0.1
tools:
  - name: remote
    url: %s
    credential: tool-key
secrets:
  model-key: {file: %s}
  tool-key: {file: %s}
`, modelUp.Port(), egressUp.Port(), toolURL, modelKeyFile, toolKeyFile))

	spec, _ := json.Marshal(map[string]any{
		"broker": "model",
		"tcp":    []string{"127.0.0.1:" + hostTCP.Port()},
		"unix":   []string{sock},
		"dial": []string{
			"127.0.0.1:" + modelUp.Port(),     // its own upstream: the control
			"allowed.test:" + egressUp.Port(), // the egress broker's
			"127.0.0.1:" + egressUp.Port(),
			toolHostPort, // the tool broker's
		},
		"files": []string{toolKeyFile},
		// Its own upstream's socket, pointed at the host listener.
		"retarget": []string{"127.0.0.1:" + modelUp.Port() + ">127.0.0.1:" + hostTCP.Port()},
		// Its siblings run as its uid: kill the state broker, stop the
		// socket source.
		"signal": map[string]int{"state": int(syscall.SIGKILL), "sockets": int(syscall.SIGSTOP)},
	})
	rep, stdout, stderr := runCompromised(t, st, cfg, spec)
	got := map[string]string{}
	for _, a := range rep.Attempts {
		got[a.Probe] = a.Err
		t.Logf("%s: err=%q read=%d bytes", a.Probe, a.Err, len(a.Read))
		// (d) whatever it could read, the tool credential is not in it
		// (nor the raw secret in any other attempt).
		if bytes.Contains(a.Read, []byte(toolKey)) {
			t.Errorf("the model broker process read the tool broker's credential through %s", a.Probe)
		}
	}
	// The run succeeded (runCompromised), so no broker process was lost:
	// the privileged side logs one that ends while the sandbox runs.
	if strings.Contains(stderr, "ended unexpectedly") {
		t.Errorf("a broker process ended during the run\nstderr: %s", stderr)
	}
	if strings.Contains(stderr, toolKey) || strings.Contains(stdout, toolKey) {
		t.Errorf("the tool credential appears in cordon's output")
	}
	mustFail := []string{
		"tcp 127.0.0.1:" + hostTCP.Port(),
		"unix " + sock,
		"dial allowed.test:" + egressUp.Port(),
		"dial 127.0.0.1:" + egressUp.Port(),
		"dial " + toolHostPort,
		"read " + toolKeyFile,
		"retarget 127.0.0.1:" + modelUp.Port() + ">127.0.0.1:" + hostTCP.Port(),
		"signal state 9",
		"signal sockets 19",
	}
	for _, p := range mustFail {
		if e, ok := got[p]; !ok || e == "" {
			t.Errorf("attempt %q: err = %q (reported %t), want a failure", p, e, ok)
		}
	}
	peerReads := 0
	for p, e := range got {
		if strings.HasPrefix(p, "read /proc/") {
			peerReads++
			if e == "" && (strings.HasSuffix(p, "/environ") || strings.HasSuffix(p, "/mem") || strings.Contains(p, "/fd/")) {
				t.Errorf("attempt %q succeeded, want a failure", p)
			}
		}
	}
	if peerReads == 0 {
		t.Errorf("the hook read no peer broker process's /proc files: were the peers' pids given?")
	}
	// Observed from outside: nothing reached the host listeners or the
	// egress broker's upstream.
	if n := hostTCP.Settle(0); n != 0 {
		t.Errorf("host TCP listener accepted %d connections, want 0", n)
	}
	if n := hostUnix.Settle(0); n != 0 {
		t.Errorf("host Unix socket accepted %d connections, want 0", n)
	}
	if n := egressUp.Settle(0); n != 0 {
		t.Errorf("the egress broker's upstream accepted %d connections from the model broker process, want 0", n)
	}
	// The privileged side logged each refusal, naming the broker that
	// asked and the destination.
	for _, target := range []string{"allowed.test:" + egressUp.Port(), "127.0.0.1:" + egressUp.Port(), toolHostPort} {
		found := false
		for _, l := range strings.Split(stderr, "\n") {
			if strings.Contains(l, "dial refused") && strings.Contains(l, "broker=model") && strings.Contains(l, "target="+target) {
				found = true
			}
		}
		if !found {
			t.Errorf("no refusal of %s for the model broker in the privileged side's log\nstderr: %s", target, stderr)
		}
	}
	// Positive controls.
	if e := got["dial 127.0.0.1:"+modelUp.Port()]; e != "" {
		t.Errorf("the model broker's own upstream through the dialer: %s, want a connection", e)
	}
	if n := modelUp.Settle(2); n != 2 {
		t.Errorf("the model upstream accepted %d connections, want 2 (the dialer's, for the dial and the retarget)", n)
	}
	if saw, n := tools.sawAuth("Bearer " + toolKey); !saw {
		t.Errorf("the tool server got %d requests, none with its credential: the tool broker process does not hold it", n)
	}
	for _, c := range []struct {
		network, addr string
		l             *testkit.CountingListener
	}{{"tcp", "127.0.0.1:" + hostTCP.Port(), hostTCP}, {"unix", sock, hostUnix}} {
		conn, err := net.Dial(c.network, c.addr)
		if err != nil {
			t.Errorf("control: a host process cannot reach %s: %v", c.addr, err)
			continue
		}
		conn.Close()
		if n := c.l.Settle(1); n != 1 {
			t.Errorf("control: %s accepted %d, want 1", c.addr, n)
		}
	}
}

// runCompromised runs /bin/true under a test build with the
// compromised-gateway hook's instructions spec, and returns the hook's
// report and cordon's output.
func runCompromised(t *testing.T, st, cfg string, spec []byte) (*compromiseReport, string, string) {
	t.Helper()
	cmd := exec.Command(hooksBin, "--state-dir", st, "run", "--config", cfg, "--", "/bin/true")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "CORDON_TEST_COMPROMISE=" + string(spec)}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("cordon run = %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
		}
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatal("cordon run did not finish in 2 minutes")
	}
	// The hook reports on the broker process's stderr, which goes to
	// cordon's stderr until the program starts and to the run log after.
	var rep *compromiseReport
	for _, l := range strings.Split(logText(result{Stderr: stderr.String()}), "\n") {
		if i := strings.Index(l, compromiseMarker); i >= 0 {
			rep = &compromiseReport{}
			if err := json.Unmarshal([]byte(l[i+len(compromiseMarker):]), rep); err != nil {
				t.Fatalf("hook report %q: %v", l, err)
			}
		}
	}
	if rep == nil {
		t.Fatalf("no report from the hook\nstderr: %s", stderr.String())
	}
	return rep, stdout.String(), stderr.String()
}

// TestCompromisedGatewayLayers: which layer stops what. With the broker
// filter left out (test build, positive control), the model broker
// process still cannot reach a host 127.0.0.1 listener — its empty
// network namespace has nothing to route to — but it DOES reach a host
// pathname Unix socket, which no network namespace isolates, and it DOES
// re-target a socket the dialer handed it (disconnect, connect) to a
// host 127.0.0.1 listener, since that socket is the host namespace's, and
// it MAY signal a sibling broker process (same uid): the filter
// (TestCompromisedGatewayModel, with it) is the layer that stops all
// three.
func TestCompromisedGatewayLayers(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	// Traversable by the gateway's uid: only the broker process's
	// confinement, not file permissions, may stop it.
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	hostTCP := testkit.NewCountingListener(t, "tcp", "127.0.0.1:0")
	sock := filepath.Join(dir, "host.sock")
	hostUnix := testkit.NewCountingListener(t, "unix", sock)
	if err := os.Chmod(sock, 0o777); err != nil {
		t.Fatal(err)
	}
	up := testkit.NewModelUpstream(t, fakeKey, "x")
	cfg := gatewayConfig(t, up.URL(), "")
	// A second host listener, the target of the dialled socket re-targeted.
	retargetTCP := testkit.NewCountingListener(t, "tcp", "127.0.0.1:0")
	via := strings.TrimPrefix(up.URL(), "http://")
	retarget := via + ">127.0.0.1:" + retargetTCP.Port()
	spec, _ := json.Marshal(map[string]any{"broker": "model", "skip_filter": true,
		"tcp": []string{"127.0.0.1:" + hostTCP.Port()}, "unix": []string{sock}, "retarget": []string{retarget},
		"signal": map[string]int{"state": 0}})
	rep, _, _ := runCompromised(t, st, cfg, spec)
	got := map[string]string{}
	for _, a := range rep.Attempts {
		got[a.Probe] = a.Err
		t.Logf("%s: err=%q", a.Probe, a.Err)
	}
	if e, ok := got["tcp 127.0.0.1:"+hostTCP.Port()]; !ok || e == "" {
		t.Errorf("without the filter, the host TCP listener: err %q (reported %t), want a failure (empty namespace)", e, ok)
	}
	if n := hostTCP.Settle(0); n != 0 {
		t.Errorf("host TCP listener accepted %d connections, want 0", n)
	}
	if e, ok := got["unix "+sock]; !ok || e != "" {
		t.Errorf("without the filter, the host Unix socket: err %q (reported %t), want a connection (a namespace does not isolate it)", e, ok)
	}
	if n := hostUnix.Settle(1); n != 1 {
		t.Errorf("without the filter, the host Unix socket accepted %d connections, want 1", n)
	}
	// The dialer's sockets are the host's: without the filter a socket
	// it handed over is disconnected and connected to another host
	// listener (TestCompromisedGatewayModel: with it, refused).
	if e, ok := got["retarget "+retarget]; !ok || e != "" {
		t.Errorf("without the filter, re-targeting a dialled socket: err %q (reported %t), want a connection", e, ok)
	}
	if n := retargetTCP.Settle(1); n != 1 {
		t.Errorf("without the filter, the re-targeted socket's host listener accepted %d connections, want 1", n)
	}
	// Its siblings share its uid: without the filter it may signal them
	// (signal 0 here, so the run goes on; TestCompromisedGatewayModel
	// sends SIGKILL and SIGSTOP with it, refused).
	if e, ok := got["signal state 0"]; !ok || e != "" {
		t.Errorf("without the filter, signalling the state broker process: err %q (reported %t), want success (same uid)", e, ok)
	}
}

// childrenNamed are the children of parent whose argv[0] is name.
func childrenNamed(parent int, name string) map[int]string {
	out := map[int]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cl, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.HasPrefix(string(cl), name+"\x00") {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(stat)
		f := strings.Fields(s[strings.LastIndex(s, ")")+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(parent) {
			args := strings.Split(strings.TrimRight(string(cl), "\x00"), "\x00")
			out[pid] = strings.Join(args[1:], " ")
		}
	}
	return out
}

// TestBrokerProcessesSeparated: observed from the host, a sandbox's
// gateway is one process per broker (model, egress, tool, state) and a
// socket source (in the host's namespace, see docs/privilege-separation.md);
// every one
// with the seccomp filter, no_new_privs, not dumpable, and in a network
// namespace of its own — not the host's, not the sandbox's, not a
// sibling's — that has only a loopback device, down.
func TestBrokerProcessesSeparated(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	up := testkit.NewModelUpstream(t, fakeKey, "x")
	cfg := gatewayConfig(t, up.URL(), "")
	cmd := exec.Command(cordonBin, "--state-dir", st, "run", "--config", cfg, "--", "/bin/sleep", "5")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	var procs map[int]string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if procs = childrenNamed(cmd.Process.Pid, "cordon-gateway"); len(procs) == 5 {
			break
		}
	}
	brokers := map[string]bool{}
	for _, b := range procs {
		brokers[b] = true
	}
	if len(procs) != 5 || !brokers["model"] || !brokers["egress"] || !brokers["tool"] || !brokers["state"] || !brokers["sockets"] {
		t.Fatalf("gateway processes = %v, want one per broker (model, egress, tool, state) and the socket source", procs)
	}
	// Let them finish hardening (the sandbox starts only once they are
	// ready, so by the time sleep runs they are).
	time.Sleep(500 * time.Millisecond)
	hostNet, _ := os.Readlink("/proc/self/ns/net")
	seen := map[string]string{hostNet: "host"}
	for pid, b := range procs {
		status, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"Seccomp:\t2", "NoNewPrivs:\t1"} {
			if !strings.Contains(string(status), want) {
				t.Errorf("%s broker process: status lacks %q", b, want)
			}
		}
		ns, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "ns", "net"))
		if err != nil {
			t.Fatal(err)
		}
		if b == "sockets" {
			// The socket source creates the upstream sockets (charged to
			// the gateway's cgroup) in the host's namespace; it parses no
			// agent bytes and its filter refuses connect, bind and listen.
			if ns != hostNet {
				t.Errorf("socket source in network namespace %s, want the host's %s", ns, hostNet)
			}
			continue
		}
		if other, ok := seen[ns]; ok {
			t.Errorf("%s broker process shares its network namespace %s with %s", b, ns, other)
		}
		seen[ns] = b
		dev, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "net", "dev"))
		if err != nil {
			t.Fatal(err)
		}
		var ifs []string
		for _, l := range strings.Split(string(dev), "\n")[2:] {
			if name, _, ok := strings.Cut(strings.TrimSpace(l), ":"); ok {
				ifs = append(ifs, name)
			}
		}
		if len(ifs) != 1 || ifs[0] != "lo" {
			t.Errorf("%s broker process's network namespace has devices %v, want only lo", b, ifs)
		}
		route, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "net", "route"))
		if n := len(strings.Split(strings.TrimSpace(string(route)), "\n")); n > 1 {
			t.Errorf("%s broker process's network namespace has routes:\n%s", b, route)
		}
	}
}

// TestBrokerProcessFailureFailsTheStart: fail closed. When one broker
// process cannot start (here the tool broker: its declared remote tool
// server does not answer), the run fails before the program runs — the
// sandbox gets no partial way out — and no gateway process is left. The
// control: the same run without the tool server runs the program.
func TestBrokerProcessFailureFailsTheStart(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	ws := filepath.Join(t.TempDir(), "ws")
	if err := os.Mkdir(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(ws, 2345, 2345); err != nil {
		t.Fatal(err)
	}
	dead := testkit.NewCountingListener(t, "tcp", "127.0.0.1:0")
	port := dead.Port()
	dead.Ln.Close() // nothing answers there now
	marker := filepath.Join(ws, "ran")
	run := func(tools string) result {
		cfg := writeConfig(t, tools)
		cmd := exec.Command(cordonBin, "--state-dir", st, "run", "--config", cfg, "--workspace", ws, "--", "/bin/sh", "-c", "echo yes > /workspace/ran")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if left := childrenNamed(cmd.Process.Pid, "cordon-gateway"); len(left) > 0 {
			t.Errorf("gateway processes left after the run: %v", left)
		}
		return result{Code: code, Stdout: stdout.String(), Stderr: stderr.String()}
	}
	r := run(fmt.Sprintf("tools:\n  - name: remote\n    url: http://127.0.0.1:%s/mcp\n", port))
	if r.Code == 0 || !strings.Contains(r.Stderr, "tool server remote") {
		t.Errorf("run with a tool server that does not answer = exit %d, want a failure of the tool broker process\nstderr: %s", r.Code, r.Stderr)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("the program ran although the tool broker process failed to start")
	}
	// Control: without that tool server the program runs.
	if r := run(""); r.Code != 0 {
		t.Fatalf("control run = %d\nstderr: %s", r.Code, r.Stderr)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("control: the program did not run: %v", err)
	}
}
