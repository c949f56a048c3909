package store

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"sync"
	"syscall"
)

const bootIDPath = "/proc/sys/kernel/random/boot_id"

// bootID is read once: it cannot change while this process lives.
var bootID = sync.OnceValues(func() (string, error) {
	b, err := os.ReadFile(bootIDPath)
	if err != nil {
		return "", fmt.Errorf("read boot id: %w", err)
	}
	id := string(bytes.TrimSpace(b))
	if id == "" {
		return "", fmt.Errorf("read boot id: %s is empty", bootIDPath)
	}
	return id, nil
})

// Self returns the Owner that identifies the calling process. Its PID is the
// one /proc shows, which is what Alive looks up.
func Self() (Owner, error) {
	boot, err := bootID()
	if err != nil {
		return Owner{}, err
	}
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return Owner{}, fmt.Errorf("read /proc/self/stat: %w", err)
	}
	pid, start, err := parseStat(b)
	if err != nil {
		return Owner{}, fmt.Errorf("parse /proc/self/stat: %w", err)
	}
	return Owner{PID: pid, StartTime: start, BootID: boot}, nil
}

// Alive reports whether o's process still runs: true iff the boot id is the
// current one, /proc/PID exists, and its start time equals o.StartTime.
//
// It returns false only when the owner is provably gone: another boot, no
// such pid, or a pid since reused by a process started at another time. When
// it cannot tell (boot id or stat unreadable, or /proc hiding the pid from us
// while the kernel says it exists), it returns true, because reclaiming a
// live owner's lease would let two sandboxes share host ids. A zombie that
// has not been reaped is gone: it runs no code and holds no descriptor or
// lock (a thread-group leader that exited while its other threads run is
// not one: those threads are still listed under /proc/PID/task).
func Alive(o Owner) bool {
	if o.PID <= 0 {
		return false
	}
	boot, err := bootID()
	if err != nil {
		return true
	}
	if o.BootID != boot {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(o.PID) + "/stat")
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		// Gone, unless /proc is mounted with hidepid and hides it from us:
		// kill(pid, 0) answers ESRCH only for a pid that does not exist.
		return !errors.Is(syscall.Kill(o.PID, 0), syscall.ESRCH)
	}
	if err != nil {
		return true
	}
	pid, start, err := parseStat(b)
	if err != nil || pid != o.PID {
		return true
	}
	return start == o.StartTime && !exited(b, o.PID)
}

// exited reports whether the process of stat b is a zombie with no
// thread left running.
func exited(b []byte, pid int) bool {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) || (b[i+2] != 'Z' && b[i+2] != 'X') {
		return false
	}
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	return err == nil && len(tasks) <= 1
}

// parseStat returns the pid (field 1) and start time (field 22) from the
// contents of /proc/PID/stat. Field 2, the command name, is chosen by the
// process and may hold spaces and parentheses, so the remaining fields are
// counted from the last ')'.
func parseStat(b []byte) (pid int, start uint64, err error) {
	open := bytes.IndexByte(b, '(')
	closing := bytes.LastIndexByte(b, ')')
	if open < 1 || closing < open {
		return 0, 0, errors.New("no (comm) field")
	}
	pid, err = strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil || pid <= 0 {
		return 0, 0, fmt.Errorf("bad pid field %q", b[:open])
	}
	// After ") " come field 3 (state) onwards; start time is field 22.
	rest := bytes.Fields(b[closing+1:])
	const startField = 22 - 3
	if len(rest) <= startField {
		return 0, 0, fmt.Errorf("%d fields after comm, want more than %d", len(rest), startField)
	}
	start, err = strconv.ParseUint(string(rest[startField]), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("bad start time field %q", rest[startField])
	}
	return pid, start, nil
}
