package setns

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Do runs fn on a thread that has joined the namespace at path (of type
// nstype: unix.CLONE_NEWNET, CLONE_NEWIPC or CLONE_NEWUTS), then returns
// the thread to its own namespace. If the way back fails the thread stays
// locked, so the runtime discards it rather than reuse it, and Do returns
// that error: whatever fn made in the namespace is the caller's to undo.
func Do(path string, nstype int, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := unix.Open(fmt.Sprintf("/proc/thread-self/ns/%s", nsFile(nstype)), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer unix.Close(self)
		target, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer unix.Close(target)
		if err := unix.Setns(target, nstype); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("setns %s: %w", path, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(self, nstype); err != nil {
			errc <- fmt.Errorf("return from %s: %w", path, err) // thread stays locked and dies
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// nsFile is nstype's name under /proc/PID/ns.
func nsFile(nstype int) string {
	switch nstype {
	case unix.CLONE_NEWUTS:
		return "uts"
	case unix.CLONE_NEWIPC:
		return "ipc"
	case unix.CLONE_NEWNET:
		return "net"
	}
	return "invalid"
}
