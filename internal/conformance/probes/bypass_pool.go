package probes

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/record"
	"golang.org/x/sys/unix"
)

func init() {
	conformance.Register(conformance.Probe{
		ID:          "bypass.pool.inotify",
		Class:       record.Bypass,
		Clause:      "§2.2 every undeclared route is denied by a control outside the agent: host-global pools (inotify instances)",
		Title:       "a program taking every inotify instance it can stops at its own namespace's limit, charged to its lease; host root still gets instances",
		Destructive: true,
		Run:         poolInotify,
	})
	conformance.Register(conformance.Probe{
		ID:          "bypass.pool.aio",
		Class:       record.Bypass,
		Clause:      "§2.2 every undeclared route is denied by a control outside the agent: host-global pools (fs.aio-max-nr)",
		Title:       "io_setup is refused in the sandbox: the host finds no AIO ring mapped by the program",
		Destructive: true,
		Run:         poolAIO,
	})
	conformance.Register(conformance.Probe{
		ID:          "bypass.pool.pty",
		Class:       record.Bypass,
		Clause:      "§2.2 every undeclared route is denied by a control outside the agent: host-global pools (kernel.pty.max)",
		Title:       "a program opening every pty it can stops at its private devpts limit; host root still opens a pty",
		Destructive: true,
		Run:         poolPty,
	})
}

// nsOwner is the host uid owning pid's user namespace (NS_GET_OWNER_UID).
func nsOwner(pid int) (int, error) {
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	var uid uint32
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), 0xb704, uintptr(unsafe.Pointer(&uid))); e != 0 {
		return 0, e
	}
	return int(uid), nil
}

func readSysInt(p string) (int, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// poolInotify: the program, held, creates inotify instances until
// refused. The host counts its inotify descriptors (below the host's
// per-user limit: the bound it met is its namespace's) and reads the owner
// of its user namespace (its lease, not root, so the host-level charge is
// the lease's). Control: host root creates instances meanwhile.
func poolInotify(ctx context.Context, e *conformance.Env) conformance.Outcome {
	hostMax, err := readSysInt("/proc/sys/user/max_inotify_instances")
	if err != nil {
		return broke(err)
	}
	h, err := e.Start(ctx, conformance.RunOpts{Op: []string{"hold", "inotify", strconv.Itoa(hostMax + 16)}})
	if err != nil {
		return broke(err)
	}
	initPid, prog, err := h.Pids()
	if err != nil {
		return broke(err)
	}
	n, err := countLinks(prog, "anon_inode:inotify")
	if err != nil {
		return broke(err)
	}
	owner, err := nsOwner(initPid)
	if err != nil {
		return broke(err)
	}
	var fds []int
	var herr error
	for range 8 {
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
		if err != nil {
			herr = err
			break
		}
		fds = append(fds, fd)
	}
	for _, fd := range fds {
		unix.Close(fd)
	}
	r, err := h.Finish(ctx)
	if err != nil {
		return broke(err)
	}
	hostGot := fmt.Sprintf("%d of 8", len(fds))
	if herr != nil {
		hostGot += ": " + herr.Error()
	}
	return conformance.Outcome{Hint: r.Hint(), Facts: []record.Fact{
		fact("inotify instances the program holds", fmt.Sprintf("some, below the host's per-user %d", hostMax), strconv.Itoa(n), n > 0 && n < hostMax, fmt.Sprintf("/proc/%d/fd on the host", prog)),
		fact("owner of the sandbox's user namespace (who the kernel charges)", "its lease, not root", strconv.Itoa(owner), owner != 0, fmt.Sprintf("NS_GET_OWNER_UID of /proc/%d/ns/user on the host", initPid)),
		control("inotify instances host root creates meanwhile", "8 of 8", hostGot, len(fds) == 8, "inotify_init1 by the runner"),
	}}
}

// aioRings counts the AIO rings mapped by pid (/proc/PID/maps "[aio]").
func aioRings(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return 0, err
	}
	return strings.Count(string(b), "[aio]"), nil
}

// poolAIO: the program, held, asks io_setup for 4096 events; the host
// reads its memory map: no AIO ring. Control: the same op held on the
// host maps a ring, seen by the same reading.
func poolAIO(ctx context.Context, e *conformance.Env) conformance.Outcome {
	h, err := e.Start(ctx, conformance.RunOpts{Op: []string{"hold", "aio", "4096"}})
	if err != nil {
		return broke(err)
	}
	_, prog, err := h.Pids()
	if err != nil {
		return broke(err)
	}
	n, err := aioRings(prog)
	if err != nil {
		return broke(err)
	}
	r, err := h.Finish(ctx)
	if err != nil {
		return broke(err)
	}
	c, err := startHostHeld(ctx, e, nil, "aio", "64")
	if err != nil {
		return broke(err)
	}
	cn, err := aioRings(c.Pid())
	if err != nil {
		return broke(err)
	}
	c.stop()
	return conformance.Outcome{Hint: r.Hint(), Facts: []record.Fact{
		fact("AIO rings mapped by the program", "0", strconv.Itoa(n), n == 0, fmt.Sprintf("/proc/%d/maps on the host", prog)),
		control("AIO rings mapped by the same op held on the host", "1", strconv.Itoa(cn), cn == 1, "/proc/PID/maps of the host process"),
	}}
}

// poolPty: the program, held, opens ptys until refused; the host counts
// its ptmx descriptors: some, at most the host's kernel.pty.max less what
// the host had. Control: host root opens a pty meanwhile.
func poolPty(ctx context.Context, e *conformance.Env) conformance.Outcome {
	max, err := readSysInt("/proc/sys/kernel/pty/max")
	if err != nil {
		return broke(err)
	}
	ask := 1024
	h, err := e.Start(ctx, conformance.RunOpts{Op: []string{"hold", "ptys", strconv.Itoa(ask)}})
	if err != nil {
		return broke(err)
	}
	_, prog, err := h.Pids()
	if err != nil {
		return broke(err)
	}
	n, err := countLinks(prog, "ptmx")
	if err != nil {
		return broke(err)
	}
	f, herr := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if herr == nil {
		f.Close()
	}
	r, err := h.Finish(ctx)
	if err != nil {
		return broke(err)
	}
	hostGot := "ok"
	if herr != nil {
		hostGot = herr.Error()
	}
	return conformance.Outcome{Hint: r.Hint(), Facts: []record.Fact{
		fact("ptys the program holds after asking for "+strconv.Itoa(ask), fmt.Sprintf("some, fewer than asked (its devpts limit; host kernel.pty.max %d)", max), strconv.Itoa(n), n > 0 && n < ask, fmt.Sprintf("/proc/%d/fd on the host", prog)),
		control("a pty host root opens meanwhile", "ok", hostGot, herr == nil, "open(/dev/ptmx) by the runner"),
	}}
}
