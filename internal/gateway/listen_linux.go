package gateway

import (
	"fmt"
	"os"

	"github.com/cordon-project/cordon/internal/setns"
	"golang.org/x/sys/unix"
)

// ListenInNetns opens TCP listeners on 127.0.0.1 at ports inside the
// network namespace of pid, and returns them as files (to hand to the
// gateway process). It runs on one locked thread: setns into the
// sandbox's namespace, listen, setns back; if the way back fails the thread
// stays locked so the runtime discards it.
func ListenInNetns(pid int, ports []int) ([]*os.File, error) {
	var files []*os.File
	err := setns.Do(fmt.Sprintf("/proc/%d/ns/net", pid), unix.CLONE_NEWNET, func() error {
		for _, p := range ports {
			// net.Listen would ask the runtime's poller, which is fine, but
			// a raw socket keeps this thread's work to plain syscalls.
			f, err := listenTCP(p)
			if err != nil {
				return fmt.Errorf("listen on 127.0.0.1:%d in the sandbox: %w", p, err)
			}
			files = append(files, f)
		}
		return nil
	})
	if err != nil {
		for _, f := range files {
			f.Close()
		}
		return nil, fmt.Errorf("the sandbox's network namespace: %w", err)
	}
	return files, nil
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
