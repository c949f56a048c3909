package oci

import (
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/testkit"
)

// nsChild starts a child in new namespaces (flags) and returns its
// /proc/PID/ns/NAME path; the child is killed at the test's end.
func nsChild(t *testing.T, flags uintptr, name string) string {
	t.Helper()
	c := exec.Command("sleep", "60")
	c.SysProcAttr = &syscall.SysProcAttr{Cloneflags: flags}
	if err := c.Start(); err != nil {
		t.Fatalf("start a child in new namespaces %#x: %v", flags, err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	return "/proc/" + strconv.Itoa(c.Process.Pid) + "/ns/" + name
}

// withNetPath is the Docker bundle whose network namespace is path.
func withNetPath(t *testing.T, path string) (*specs.Spec, []byte) {
	t.Helper()
	s, raw := load(t, "docker-config.json")
	for i := range s.Linux.Namespaces {
		if s.Linux.Namespaces[i].Type == specs.NetworkNamespace {
			s.Linux.Namespaces[i].Path = path
		}
	}
	return s, raw
}

var acceptOpts = Options{Level: sandbox.DedicatedRuntime, ConfigDir: "/etc/cordon/oci", EngineNetwork: EngineNetworkAccept}

// TestEngineNetworkValidate: accepting the engine's network needs a level
// the evidence can support without the network boundary; the error names
// both flags.
func TestEngineNetworkValidate(t *testing.T) {
	for _, c := range []struct {
		o       Options
		wantErr string
	}{
		{Options{Level: sandbox.DedicatedContainer}, ""},
		{Options{Level: sandbox.DedicatedContainer, EngineNetwork: EngineNetworkOwn}, ""},
		{Options{Level: sandbox.DedicatedRuntime, EngineNetwork: EngineNetworkAccept}, ""},
		{Options{Level: sandbox.DomainIsolated, EngineNetwork: EngineNetworkAccept}, ""},
		{Options{Level: sandbox.DedicatedContainer, EngineNetwork: EngineNetworkAccept}, "--level DEDICATED_RUNTIME or lower, and --level is DEDICATED_CONTAINER"},
		{Options{Level: sandbox.DedicatedRuntime, EngineNetwork: "host"}, `--engine-network "host"`},
	} {
		err := c.o.Validate()
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("Validate(%+v) = %v, want nil", c.o, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), "--engine-network")):
			t.Errorf("Validate(%+v) = %v, want an error naming --engine-network and %q", c.o, err, c.wantErr)
		case c.wantErr != "" && failure.KindOf(err) != failure.KindUsage:
			t.Errorf("Validate(%+v): kind %v, want usage", c.o, failure.KindOf(err))
		}
	}
	s, raw := load(t, "docker-config.json")
	if _, err := Map(s, raw, "/bundle", Options{Level: sandbox.DedicatedContainer, EngineNetwork: EngineNetworkAccept}); err == nil {
		t.Errorf("Map with --engine-network=accept at DEDICATED_CONTAINER: no error")
	}
}

// TestEngineNetworkJoin: with accept, a network namespace path the host's
// user namespace owns (a pod's) is mapped to be joined; without accept
// (the control) the same path is recorded and not joined.
func TestEngineNetworkJoin(t *testing.T) {
	testkit.RequireRoot(t)
	podNet := nsChild(t, unix.CLONE_NEWNET, "net")
	s, raw := withNetPath(t, podNet)
	m, err := Map(s, raw, "/bundle", acceptOpts)
	if err != nil {
		t.Fatalf("Map(accept, %s): %v", podNet, err)
	}
	if m.EngineNetPath != podNet || !strings.Contains(m.Network, "engine network namespace "+podNet+" joined") {
		t.Errorf("accept: EngineNetPath %q, Network %q; want %s joined", m.EngineNetPath, m.Network, podNet)
	}
	if notes := strings.Join(m.NotHonoured, "\n"); strings.Contains(notes, "not joined") || strings.Contains(notes, "cordon's own network namespace") {
		t.Errorf("accept: not-honoured still says the namespace is not joined:\n%s", notes)
	}
	en, err := m.OpenEngineNet()
	if err != nil || en == nil || en.File == nil {
		t.Fatalf("OpenEngineNet: %v %+v", err, en)
	}
	defer en.File.Close()
	var a, b unix.Stat_t
	if unix.Fstat(int(en.File.Fd()), &a) != nil || unix.Stat(podNet, &b) != nil || a.Ino != b.Ino {
		t.Errorf("OpenEngineNet opened inode %d, the pod's is %d", a.Ino, b.Ino)
	}

	own := acceptOpts
	own.EngineNetwork, own.Level = EngineNetworkOwn, sandbox.DedicatedContainer
	m, err = Map(s, raw, "/bundle", own)
	if err != nil {
		t.Fatalf("Map(own): %v", err)
	}
	if m.EngineNetPath != "" || !strings.Contains(strings.Join(m.NotHonoured, "\n"), "network path "+podNet+": not joined") || !strings.Contains(m.Network, "cordon's own") {
		t.Errorf("own: EngineNetPath %q Network %q not-honoured %q", m.EngineNetPath, m.Network, m.NotHonoured)
	}
	if en, err := m.OpenEngineNet(); en != nil || err != nil {
		t.Errorf("own: OpenEngineNet = %+v, %v; want nothing", en, err)
	}

	// A CRI pod's other containers name the pod sandbox container's task
	// (a cordon keeper, in the host's namespace): with accept they join
	// the namespace that container joined.
	ks, kraw := withNetPath(t, "/proc/4242/ns/net")
	ko := acceptOpts
	ko.IsKeeper = func(pid int) bool { return pid == 4242 }
	ko.KeeperEngineNet = func(pid int) string {
		if pid == 4242 {
			return podNet
		}
		return ""
	}
	if m, err := Map(ks, kraw, "/bundle", ko); err != nil || m.EngineNetPath != podNet || !strings.Contains(m.Network, "whose keeper /proc/4242/ns/net names") {
		t.Errorf("a pod keeper's path with accept: %v, EngineNetPath %q Network %q; want %s joined", err, m.EngineNetPath, m.Network, podNet)
	}
	ko.EngineNetwork, ko.Level = EngineNetworkOwn, sandbox.DedicatedContainer
	if m, err := Map(ks, kraw, "/bundle", ko); err != nil || m.EngineNetPath != "" {
		t.Errorf("a pod keeper's path without accept: %v, EngineNetPath %q; want not joined", err, m.EngineNetPath)
	}

	// With a gateway configuration the join is refused: the gateway's
	// listeners would serve the whole pod. The control: the same
	// gateway with cordon's own namespace maps.
	s.Annotations = map[string]string{AnnotationConfig: "agent"}
	_, err = Map(s, raw, "/bundle", acceptOpts)
	var fe *FieldError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "annotations."+AnnotationConfig) || !strings.Contains(err.Error(), "every process sharing") {
		t.Errorf("accept with a gateway: %v, want a refusal naming the annotation", err)
	}
	if m, err := Map(s, raw, "/bundle", own); err != nil || m.Config == "" {
		t.Errorf("control: a gateway with cordon's own namespace: %v", err)
	}
}

// TestEngineNetworkRefuses: with accept, a path that is the host's
// network namespace, a namespace of another type, or a network namespace
// owned by another user namespace (another tenant's, as a sandbox's is)
// is refused naming the field. A namespace the host's user namespace owns
// is the control (TestEngineNetworkJoin).
func TestEngineNetworkRefuses(t *testing.T) {
	testkit.RequireRoot(t)
	ipc := nsChild(t, unix.CLONE_NEWIPC, "ipc")
	foreign := nsChild(t, unix.CLONE_NEWUSER|unix.CLONE_NEWNET, "net")
	mine := nsChild(t, unix.CLONE_NEWNET, "net")
	hostChild := nsChild(t, unix.CLONE_NEWIPC, "net") // a process in the host's network namespace
	for _, c := range []struct{ path, want string }{
		{"/proc/self/ns/net", "the host's own network namespace"},
		{hostChild, "the host's own network namespace"},
		{ipc, "a ipc namespace, not network"},
		{foreign, "owned by another user namespace"},
		{"/dev/null", "not a namespace file"},
	} {
		s, raw := withNetPath(t, c.path)
		_, err := Map(s, raw, "/bundle", acceptOpts)
		var fe *FieldError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), "linux.namespaces") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Map(accept, %s) = %v, want a refusal of linux.namespaces saying %q", c.path, err, c.want)
		}
	}
	// The provider's own check agrees on the descriptor level.
	s, raw := withNetPath(t, mine)
	if _, err := Map(s, raw, "/bundle", acceptOpts); err != nil {
		t.Errorf("control: Map(accept, %s) = %v", mine, err)
	}
}

// TestEngineNetworkNoPath: Docker names no network namespace (runc makes
// it, a hook configures it): accept changes nothing and says so.
func TestEngineNetworkNoPath(t *testing.T) {
	s, raw := load(t, "docker-config.json")
	m, err := Map(s, raw, "/bundle", acceptOpts)
	if err != nil {
		t.Fatal(err)
	}
	if m.EngineNetPath != "" || !strings.Contains(m.Network, "names no network namespace to join") {
		t.Errorf("EngineNetPath %q Network %q", m.EngineNetPath, m.Network)
	}
	if !strings.Contains(strings.Join(m.NotHonoured, "\n"), "could not be joined (no namespace path; hooks are not run)") {
		t.Errorf("not-honoured lacks the engine network note: %q", m.NotHonoured)
	}
	// A keeper's /proc/PID/ns/net (another cordon container's, which is
	// the host's namespace) is never joined, even with accept, when that
	// container has cordon's own namespace.
	s, raw = withNetPath(t, "/proc/4242/ns/net")
	o := acceptOpts
	o.IsKeeper = func(pid int) bool { return pid == 4242 }
	o.KeeperEngineNet = func(int) string { return "" }
	if m, err = Map(s, raw, "/bundle", o); err != nil || m.EngineNetPath != "" {
		t.Errorf("keeper path with accept: %v, EngineNetPath %q", err, m.EngineNetPath)
	}
}
