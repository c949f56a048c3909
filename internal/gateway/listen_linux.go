package gateway

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// ListenInNetns opens TCP listeners on 127.0.0.1 at ports inside the
// network namespace of pid, and returns them as files (to hand to the
// gateway process). It runs on one locked thread: setns into the
// sandbox's namespace, listen, setns back; if the way back fails the thread
// stays locked so the runtime discards it.
func ListenInNetns(pid int, ports []int) ([]*os.File, error) {
	type result struct {
		files []*os.File
		err   error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: err}
			return
		}
		defer unix.Close(self)
		target, err := unix.Open(fmt.Sprintf("/proc/%d/ns/net", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: err}
			return
		}
		defer unix.Close(target)
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("enter the sandbox's network namespace: %w", err)}
			return
		}
		var files []*os.File
		var lerr error
		for _, p := range ports {
			// net.Listen would ask the runtime's poller, which is fine, but
			// a raw socket keeps this thread's work to plain syscalls.
			f, err := listenTCP(p)
			if err != nil {
				lerr = fmt.Errorf("listen on 127.0.0.1:%d in the sandbox: %w", p, err)
				break
			}
			files = append(files, f)
		}
		if err := unix.Setns(self, unix.CLONE_NEWNET); err != nil {
			// Stay locked: this thread is in the wrong namespace for good.
			for _, f := range files {
				f.Close()
			}
			ch <- result{err: fmt.Errorf("return from the sandbox's network namespace: %w", err)}
			return
		}
		runtime.UnlockOSThread()
		if lerr != nil {
			for _, f := range files {
				f.Close()
			}
		}
		ch <- result{files: files, err: lerr}
	}()
	r := <-ch
	return r.files, r.err
}

func listenTCP(port int) (*os.File, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := unix.Listen(fd, 1024); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), fmt.Sprintf("sandbox-127.0.0.1:%d", port)), nil
}
