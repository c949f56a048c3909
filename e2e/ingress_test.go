package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"
)

// The declared inbound route (docs/ingress.md): from the host, through
// the route's host address, to a program serving on 127.0.0.1 inside
// the sandbox — and nothing else reaches in.

// Ports the probe serves on inside the sandbox: its own network
// namespace, so no other test's sandbox can collide with them.
const (
	ingressPort    = 18789
	undeclaredPort = 18790
)

// ingressReceipt is an ingress receipt as `cordon receipts --json` prints it.
type ingressReceipt struct {
	Broker   string `json:"broker"`
	Target   string `json:"target"`
	Decision string `json:"decision"`
	Reason   string `json:"reason"`
	Client   string `json:"client"`
	BytesIn  int64  `json:"bytes_in"`  // from the sandbox
	BytesOut int64  `json:"bytes_out"` // to the sandbox
	Usage    struct {
		IngressConnections int64 `json:"ingress_connections"`
		IngressBytes       int64 `json:"ingress_bytes"`
	} `json:"usage"`
	Policy *struct {
		Determining []string `json:"determining"`
	} `json:"policy"`
}

func ingressReceipts(t *testing.T, st string) []ingressReceipt {
	return receiptLines[ingressReceipt](t, st, "--broker", "ingress")
}

// freeHostPort is a loopback port nothing on the host listens on now.
func freeHostPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// ingressSandbox is a `cordon run` of the probe's serve op on ports,
// with a control directory (bound read-only at /ctl) whose quit file ends
// it.
type ingressSandbox struct {
	proc *cordonProc
	ctl  string
	quit string // the quit file's name: unique, so it finds this sandbox's probe
}

func startIngressSandbox(t *testing.T, st, cfg string, ports ...int) *ingressSandbox {
	t.Helper()
	ctl := t.TempDir()
	if err := os.Chmod(ctl, 0o755); err != nil {
		t.Fatal(err)
	}
	quit := fmt.Sprintf("quit-%d-%d", os.Getpid(), time.Now().UnixNano())
	args := []string{"run", "--config", cfg, "--ro", probeDir + ":/probe", "--ro", ctl + ":/ctl", "--", "/probe/probe", "serve", "90", "/ctl/" + quit}
	for _, p := range ports {
		args = append(args, strconv.Itoa(p))
	}
	s := &ingressSandbox{proc: startCordon(t, st, runOpts{}, args...), ctl: ctl, quit: quit}
	for _, p := range ports {
		s.waitListening(t, p)
	}
	return s
}

// waitListening waits until the sandbox's serve op listens on port,
// observed from the host: the LISTEN socket in the network namespace of
// the probe process started with this sandbox's control directory.
func (s *ingressSandbox) waitListening(t *testing.T, port int) {
	t.Helper()
	want := fmt.Sprintf(" 0100007F:%04X 00000000:0000 0A ", port)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-s.proc.done:
			t.Fatalf("cordon ended before the program listened on %d: %s", port, s.proc.stderr())
		default:
		}
		if pid := s.probePid(); pid > 0 {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/tcp", pid))
			if bytes.Contains(b, []byte(want)) {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the program never listened on %d inside the sandbox", port)
}

// probePid is the host pid of this sandbox's serve op (0 if none yet).
func (s *ingressSandbox) probePid() int {
	ents, _ := os.ReadDir("/proc")
	mark := []byte("/probe/probe\x00serve\x00")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if bytes.HasPrefix(b, mark) && bytes.Contains(b, []byte(s.quit)) { // not cordon's own argv, which holds the same words
			return pid
		}
	}
	return 0
}

// stop ends the serve op through its quit file and returns the
// connections it accepted, by port.
func (s *ingressSandbox) stop(t *testing.T) (map[string]int, result) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(s.ctl, s.quit), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := s.proc.wait(t, time.Minute)
	if r.Code != 0 || !r.Probe.OK {
		t.Fatalf("cordon run serve = %d, probe %+v\nstderr: %s", r.Code, r.Probe, r.Stderr)
	}
	counts := map[string]int{}
	if err := json.Unmarshal([]byte(r.Probe.Data), &counts); err != nil {
		t.Fatalf("serve result %q: %v", r.Probe.Data, err)
	}
	return counts, r
}

// ingressConfig is a configuration with the given ingress (and other)
// sections.
func ingressConfig(t *testing.T, extra string) string {
	t.Helper()
	return ingressConfigOf(t, "ingress-e2e", "acme", extra)
}

// ingressConfigOf is ingressConfig for another workload and tenant (a
// daemon caller's own).
func ingressConfigOf(t *testing.T, workload, tenant, extra string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "cordon.yaml")
	cfg := fmt.Sprintf("version: cordon/v1\nworkload: %s\ntenant: %s\npurpose: testing\n", workload, tenant) + extra
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// httpGet sends one HTTP/1.1 GET to addr and returns all it answered.
func httpGet(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: ui\r\nConnection: close\r\n\r\n"); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// A GET through the route is answered by the program inside; a long-lived
// connection carries bytes both ways, in many rounds, and a half-close
// from the host reaches the program (which then still answers); every
// connection has its receipt with the route, the client and the bytes.
// The undeclared port the program also serves is reached by nothing; a
// second sandbox reaches neither the route's host address nor the port
// (positive control: the host does); and the route is gone once the
// sandbox ended.
func TestIngressRoute(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	hostPort := freeHostPort(t)
	listen := fmt.Sprintf("127.0.0.1:%d", hostPort)
	cfg := ingressConfig(t, fmt.Sprintf("ingress:\n  - name: ui\n    port: %d\n    listen: %s\n", ingressPort, listen))
	sb := startIngressSandbox(t, st, cfg, ingressPort, undeclaredPort)

	body, err := httpGet(listen)
	if err != nil || !strings.Contains(body, "200 OK") || !strings.Contains(body, fmt.Sprintf("ingress-ok port=%d peer=127.0.0.1:", ingressPort)) {
		t.Fatalf("GET through the route = %q, %v; want the program's answer", body, err)
	}

	// Long-lived, both directions: 50 rounds of one line each, then a
	// large write and a half-close; the program's "bye" comes after it.
	c, err := net.DialTimeout("tcp", listen, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	sent := int64(0)
	write := func(s string) {
		if _, err := io.WriteString(c, s); err != nil {
			t.Fatalf("write through the route: %v", err)
		}
		sent += int64(len(s))
	}
	write("ECHO\n")
	buf := make([]byte, 64)
	for i := range 50 {
		line := fmt.Sprintf("round %02d\n", i)
		write(line)
		if _, err := io.ReadFull(c, buf[:len(line)]); err != nil || string(buf[:len(line)]) != line {
			t.Fatalf("round %d: read %q, %v; want the echo %q", i, buf[:len(line)], err, line)
		}
	}
	big := strings.Repeat("0123456789abcdef", 16<<10) // 256 KiB
	go func() {
		io.WriteString(c, big)
		c.(*net.TCPConn).CloseWrite()
	}()
	sent += int64(len(big))
	rest, err := io.ReadAll(c)
	c.Close()
	if err != nil || string(rest) != big+"bye\n" {
		t.Fatalf("after the half-close: read %d bytes (%v), want the %d echoed and \"bye\\n\"", len(rest), err, len(big)+4)
	}

	// A second sandbox: the route's host address and the port are
	// nothing from its namespace.
	// It has a gateway of its own: its model broker (127.0.0.1:80) is the
	// probe's positive control (the probe connects where something
	// listens), and its egress proxy is the one way out it has, which
	// must refuse the route's host address too.
	st2 := newStateDir(t)
	up := testkit.NewModelUpstream(t, fakeKey, "x")
	cfgB := gatewayConfig(t, up.URL(), "")
	own := "tcp:127.0.0.1:80"
	r := cordon(t, cordonBin, st2, probeArgs([]string{"--config", cfgB}, "connects", "tcp:"+listen, fmt.Sprintf("tcp:127.0.0.1:%d", ingressPort), own)...)
	var got map[string]string
	if err := json.Unmarshal([]byte(r.Probe.Data), &got); err != nil || len(got) != 3 {
		t.Fatalf("second sandbox connects = %d %+v %q", r.Code, r.Probe, r.Stderr)
	}
	if !strings.HasPrefix(got[own], "ok") {
		t.Fatalf("control: the second sandbox's probe could not reach its own gateway (%s)", got[own])
	}
	delete(got, own)
	for target, outcome := range got {
		if strings.HasPrefix(outcome, "ok") {
			t.Errorf("from a second sandbox, connect %s = %s; want a failure", target, outcome)
		}
	}
	px := cordon(t, cordonBin, st2, "run", "--config", cfgB, "--", "/usr/bin/curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
		"--max-time", "10", "--noproxy", "", "-x", "http://127.0.0.1:81", "http://"+listen+"/")
	if px.Stdout == "200" || !strings.HasPrefix(px.Stdout, "4") {
		t.Errorf("from a second sandbox through its egress proxy, GET %s = %q (%s); want the proxy's refusal", listen, px.Stdout, px.Stderr)
	}
	// Positive control: the same address from the host is the route.
	if body, err := httpGet(listen); err != nil || !strings.Contains(body, "ingress-ok") {
		t.Fatalf("control: GET from the host = %q, %v", body, err)
	}

	// The undeclared port, from the host, by every address it has.
	var tried []string
	addrs, _ := net.InterfaceAddrs()
	for _, a := range append(addrs, &net.IPNet{IP: net.IPv4(127, 0, 0, 1)}) {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		target := net.JoinHostPort(ipn.IP.String(), strconv.Itoa(undeclaredPort))
		if d, err := net.DialTimeout("tcp", target, time.Second); err == nil {
			io.WriteString(d, "GET / HTTP/1.1\r\n\r\n")
			d.Close()
		}
		tried = append(tried, target)
	}

	counts, _ := sb.stop(t)
	if counts[strconv.Itoa(ingressPort)] != 3 || counts[strconv.Itoa(undeclaredPort)] != 0 {
		t.Errorf("the program accepted %v; want 3 on %d (two GETs, one echo) and none on %d (tried from the host: %v)",
			counts, ingressPort, undeclaredPort, tried)
	}
	// The sandbox ended: its route refuses at once.
	if d, err := net.DialTimeout("tcp", listen, 2*time.Second); err == nil {
		d.Close()
		t.Errorf("connect %s after the sandbox ended succeeded; want refused", listen)
	}

	rcs := ingressReceipts(t, st)
	if len(rcs) != 3 {
		t.Fatalf("ingress receipts = %+v, want 3", rcs)
	}
	var echo *ingressReceipt
	for i, rc := range rcs {
		if rc.Broker != "ingress" || rc.Target != "ui" || rc.Decision != "allow" || rc.Reason != "ok" || !strings.HasPrefix(rc.Client, "127.0.0.1:") ||
			rc.Usage.IngressConnections != 1 || rc.Usage.IngressBytes != rc.BytesIn+rc.BytesOut {
			t.Errorf("receipt %d = %+v; want an allowed ui connection from 127.0.0.1 with its bytes", i, rc)
		}
		if rc.BytesOut == sent {
			echo = &rcs[i]
		}
	}
	if echo == nil || echo.BytesIn != sent-int64(len("ECHO\n"))+int64(len("bye\n")) {
		t.Errorf("no receipt of the echo with %d bytes to the sandbox and %d from it: %+v", sent, sent-5+4, rcs)
	}
}

// Cedar forbids one route: its connections are closed before a byte
// reaches the program, with a deny receipt naming the policy; the other
// route (positive control) reaches it until the ingress connection budget
// is spent, and the connection past it is refused with its receipt. The
// byte budget is limited too: every byte relayed is held by a
// reservation of the privileged side first, and charged.
func TestIngressPolicyAndBudget(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	dir := t.TempDir()
	pol := filepath.Join(dir, "ingress.cedar")
	if err := os.WriteFile(pol, []byte(`@id("all")
permit (principal, action, resource);
@id("no-admin")
forbid (principal, action == Action::"ingress.connect", resource == Route::"admin");
`), 0o644); err != nil {
		t.Fatal(err)
	}
	api, admin := fmt.Sprintf("127.0.0.1:%d", freeHostPort(t)), fmt.Sprintf("127.0.0.1:%d", freeHostPort(t))
	cfg := ingressConfig(t, fmt.Sprintf(`policy: [%s]
budgets:
  ingress_connections: 2
  ingress_bytes: 64KiB
ingress:
  - {name: api, port: %d, listen: "%s"}
  - {name: admin, port: %d, listen: "%s"}
`, pol, ingressPort, api, undeclaredPort, admin))
	sb := startIngressSandbox(t, st, cfg, ingressPort, undeclaredPort)

	if body, err := httpGet(admin); body != "" {
		t.Errorf("GET through the forbidden route = %q, %v; want the connection closed with nothing", body, err)
	}
	for i := range 2 {
		if body, err := httpGet(api); err != nil || !strings.Contains(body, "ingress-ok") {
			t.Fatalf("GET %d through the permitted route = %q, %v", i, body, err)
		}
	}
	if body, err := httpGet(api); body != "" {
		t.Errorf("GET past ingress_connections = %q, %v; want the connection closed with nothing", body, err)
	}
	counts, _ := sb.stop(t)
	if counts[strconv.Itoa(ingressPort)] != 2 || counts[strconv.Itoa(undeclaredPort)] != 0 {
		t.Errorf("the program accepted %v; want 2 on the permitted route's port and none on the forbidden one's", counts)
	}
	var policyDeny, budgetDeny, allowed int
	for _, rc := range ingressReceipts(t, st) {
		switch {
		case rc.Decision == "deny" && rc.Target == "admin" && rc.Reason == "policy-denied" && rc.Policy != nil && len(rc.Policy.Determining) == 1 && rc.Policy.Determining[0] == "no-admin":
			policyDeny++
		case rc.Decision == "deny" && rc.Target == "api" && rc.Reason == "budget-exceeded":
			budgetDeny++
		case rc.Decision == "allow" && rc.Target == "api":
			allowed++
		default:
			t.Errorf("unexpected receipt %+v", rc)
		}
	}
	if policyDeny != 1 || budgetDeny != 1 || allowed != 2 {
		t.Errorf("receipts: %d policy denials, %d budget denials, %d allowed; want 1, 1, 2", policyDeny, budgetDeny, allowed)
	}
	var bytesRelayed int64
	for _, rc := range ingressReceipts(t, st) {
		if rc.Decision == "allow" {
			if rc.Reason != "ok" || rc.BytesIn == 0 || rc.BytesOut == 0 {
				t.Errorf("allowed receipt %+v: want reason ok with bytes both ways", rc)
			}
			bytesRelayed += rc.BytesIn + rc.BytesOut
		}
	}
	if bytesRelayed == 0 || bytesRelayed > 64<<10 {
		t.Errorf("bytes relayed = %d, want some and within ingress_bytes", bytesRelayed)
	}
}

// A route whose host address is taken fails the run before the program
// starts: exit 125, a clear error, nothing left behind.
func TestIngressAddressInUse(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cfg := ingressConfig(t, fmt.Sprintf("ingress:\n  - {name: ui, port: %d, listen: \"%s\"}\n", ingressPort, l.Addr()))
	ws := userWorkspace(t)
	r := cordon(t, cordonBin, st, "run", "--config", cfg, "--ro", probeDir+":/probe", "--workspace", ws, "--", "/probe/probe", "write", "/workspace/ran")
	if r.Code != 125 || !strings.Contains(r.Stderr, "ingress") || !strings.Contains(r.Stderr, "address already in use") || !strings.Contains(r.Stderr, l.Addr().String()) {
		t.Fatalf("run with a taken route address = %d\nstderr: %s", r.Code, r.Stderr)
	}
	if _, err := os.Stat(filepath.Join(ws, "ran")); err == nil {
		t.Error("the program ran although its route could not listen")
	}
	requireNoResidue(t, st)
}

// A daemon sandbox's route: created with --config, reachable from the
// host while it runs, refusing at once when it is stopped. A non-root
// caller may not declare a route on a non-loopback address (control:
// root may, and the same caller may declare a loopback one).
func TestIngressDaemonSandbox(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	d := startDaemon(t, st, "--group", "1000")
	alice := &syscall.Credential{Uid: 1000, Gid: 1000}
	listen := fmt.Sprintf("127.0.0.1:%d", freeHostPort(t))
	cfg := ingressConfig(t, fmt.Sprintf("ingress:\n  - {name: ui, port: %d, listen: \"%s\"}\n", ingressPort, listen))
	os.Chmod(filepath.Dir(cfg), 0o755)
	os.Chmod(cfg, 0o644)
	ctl := t.TempDir()
	os.Chmod(ctl, 0o755)
	sb := &ingressSandbox{ctl: ctl, quit: fmt.Sprintf("quit-daemon-%d", time.Now().UnixNano())}
	d.createStart("web", "--config", cfg, "--ro", probeDir+":/probe", "--ro", ctl+":/ctl",
		"--", "/probe/probe", "serve", "120", "/ctl/"+sb.quit, strconv.Itoa(ingressPort))
	sb.proc = &cordonProc{done: make(chan struct{})} // never closes: the daemon runs it
	sb.waitListening(t, ingressPort)
	if body, err := httpGet(listen); err != nil || !strings.Contains(body, "ingress-ok") {
		t.Fatalf("GET through the daemon sandbox's route = %q, %v", body, err)
	}
	if r := d.cli("sandbox", "stop", "web"); r.Code != 0 {
		t.Fatalf("sandbox stop = %d %s", r.Code, r.Stderr)
	}
	if c, err := net.DialTimeout("tcp", listen, 2*time.Second); err == nil {
		c.Close()
		t.Errorf("connect %s after the sandbox stopped succeeded; want refused at once", listen)
	}
	rcs := ingressReceipts(t, st)
	if len(rcs) != 1 || rcs[0].Decision != "allow" || rcs[0].Target != "ui" {
		t.Errorf("receipts = %+v, want the one allowed GET", rcs)
	}

	// A non-root caller: no route reachable from the network.
	unsafe := ingressConfigOf(t, "u1000-web", "u1000", fmt.Sprintf("ingress:\n  - {name: pub, port: %d, listen: \"0.0.0.0:%d\", unsafe_listen: true}\n", ingressPort, freeHostPort(t)))
	safe := ingressConfigOf(t, "u1000-web", "u1000", fmt.Sprintf("ingress:\n  - {name: ui, port: %d, listen: \"127.0.0.1:%d\"}\n", ingressPort, freeHostPort(t)))
	for _, p := range []string{unsafe, safe} {
		os.Chmod(filepath.Dir(p), 0o755)
		os.Chmod(p, 0o644)
	}
	r := cordonSocket(t, d.socket, st, alice, "sandbox", "create", "pub", "--config", unsafe, "--", "/bin/sleep", "1000")
	if r.Code == 0 || !strings.Contains(r.Stderr, "unsafe_listen") || !strings.Contains(r.Stderr, "only root") {
		t.Errorf("alice's create with an unsafe_listen route = %d %s; want refused", r.Code, r.Stderr)
	}
	if r := cordonSocket(t, d.socket, st, alice, "sandbox", "create", "lo", "--config", safe, "--", "/bin/sleep", "1000"); r.Code != 0 {
		t.Errorf("control: alice's create with a loopback route = %d %s", r.Code, r.Stderr)
	}
	cordonSocket(t, d.socket, st, alice, "sandbox", "rm", "lo")
	if r := d.cli("sandbox", "create", "rootpub", "--config", unsafe, "--", "/bin/sleep", "1000"); r.Code != 0 {
		t.Errorf("control: root's create with an unsafe_listen route = %d %s", r.Code, r.Stderr)
	}
	d.cli("sandbox", "rm", "rootpub")
	d.cli("sandbox", "rm", "web")
}

// A compromised ingress broker process (test build hook, run once it is
// hardened): the checked dialer gives it only the declared port on the
// sandbox's 127.0.0.1 — not another port there, not a host listener, not
// another address — and it cannot connect anywhere itself. Nor does it
// get the declared port: the root side grants one dial per connection
// the authority admitted, and the hook asked for none (refused as
// not-admitted; that it is not refused as not-declared is the control
// that the address checks are what refuse the others).
func TestIngressCompromisedBroker(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	host := testkit.NewCountingListener(t, "tcp", "127.0.0.1:0")
	cfg := ingressConfig(t, fmt.Sprintf("ingress:\n  - {name: ui, port: %d, listen: \"127.0.0.1:%d\"}\n", ingressPort, freeHostPort(t)))
	declared, undeclared := fmt.Sprintf("127.0.0.1:%d", ingressPort), fmt.Sprintf("127.0.0.1:%d", undeclaredPort)
	hostAddr := "127.0.0.1:" + host.Port()
	spec, _ := json.Marshal(map[string]any{"broker": "ingress",
		"dial": []string{declared, undeclared, hostAddr, "192.0.2.1:80", "[::1]:" + strconv.Itoa(ingressPort)},
		"tcp":  []string{hostAddr}})
	rep, _, _ := runCompromised(t, st, cfg, spec)
	got := map[string]string{}
	for _, a := range rep.Attempts {
		got[a.Probe] = a.Err
		if strings.HasPrefix(a.Probe, "dial ") || strings.HasPrefix(a.Probe, "tcp ") {
			t.Logf("%s: err=%q", a.Probe, a.Err)
		}
	}
	for _, target := range []string{undeclared, hostAddr, "192.0.2.1:80", "[::1]:" + strconv.Itoa(ingressPort)} {
		if e, ok := got["dial "+target]; !ok || !strings.Contains(e, "not-declared") {
			t.Errorf("dialer for %s: err %q (reported %t), want refused as not declared", target, e, ok)
		}
	}
	if e, ok := got["dial "+declared]; !ok || !strings.Contains(e, "not-admitted") {
		t.Errorf("dialer for the declared %s with no admitted connection: err %q (reported %t), want refused as not-admitted (past the address checks)", declared, e, ok)
	}
	if e, ok := got["tcp "+hostAddr]; !ok || e == "" {
		t.Errorf("direct connect to %s: err %q (reported %t), want a failure", hostAddr, e, ok)
	}
	if n := host.Settle(0); n != 0 {
		t.Errorf("the host listener accepted %d connections, want 0", n)
	}
}
