package sbinit

import (
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/evidence"
)

// TestInSituAttemptsReachWhatNothingDenies is the positive control of the
// network and IPC attempts themselves: made here, by a process with no
// namespace, Landlock or filter of its own, the init's connects to the
// host's abstract socket and loopback port must arrive and be judged as
// reached. If they did not (a wrong name, a wrong port), the checks would
// pass inside every sandbox whatever its boundary.
func TestInSituAttemptsReachWhatNothingDenies(t *testing.T) {
	h, err := evidence.OpenInSitu(false)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	// The control write lands in the host's /tmp under another name here
	// only if nothing holds it; release removes it.
	cfg := &Config{InSitu: &InSitu{Abstract: h.Abstract, Port: h.Port}}
	s := attemptInSitu(cfg)
	defer s.release()
	got := h.Judge(evidence.InSituInputs{Pid: os.Getpid(), ProbeDir: ProbeDir, Write: InSituWrite, Control: InSituControl, RoutePort: InSituPort, Route: InSituRoute})
	seen := map[string]evidence.Check{}
	for _, c := range got.Checks {
		seen[c.Name] = c
	}
	for _, name := range []string{"insitu_host_abstract_socket", "insitu_host_loopback_port"} {
		c, ok := seen[name]
		if !ok || c.OK {
			t.Errorf("%s = %+v: the unimpeded attempt was not seen to reach the host's listener", name, c)
		}
		if ctl := seen[name+"_control"]; !ctl.OK {
			t.Errorf("%s_control = %+v", name, ctl)
		}
	}
	// The kernel objects: where the host itself lets this process make
	// one (no filter here), the judge must see it among the descriptors
	// (a wrong anon_inode name would pass inside every sandbox).
	for name, mk := range map[string]func() (int, error){
		"insitu_io_uring_setup": func() (int, error) {
			var params [120]byte
			return sysFD(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0])), 0)
		},
		"insitu_userfaultfd": func() (int, error) {
			return sysFD(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|unix.O_NONBLOCK|1, 0, 0)
		},
	} {
		fd, err := mk()
		if err != nil {
			t.Logf("%s: the host refuses the call itself (%v): not checked", name, err)
			continue
		}
		unix.Close(fd)
		if c, ok := seen[name]; !ok || c.OK {
			t.Errorf("%s = %+v: the object the attempt made was not seen", name, c)
		}
	}
	// The route out: where this host has one (the connect sends nothing),
	// the judge must see the attempt's connected socket.
	if fd, err := connectInet(unix.SOCK_DGRAM, [4]byte{192, 0, 2, 1}, InSituPort); err != nil {
		t.Logf("insitu_route_out: this host has no route to %s (%v): not checked", InSituRoute, err)
	} else {
		unix.Close(fd)
		if c := seen["insitu_route_out"]; c.OK {
			t.Errorf("insitu_route_out = %+v: the connected socket was not seen", c)
		}
	}
	if c := seen["insitu_route_control"]; !c.OK {
		t.Errorf("insitu_route_control = %+v: the loopback UDP connect is not listed", c)
	}
}
