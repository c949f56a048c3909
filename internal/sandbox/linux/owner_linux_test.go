package linux

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/cordon-project/cordon/internal/testkit"
	"golang.org/x/sys/unix"
)

func threadStatus(t *testing.T, field string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/thread-self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	t.Fatalf("no %s in /proc/thread-self/status", field)
	return ""
}

// asLeaseOwner changes this thread only, keeps its capabilities while the
// euid is the lease's, and gives everything back afterwards (the
// parent-death signal too).
func TestAsLeaseOwner(t *testing.T) {
	testkit.RequireRoot(t)
	const lease = 1<<30 + 12345
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread ends with the test goroutine
		capsBefore, uidBefore := threadStatus(t, "CapEff"), threadStatus(t, "Uid")
		bits, _, _ := unix.RawSyscall(unix.SYS_PRCTL, unix.PR_GET_SECUREBITS, 0, 0)
		if _, _, e := unix.RawSyscall(unix.SYS_PRCTL, unix.PR_SET_PDEATHSIG, uintptr(unix.SIGUSR2), 0); e != 0 {
			t.Errorf("arm pdeathsig: %v", e)
			return
		}
		var inUID, inGID, inCaps, procUID string
		err := asLeaseOwner(lease, lease, func() error {
			inUID, inGID, inCaps = threadStatus(t, "Uid"), threadStatus(t, "Gid"), threadStatus(t, "CapEff")
			// Every other thread of the process keeps root.
			procUID = "0 0 0 0"
			ents, _ := os.ReadDir("/proc/self/task")
			for _, e := range ents {
				if e.Name() == strconv.Itoa(unix.Gettid()) {
					continue
				}
				b, _ := os.ReadFile("/proc/self/task/" + e.Name() + "/status")
				for _, l := range strings.Split(string(b), "\n") {
					if v, ok := strings.CutPrefix(l, "Uid:"); ok && strings.Join(strings.Fields(v), " ") != "0 0 0 0" {
						procUID = "thread " + e.Name() + ": " + strings.Join(strings.Fields(v), " ")
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Errorf("asLeaseOwner: %v", err)
			return
		}
		if inUID != "0 1073754169 0 1073754169" || !strings.HasPrefix(inGID, "0 1073754169 0") {
			t.Errorf("inside: Uid %q, Gid %q; want the lease effective (and fs), real and saved 0", inUID, inGID)
		}
		if inCaps != capsBefore {
			t.Errorf("inside: CapEff %s, want the thread's own %s kept (SECBIT_NO_SETUID_FIXUP)", inCaps, capsBefore)
		}
		if procUID != "0 0 0 0" {
			t.Errorf("other threads during the change: %s, want all 0 0 0 0 (only this thread changes)", procUID)
		}
		if got := threadStatus(t, "Uid"); got != uidBefore {
			t.Errorf("after: Uid %q, want %q", got, uidBefore)
		}
		if got := threadStatus(t, "CapEff"); got != capsBefore {
			t.Errorf("after: CapEff %q, want %q", got, capsBefore)
		}
		if after, _, _ := unix.RawSyscall(unix.SYS_PRCTL, unix.PR_GET_SECUREBITS, 0, 0); after != bits {
			t.Errorf("after: securebits %#x, want %#x", after, bits)
		}
		var sig int32
		unix.RawSyscall(unix.SYS_PRCTL, unix.PR_GET_PDEATHSIG, uintptr(unsafe.Pointer(&sig)), 0)
		if sig != int32(unix.SIGUSR2) {
			t.Errorf("after: parent-death signal %d, want %d kept", sig, unix.SIGUSR2)
		}
	}()
	<-done
}
