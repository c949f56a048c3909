package probeops

// Escape attempts. Each op tries something a sandbox must deny and reports
// per attempt the errno ("ok" when the call succeeded) as a JSON object in
// Data. The tests never trust these reports as the verdict: they observe
// the effect, or its absence, from the host.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func init() {
	for e, n := range map[syscall.Errno]string{unix.ENXIO: "ENXIO", unix.ENOTTY: "ENOTTY", unix.ESRCH: "ESRCH"} {
		if _, ok := errnoNames[e]; !ok {
			errnoNames[e] = n
		}
	}
	register("hold", hold)
	register("mark", func(a []string) (string, error) { return "", os.WriteFile(a[0], []byte("marked"), 0o644) })
	register("writes", func(a []string) (string, error) {
		return attempts(a, func(p string) (string, error) { return "", os.WriteFile(p, []byte("probe"), 0o644) })
	})
	register("reads", func(a []string) (string, error) {
		return attempts(a, func(p string) (string, error) {
			b, err := os.ReadFile(p)
			return string(b), err
		})
	})
	register("ls", func(a []string) (string, error) {
		es, err := os.ReadDir(a[0])
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
		}
		return strings.Join(names, " "), err
	})
	register("setid", setid)
	register("kill", func(a []string) (string, error) {
		pid, err := strconv.Atoi(a[0])
		if err != nil {
			return "", err
		}
		sig, err := strconv.Atoi(a[1])
		if err != nil {
			return "", err
		}
		return "", unix.Kill(pid, syscall.Signal(sig))
	})
	register("procattack", procattack)
	register("pid1", pid1)
	register("connects", func(a []string) (string, error) { return attempts(a, connect) })
	register("userns", userns)
	register("kobj", kobj)
	register("tiocsti", tiocsti)
	register("ttymodes", ttymodes)
}

// attempts runs f on every argument and returns a JSON object mapping
// each to "ok" (or "ok:" and what f returned) or its errno name.
func attempts(args []string, f func(string) (string, error)) (string, error) {
	out := map[string]string{}
	for _, a := range args {
		v, err := f(a)
		out[a] = outcome(v, err)
	}
	b, err := json.Marshal(out)
	return string(b), err
}

func outcome(v string, err error) string {
	if err != nil {
		if n := errnoName(err); n != "" {
			return n
		}
		return "error: " + err.Error()
	}
	if v != "" {
		return "ok:" + v
	}
	return "ok"
}

// hold runs another op, prints its result at once, and then keeps the
// process (and every descriptor the op left open) alive until stdin ends,
// so that the host can inspect it through /proc.
func hold(a []string) (string, error) {
	if len(a) == 0 {
		return "", fmt.Errorf("hold OP [ARGS...]")
	}
	r, ok := Run(a[0], a[1:])
	if !ok {
		return "", fmt.Errorf("unknown op %q", a[0])
	}
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
	done := make(chan struct{})
	go func() {
		_, _ = bufio.NewReader(os.Stdin).ReadString(0)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(90 * time.Second):
	}
	return "", nil
}

// setid tries every way to leave a setuid or setgid file or directory in
// DIR. The host stats what is there afterwards.
func setid(a []string) (string, error) {
	dir := a[0]
	out := map[string]string{}
	plain := func(name string) (string, error) {
		p := filepath.Join(dir, name)
		return p, os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755)
	}
	try := func(name string, f func(p string) error) {
		p, err := plain(name)
		if err != nil {
			out[name] = outcome("", fmt.Errorf("create: %w", err))
			return
		}
		out[name] = outcome("", f(p))
	}
	try("chmod4755", func(p string) error { return unix.Chmod(p, 0o4755) })
	try("chmod2755", func(p string) error { return unix.Chmod(p, 0o2755) })
	try("fchmodat6755", func(p string) error { return unix.Fchmodat(unix.AT_FDCWD, p, 0o6755, 0) })
	try("fchmod4755", func(p string) error {
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Fchmod(fd, 0o4755)
	})
	create := func(name string, f func(p string) error) { out[name] = outcome("", f(filepath.Join(dir, name))) }
	create("open4755", func(p string) error {
		fd, err := unix.Open(p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o4755)
		if err == nil {
			unix.Close(fd)
		}
		return err
	})
	create("creat2755", func(p string) error {
		fd, err := unix.Creat(p, 0o2755)
		if err == nil {
			unix.Close(fd)
		}
		return err
	})
	create("mknod4755", func(p string) error { return unix.Mknod(p, unix.S_IFREG|0o4755, 0) })
	create("mkdir2755", func(p string) error { return unix.Mkdir(p, 0o2755) })
	b, err := json.Marshal(out)
	return string(b), err
}

// procattack tries to kill, ptrace and write the memory of each pid.
func procattack(a []string) (string, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	out := map[string]string{}
	for _, s := range a {
		pid, err := strconv.Atoi(s)
		if err != nil {
			return "", err
		}
		out["kill:"+s] = outcome("", unix.Kill(pid, unix.SIGKILL))
		err = unix.PtraceAttach(pid)
		if err == nil {
			_ = unix.PtraceDetach(pid)
		}
		out["ptrace:"+s] = outcome("", err)
		out["mem:"+s] = outcome("", openMem(fmt.Sprintf("/proc/%d/mem", pid), unix.O_RDWR))
	}
	b, err := json.Marshal(out)
	return string(b), err
}

func openMem(p string, mode int) error {
	fd, err := unix.Open(p, mode|unix.O_CLOEXEC, 0)
	if err == nil {
		unix.Close(fd)
	}
	return err
}

// pid1 attacks the sandbox's own init, then, as controls, opens its own
// memory and ptraces a child of its own.
func pid1([]string) (string, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	out := map[string]string{}
	out["kill"] = outcome("", unix.Kill(1, unix.SIGKILL))
	// Had the init died, the whole PID namespace would be gone by now and
	// this process with it: the host would see no result line.
	time.Sleep(300 * time.Millisecond)
	err := unix.PtraceAttach(1)
	if err == nil {
		_ = unix.PtraceDetach(1)
	}
	out["ptrace"] = outcome("", err)
	// /proc/PID/mem needs ptrace access whatever the open mode; Landlock
	// also refuses the read-write open of any /proc file, so both modes
	// are tried, on the init and (as the control) on this process.
	out["mem_rw"] = outcome("", openMem("/proc/1/mem", unix.O_RDWR))
	out["mem_ro"] = outcome("", openMem("/proc/1/mem", unix.O_RDONLY))
	out["self_mem_rw"] = outcome("", openMem("/proc/self/mem", unix.O_RDWR))
	out["self_mem_ro"] = outcome("", openMem("/proc/self/mem", unix.O_RDONLY))
	// The child holds until its stdin closes: with /dev/null as stdin it
	// would exit at once, and a parent slow to attach (a loaded host)
	// would meet a zombie, which ptrace refuses with EPERM too.
	child := selfCmd("hold", "ids")
	stdin, err := child.StdinPipe()
	if err != nil {
		return "", err
	}
	if err := child.Start(); err != nil {
		return "", err
	}
	defer stdin.Close()
	err = unix.PtraceAttach(child.Process.Pid)
	if err == nil {
		var ws unix.WaitStatus
		_, _ = unix.Wait4(child.Process.Pid, &ws, unix.WALL, nil)
		_ = unix.PtraceDetach(child.Process.Pid)
	}
	out["ptrace_child"] = outcome("", err)
	_ = child.Process.Kill()
	_ = child.Wait()
	b, err := json.Marshal(out)
	return string(b), err
}

// connect dials "tcp:HOST:PORT" or "unix:@NAME" (abstract) or "unix:PATH".
func connect(spec string) (string, error) {
	network, addr, _ := strings.Cut(spec, ":")
	c, err := net.DialTimeout(network, addr, 3*time.Second)
	if err != nil {
		return "", err
	}
	// Say something; the connection is what counts, not the write.
	_, _ = c.Write([]byte("probe\n"))
	return "", c.Close()
}

// userns starts a child in a new user namespace; the child writes MARKER.
// A multithreaded Go process cannot unshare(CLONE_NEWUSER) (EINVAL), so
// the new namespace is made at clone time, as a launcher would.
func userns(a []string) (string, error) {
	cmd := selfCmd("mark", a[0])
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER}
	if err := cmd.Start(); err != nil {
		return "", err // an *os.PathError wrapping the clone errno
	}
	return "", cmd.Wait()
}

// kobj makes one kernel object that seccomp must refuse and leaves its
// descriptor open (run it under hold so the host can look for it).
func kobj(a []string) (string, error) {
	switch a[0] {
	case "io_uring":
		var params [120]byte // struct io_uring_params
		fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 4, uintptr(unsafe.Pointer(&params[0])), 0)
		return fdResult(fd, e)
	case "userfaultfd":
		// UFFD_USER_MODE_ONLY: what an unprivileged process may ask for.
		fd, _, e := unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|1, 0, 0)
		return fdResult(fd, e)
	case "perf":
		attr := unix.PerfEventAttr{
			Type:   unix.PERF_TYPE_SOFTWARE,
			Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
			Config: unix.PERF_COUNT_SW_TASK_CLOCK,
			Bits:   unix.PerfBitDisabled | unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv,
		}
		fd, err := unix.PerfEventOpen(&attr, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			return "", err
		}
		return strconv.Itoa(fd), nil
	case "bpf":
		// BPF_MAP_CREATE of a one-entry array map.
		attr := [5]uint32{2 /* BPF_MAP_TYPE_ARRAY */, 4, 4, 1, 0}
		fd, _, e := unix.Syscall(unix.SYS_BPF, 0, uintptr(unsafe.Pointer(&attr[0])), unsafe.Sizeof(attr))
		return fdResult(fd, e)
	case "keyctl":
		// A new named session keyring: a key charged to this uid.
		serial, err := unix.KeyctlJoinSessionKeyring(a[1])
		if err != nil {
			return "", err
		}
		return strconv.Itoa(serial), nil
	case "mount":
		// mount a tmpfs on DIR, then write DIR/after: if the mount was
		// refused the file lands in the host directory underneath.
		err := unix.Mount("tmpfs", a[1], "tmpfs", 0, "size=64k")
		if werr := os.WriteFile(filepath.Join(a[1], "after"), []byte("probe"), 0o644); err == nil && werr != nil {
			return "", fmt.Errorf("mounted, then write: %w", werr)
		}
		return "", err
	}
	return "", fmt.Errorf("unknown kernel object %q", a[0])
}

func fdResult(fd uintptr, e syscall.Errno) (string, error) {
	if e != 0 {
		return "", e
	}
	return strconv.Itoa(int(fd)), nil
}

// tiocsti tries to push 'X' into the terminal's input queue: first tries
// to make the terminal on stdin its controlling terminal, then injects on
// stdin, stdout, stderr and /dev/tty.
func tiocsti([]string) (string, error) {
	out := map[string]string{}
	out["tiocsctty"] = outcome("", unix.IoctlSetInt(0, unix.TIOCSCTTY, 0))
	inject := func(fd int) error {
		c := byte('X')
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TIOCSTI, uintptr(unsafe.Pointer(&c))); e != 0 {
			return e
		}
		return nil
	}
	for fd := 0; fd <= 2; fd++ {
		out[fmt.Sprintf("fd%d", fd)] = outcome("", inject(fd))
	}
	tty, err := unix.Open("/dev/tty", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err == nil {
		err = inject(tty)
		unix.Close(tty)
	}
	out["dev_tty"] = outcome("", err)
	b, err := json.Marshal(out)
	return string(b), err
}

// ttymodes tries, on each of stdin, stdout and stderr that is a terminal,
// what leaves a terminal changed after the program ends: its termios
// (echo off, VKILL changed), exclusive mode (TIOCEXCL: nobody else may
// open it) and its line discipline (TIOCSETD N_NULL: every byte in or
// out is swallowed; set back to N_TTY at once so that the result can be
// printed). Each is reported per descriptor ("fd1.termios": "ok").
func ttymodes([]string) (string, error) {
	out := map[string]string{}
	for fd := 0; fd <= 2; fd++ {
		tio, err := unix.IoctlGetTermios(fd, unix.TCGETS)
		if err != nil {
			out[fmt.Sprintf("fd%d", fd)] = outcome("", err)
			continue
		}
		tio.Lflag &^= unix.ECHO
		tio.Cc[unix.VKILL] = 'K'
		out[fmt.Sprintf("fd%d.termios", fd)] = outcome("", unix.IoctlSetTermios(fd, unix.TCSETS, tio))
		out[fmt.Sprintf("fd%d.excl", fd)] = outcome("", unix.IoctlSetInt(fd, unix.TIOCEXCL, 0))
		const nNull = 27
		err = unix.IoctlSetPointerInt(fd, unix.TIOCSETD, nNull)
		if err == nil {
			_ = unix.IoctlSetPointerInt(fd, unix.TIOCSETD, 0)
		}
		out[fmt.Sprintf("fd%d.setd", fd)] = outcome("", err)
	}
	b, err := json.Marshal(out)
	return string(b), err
}
