package linux

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/setns"
	"github.com/cordon-project/cordon/internal/testkit"
)

// engineNetAddr is the address the test's "engine" gives its network
// namespace (a private one: nothing routes anywhere from it).
const engineNetAddr = "10.251.0.2"

// engineNetns makes a network namespace as an engine would (held by a
// helper process, owned by the host's user namespace) with lo up and a
// veth pair (this kernel has no dummy driver), one end carrying engineNetAddr/24, and a TCP listener on that
// address inside it. It returns the namespace's path, its inode, and the
// listener (closed at the test's end).
func engineNetns(t *testing.T) (string, uint64, net.Listener) {
	t.Helper()
	ip := testkit.RequireCommand(t, "configures the test's engine network namespace", "ip")
	nsenter := testkit.RequireCommand(t, "enters the test's engine network namespace", "nsenter")
	holder := exec.Command("sleep", "3600")
	holder.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWNET}
	if err := holder.Start(); err != nil {
		t.Fatalf("start the namespace's holder: %v", err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	path := "/proc/" + strconv.Itoa(holder.Process.Pid) + "/ns/net"
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", "cdn-eng0", "type", "veth", "peer", "name", "cdn-eng1"},
		{"addr", "add", engineNetAddr + "/24", "dev", "cdn-eng0"},
		{"link", "set", "cdn-eng0", "up"},
		{"link", "set", "cdn-eng1", "up"},
	} {
		if out, err := exec.Command(nsenter, append([]string{"--net=" + path, ip}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v in %s: %v: %s", args, path, err, out)
		}
	}
	var ln net.Listener
	if err := setns.Do(path, unix.CLONE_NEWNET, func() (err error) {
		ln, err = net.Listen("tcp", engineNetAddr+":0")
		return err
	}); err != nil {
		t.Fatalf("listen in %s: %v", path, err)
	}
	t.Cleanup(func() { ln.Close() })
	return path, nsIno(t, path), ln
}

func nsIno(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	return st.Ino
}

// accepted serves ln: each connection's first line is sent on the channel.
func accepted(ln net.Listener) <-chan string {
	lines := make(chan string, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			lines <- strings.TrimSpace(l)
		}
	}()
	return lines
}

// TestEngineNetJoined: a sandbox given an engine's network namespace
// (Spec.EngineNet) runs in it — read from outside, its init's
// /proc/PID/ns/net is that namespace, and its program reaches the
// listener inside it — and the evidence says so: the network boundary is
// the one not verified (the namespace is not the host's, its interfaces
// and routes listed, a fact naming it the engine's), the level admitted
// is DEDICATED_RUNTIME and the record carries a non-claim. The control:
// the same program without EngineNet gets cordon's own namespace (another
// inode, lo only), cannot reach the listener, and is admitted
// DEDICATED_CONTAINER.
func TestEngineNetJoined(t *testing.T) {
	p := newImageProvider(t)
	path, ino, ln := engineNetns(t)
	lines := accepted(ln)
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	script := "echo joined | /bin/busybox nc " + engineNetAddr + " " + port + "; echo rc=$?; exec /bin/busybox sleep 600"

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := &testkit.SyncBuffer{}
	spec := imageSpec(imageRoot(t, ""), sandbox.Image{Writable: true}, script)
	spec.Level, spec.Stdout = sandbox.DedicatedRuntime, out
	spec.EngineNet = &sandbox.EngineNet{File: f, Path: path, Reason: "the test's acceptance"}
	ctx := context.Background()
	s, err := p.Provision(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Deprovision(context.Background()) })
	adm, err := s.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sb := s.(*linuxSandbox)
	if got := nsIno(t, "/proc/"+strconv.Itoa(sb.InitPid())+"/ns/net"); got != ino {
		t.Errorf("the init's network namespace is inode %d, want the engine's %d", got, ino)
	}
	rec := adm.Record
	if adm.Level != sandbox.DedicatedRuntime || rec.LevelAdmitted != sandbox.DedicatedRuntime || adm.Verified {
		t.Errorf("admitted %v (record %v, verified %v), want DEDICATED_RUNTIME unverified", adm.Level, rec.LevelAdmitted, adm.Verified)
	}
	for name, b := range rec.Boundaries {
		if b.Verified != (name != evidence.Network) {
			t.Errorf("boundary %s verified = %v; only the network boundary may be unverified (failed: %v)", name, b.Verified, failedFacts(rec))
		}
	}
	facts := map[string]evidence.Check{}
	for _, c := range rec.Boundaries[evidence.Network].Facts {
		facts[c.Name] = c
	}
	if c := facts["net_namespace"]; !c.OK {
		t.Errorf("net_namespace = %+v: the engine's namespace is not the host's", c)
	}
	if c := facts["interfaces"]; c.OK || !strings.Contains(c.Got, "cdn-eng0") {
		t.Errorf("interfaces = %+v, want the engine's cdn-eng0 listed and not OK", c)
	}
	if c := facts["own_network_namespace"]; c.OK || !strings.Contains(c.Got, path) || !strings.Contains(c.Got, "cdn-eng0") || !strings.Contains(c.Got, "routes out exist") {
		t.Errorf("own_network_namespace = %+v, want not OK, naming %s, its interfaces and routes", c, path)
	}
	if nc := strings.Join(rec.NonClaims, "\n"); !strings.Contains(nc, "network boundary not claimed: the engine's network namespace "+path) {
		t.Errorf("non-claims lack the engine network:\n%s", nc)
	}
	if err := s.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if l := <-lines; l != "joined" {
		t.Errorf("the listener in the engine's namespace read %q, want \"joined\"", l)
	}
	waitFor(t, sb, "nc's status", func() bool { return strings.Contains(out.String(), "rc=") })
	if !strings.Contains(out.String(), "rc=0") {
		t.Errorf("nc in the engine's namespace: %q, want rc=0", out.String())
	}

	t.Run("control without EngineNet", func(t *testing.T) {
		out := &testkit.SyncBuffer{}
		spec := imageSpec(imageRoot(t, ""), sandbox.Image{Writable: true}, script)
		spec.Stdout = out
		sb, rec := startImageRecord(t, p, spec)
		if got := nsIno(t, "/proc/"+strconv.Itoa(sb.InitPid())+"/ns/net"); got == ino {
			t.Errorf("without EngineNet the init is in the engine's namespace (inode %d)", got)
		}
		if rec.LevelAdmitted != sandbox.DedicatedContainer || !hasFact(rec, evidence.Network, "interfaces") {
			t.Errorf("admitted %v, interfaces fact OK %v; want DEDICATED_CONTAINER with lo only", rec.LevelAdmitted, hasFact(rec, evidence.Network, "interfaces"))
		}
		waitFor(t, sb, "nc's status", func() bool { return strings.Contains(out.String(), "rc=") })
		if strings.Contains(out.String(), "rc=0") {
			t.Errorf("nc from cordon's own namespace reached the engine's listener: %q", out.String())
		}
		select {
		case l := <-lines:
			t.Errorf("the engine's listener accepted a connection from the control: %q", l)
		default:
		}
	})
}

// TestEngineNetRefused: the provider checks the descriptor itself: the
// host's own network namespace, one another user namespace owns, and
// daemon mode are refused at Provision. (The join above is the control.)
func TestEngineNetRefused(t *testing.T) {
	p := newImageProvider(t)
	foreign := exec.Command("sleep", "3600")
	foreign.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWNET}
	if err := foreign.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = foreign.Process.Kill(); _ = foreign.Wait() })
	for _, c := range []struct{ path, want string }{
		{"/proc/self/ns/net", "host's own network namespace"},
		{"/proc/thread-self/ns/net", "host's own network namespace"},
		{"/proc/" + strconv.Itoa(foreign.Process.Pid) + "/ns/net", "owned by another user namespace"},
	} {
		f, err := os.Open(c.path)
		if err != nil {
			t.Fatal(err)
		}
		spec := imageSpec(imageRoot(t, ""), sandbox.Image{}, "true")
		spec.Level = sandbox.DedicatedRuntime
		spec.EngineNet = &sandbox.EngineNet{File: f, Path: c.path}
		s, err := p.Provision(context.Background(), spec)
		f.Close()
		if err == nil {
			s.Deprovision(context.Background())
			t.Errorf("Provision with EngineNet %s: no error", c.path)
		} else if !strings.Contains(err.Error(), c.want) {
			t.Errorf("Provision with EngineNet %s: %v, want %q", c.path, err, c.want)
		}
	}
}
