package probeops

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func init() {
	register("write", func(a []string) (string, error) { return "", os.WriteFile(a[0], []byte("probe"), 0o644) })
	register("read", func(a []string) (string, error) {
		b, err := os.ReadFile(a[0])
		return string(b), err
	})
	register("env", func([]string) (string, error) { return strings.Join(os.Environ(), "\n"), nil })
	// mksock PATH: bind a Unix socket at PATH and leave it there.
	register("mksock", func(a []string) (string, error) {
		fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
		if err != nil {
			return "", err
		}
		defer syscall.Close(fd)
		return "", syscall.Bind(fd, &syscall.SockaddrUnix{Name: a[0]})
	})
	register("ids", func([]string) (string, error) {
		g, err := os.Getgroups()
		return fmt.Sprintf("uid=%d gid=%d euid=%d groups=%v", os.Getuid(), os.Getgid(), os.Geteuid(), g), err
	})
}

func init() {
	// readfd N: read from an inherited descriptor, if there is one.
	register("readfd", func(a []string) (string, error) {
		var n int
		if _, err := fmt.Sscan(a[0], &n); err != nil {
			return "", err
		}
		f := os.NewFile(uintptr(n), "inherited")
		b := make([]byte, 4096)
		k, err := f.Read(b)
		return string(b[:k]), err
	})
	// signal1 SIG: send a signal to PID 1 (the sandbox init).
	register("signal1", func(a []string) (string, error) {
		var n int
		if _, err := fmt.Sscan(a[0], &n); err != nil {
			return "", err
		}
		return "", syscall.Kill(1, syscall.Signal(n))
	})
}

// holdUnix connects N times to a SOCK_SEQPACKET socket and holds the
// connections for SECONDS (the daemon's per-user connection cap).
func holdUnix(args []string) (string, error) {
	if len(args) != 3 {
		return "", fmt.Errorf("usage: hold-unix SOCKET N SECONDS")
	}
	n, _ := strconv.Atoi(args[1])
	secs, _ := strconv.Atoi(args[2])
	held := 0
	var fds []int
	for range n {
		fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_SEQPACKET, 0)
		if err != nil {
			return "", err
		}
		if err := syscall.Connect(fd, &syscall.SockaddrUnix{Name: args[0]}); err != nil {
			syscall.Close(fd)
			continue
		}
		fds = append(fds, fd)
		held++
	}
	time.Sleep(time.Duration(secs) * time.Second)
	return strconv.Itoa(held), nil
}

func init() { register("hold-unix", holdUnix) }
