package probeops

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strconv"
	"syscall"
)

// Resource ops: they push against a cgroup limit. The tests judge the
// outcome from outside (exit status, the OOM counter, the cgroup); what
// these print is only the program's own view.
func init() {
	register("alloc", allocOp)
	register("forkbomb", forkbombOp)
}

// allocOp allocates MB mebibytes and touches every page, so the memory is
// charged to the sandbox's cgroup rather than merely reserved.
func allocOp(a []string) (string, error) {
	if len(a) != 1 {
		return "", fmt.Errorf("usage: alloc MB")
	}
	mb, err := strconv.Atoi(a[0])
	if err != nil || mb <= 0 {
		return "", fmt.Errorf("alloc %q: want a positive number of MiB", a[0])
	}
	const chunk = 1 << 20
	var keep [][]byte
	for i := 0; i < mb; i++ {
		b := make([]byte, chunk)
		for j := 0; j < chunk; j += 4096 {
			b[j] = 1
		}
		keep = append(keep, b)
	}
	runtime.KeepAlive(keep)
	return fmt.Sprintf("touched %d MiB", mb), nil
}

// forkbombOp starts up to N children running "sleep 5" until fork fails,
// then reports how many it got and the errno of the failure (none when it
// reached N). It exits 0 either way, leaving the children running: the
// end of the PID namespace must take them.
//
// It runs on one locked thread with the garbage collector off, so that the
// Go runtime does not itself need a new thread (and die) once the pids
// limit is reached.
func forkbombOp(a []string) (string, error) {
	if len(a) != 1 {
		return "", fmt.Errorf("usage: forkbomb N")
	}
	n, err := strconv.Atoi(a[0])
	if err != nil || n <= 0 {
		return "", fmt.Errorf("forkbomb %q: want a positive count", a[0])
	}
	runtime.LockOSThread()
	runtime.GOMAXPROCS(1)
	debug.SetGCPercent(-1)
	argv := []string{"sleep", "5"}
	attr := &syscall.ProcAttr{Env: []string{}, Files: []uintptr{0, 1, 2}}
	got := 0
	for got < n {
		if _, err := syscall.ForkExec("/bin/sleep", argv, attr); err != nil {
			return fmt.Sprintf("children=%d", got), err
		}
		got++
	}
	return fmt.Sprintf("children=%d", got), nil
}
