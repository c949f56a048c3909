package evidence

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/testkit"
)

// The main goroutine keeps the main thread (the thread-group leader, the
// one /proc/self names) so a test can move that thread into another
// network namespace, as a goroutine of ListenInNetns or the TCP watch does
// when the runtime happens to run it there.
func init() { runtime.LockOSThread() }

var onMain = make(chan func())

func TestMain(m *testing.M) {
	done := make(chan int)
	go func() { done <- m.Run() }()
	for {
		select {
		case f := <-onMain:
			f()
		case code := <-done:
			os.Exit(code)
		}
	}
}

// sleeper starts a child that waits; newNet puts it in a network namespace
// of its own. It is killed (by its pid) when the test ends.
func sleeper(t *testing.T, newNet bool) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(testkit.RequireCommand(t, "a process to inspect", "sleep"), "60")
	if newNet {
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// mainThreadIn moves the main thread into the network namespace of pid
// and returns a function that brings it back.
func mainThreadIn(t *testing.T, pid int) (back func()) {
	t.Helper()
	entered, release, returned := make(chan error), make(chan struct{}), make(chan struct{})
	onMain <- func() {
		defer close(returned)
		self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			entered <- err
			return
		}
		defer unix.Close(self)
		target, err := unix.Open(fmt.Sprintf("/proc/%d/ns/net", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			entered <- err
			return
		}
		defer unix.Close(target)
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			entered <- err
			return
		}
		entered <- nil
		<-release
		if err := unix.Setns(self, unix.CLONE_NEWNET); err != nil {
			panic("main thread cannot return to its network namespace: " + err.Error())
		}
	}
	if err := <-entered; err != nil {
		<-returned
		t.Fatalf("move the main thread into pid %d's network namespace: %v", pid, err)
	}
	var once bool
	back = func() {
		if !once {
			once = true
			close(release)
			<-returned
		}
	}
	t.Cleanup(back)
	return back
}

// TestNetNamespaceReferenceIsThisThread is the regression test for a
// flake under load: a tool server admitted below DEDICATED_CONTAINER with
// "unverified boundaries: network". The collector compared the sandbox's
// namespace with /proc/self/ns/net, the main thread's, while the main
// thread could be inside that very sandbox's namespace (the TCP watch's
// sock_diag socket is opened there on a locked thread), so the sandbox
// looked like "the host". It moves the main thread as that goroutine does
// and collects: the sandbox must still be seen in a namespace of its own,
// a process in the host's namespace must still fail (positive control),
// and the displacement must be real (/proc/self/ns/net is the sandbox's).
func TestNetNamespaceReferenceIsThisThread(t *testing.T) {
	testkit.RequireRoot(t)
	boxed, host := sleeper(t, true), sleeper(t, false)
	boxProc, hostProc := fmt.Sprintf("/proc/%d", boxed.Process.Pid), fmt.Sprintf("/proc/%d", host.Process.Pid)
	boxNS, err := os.Readlink(boxProc + "/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	back := mainThreadIn(t, boxed.Process.Pid)
	if leader, err := os.Readlink("/proc/self/ns/net"); err != nil || leader != boxNS {
		t.Fatalf("setup: /proc/self/ns/net = %q, %v; want the sandbox's %q (the main thread was moved)", leader, err, boxNS)
	}
	for i := 0; i < 20; i++ { // on whatever thread the runtime picks
		if c := pick(nsChecks(boxProc), "net"); len(c) != 1 || !c[0].OK {
			t.Fatalf("sandbox in its own network namespace, main thread inside it: %+v; want verified", c)
		}
		if c := pick(nsChecks(hostProc), "net"); len(c) != 1 || c[0].OK {
			t.Fatalf("process in the host's network namespace: %+v; want not verified", c)
		}
	}
	if b := judge(append(pick(nsChecks(boxProc), "net"), networkChecks(boxProc)...)); !b.Verified {
		t.Fatalf("network boundary of a sandbox with nothing but lo, main thread inside it: %+v", b.Facts)
	}
	back()
	if c := pick(nsChecks(hostProc), "net"); len(c) != 1 || c[0].OK {
		t.Fatalf("process in the host's network namespace (main thread home): %+v; want not verified", c)
	}
}

// TestNetworkChecksRefuseRealInterfaces: a namespace of its own is not
// enough; an interface beside lo, an IPv4 route or a non-loopback IPv6
// route each fail the network boundary, and name what was found.
func TestNetworkChecksRefuseRealInterfaces(t *testing.T) {
	testkit.RequireRoot(t)
	ipTool := testkit.RequireCommand(t, "to add an interface in a test namespace", "ip")
	nsenter := testkit.RequireCommand(t, "to enter the test namespace", "nsenter")
	boxed := sleeper(t, true)
	proc := fmt.Sprintf("/proc/%d", boxed.Process.Pid)
	if b := judge(append(pick(nsChecks(proc), "net"), networkChecks(proc)...)); !b.Verified {
		t.Fatalf("a fresh namespace (lo only) is refused: %+v", b.Facts)
	}
	in := func(args ...string) {
		t.Helper()
		a := append([]string{"-t", fmt.Sprint(boxed.Process.Pid), "-n", ipTool}, args...)
		if out, err := exec.Command(nsenter, a...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	in("link", "add", "cdtest0", "type", "veth", "peer", "name", "cdtest1")
	in("link", "set", "lo", "up")
	in("link", "set", "cdtest1", "up")
	in("link", "set", "cdtest0", "up")
	in("addr", "add", "192.0.2.1/24", "dev", "cdtest0")
	in("-6", "addr", "add", "2001:db8::1/64", "dev", "cdtest0", "nodad")
	got := map[string]Check{}
	for _, c := range networkChecks(proc) {
		got[c.Name] = c
	}
	if c := got["interfaces"]; c.OK || !strings.Contains(c.Got, "cdtest0") {
		t.Errorf("interfaces with a veth beside lo: %+v; want refused, naming cdtest0", c)
	}
	if c := got["ipv4_routes"]; c.OK {
		t.Errorf("ipv4_routes with 192.0.2.0/24 on cdtest0: %+v; want refused", c)
	}
	if c := got["ipv6_routes"]; c.OK || !strings.Contains(c.Got, "cdtest0") {
		t.Errorf("ipv6_routes with 2001:db8::/64 on cdtest0: %+v; want refused, naming cdtest0", c)
	}
}
