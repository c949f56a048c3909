package linux

import (
	"os"
	"testing"

	"github.com/cordon-project/cordon/internal/sandbox/linux/sbinit"
	"github.com/cordon-project/cordon/internal/testkit"
	"golang.org/x/sys/unix"
)

// checkMaster keeps exactly one pty master and refuses anything else,
// closing what it refuses. The master itself is the positive control.
func TestCheckMaster(t *testing.T) {
	m, s := testkit.PtyPair(t)
	defer s.Close()
	if got, err := checkMaster([]*os.File{m}); err != nil || got != m {
		t.Fatalf("checkMaster(pty master) = %v, %v; want it kept", got, err)
	}
	m.Close()

	null, err := os.Open("/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	m2, s2 := testkit.PtyPair(t)
	defer m2.Close()
	reg, err := os.CreateTemp(t.TempDir(), "f")
	if err != nil {
		t.Fatal(err)
	}
	m3, s3 := testkit.PtyPair(t)
	defer s3.Close()
	m4, s4 := testkit.PtyPair(t)
	defer s4.Close()
	for _, tc := range []struct {
		name string
		fds  []*os.File
	}{
		{"none", nil},
		{"a character device that is not a pty", []*os.File{null}},
		{"a pty slave", []*os.File{s2}},
		{"a regular file", []*os.File{reg}},
		{"two masters", []*os.File{m3, m4}},
	} {
		if got, err := checkMaster(tc.fds); err == nil || got != nil {
			t.Errorf("checkMaster(%s) = %v, %v; want refused", tc.name, got, err)
		}
		for _, f := range tc.fds {
			var st unix.Stat_t
			if unix.Fstat(int(f.Fd()), &st) == nil {
				t.Errorf("checkMaster(%s) left %s open", tc.name, f.Name())
			}
		}
	}
}

// takeMaster accepts descriptors only with a terminal the spec asked for.
func TestTakeMasterUnrequested(t *testing.T) {
	m, s := testkit.PtyPair(t)
	defer s.Close()
	sb := &linuxSandbox{}
	if err := sb.takeMaster(sbinitStarted(true), []*os.File{m}); err == nil {
		t.Errorf("a pty master no terminal was asked for was accepted")
	}
	if sb.Master() != nil {
		t.Errorf("the sandbox kept an unrequested master")
	}
	if err := sb.takeMaster(sbinitStarted(false), nil); err != nil {
		t.Errorf("started without a terminal, none asked for: %v", err)
	}
}

func sbinitStarted(tty bool) sbinit.Message { return sbinit.Message{Type: "started", Pid: 2, Tty: tty} }

// drainEvents closes what a message after Exec's carried: a second
// "started" with a descriptor (the init misbehaving) leaves nothing open
// in the trusted side. Positive control: the descriptor is open before.
func TestDrainEventsClosesDescriptors(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	fd := int(w.Fd())
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
		t.Fatalf("control: the pipe's descriptor is not open: %v", err)
	}
	ch := make(chan event, 2)
	ch <- event{msg: sbinitStarted(true), fds: []*os.File{w}}
	ch <- event{msg: sbinit.Message{Type: "exit"}}
	close(ch)
	drainEvents(ch)
	if _, err := w.Write([]byte("x")); err == nil {
		t.Errorf("the descriptor a drained event carried is still open")
	}
}
