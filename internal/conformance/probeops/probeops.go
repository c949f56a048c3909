package probeops

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"syscall"
)

// Result is the probe's report.
type Result struct {
	Op    string `json:"op"`
	OK    bool   `json:"ok"`
	Errno string `json:"errno,omitempty"`
	Err   string `json:"err,omitempty"`
	Data  string `json:"data,omitempty"`
}

// ops maps a subcommand to its attempt; files in this package register more.
var ops = map[string]func(args []string) (string, error){}

// Self is the argv prefix that runs this program's ops again (a child of
// an op re-executes /proc/self/exe with it): empty for the probe program,
// "__probe" for cordon.
var Self []string

// selfCmd is a command running op with args in a new copy of this program.
func selfCmd(op string, args ...string) *exec.Cmd {
	return exec.Command("/proc/self/exe", append(append(append([]string{}, Self...), op), args...)...)
}

// Register adds an op; a duplicate name panics.
func Register(name string, f func(args []string) (string, error)) { register(name, f) }

func register(name string, f func(args []string) (string, error)) {
	if _, dup := ops[name]; dup {
		panic("duplicate probe op " + name)
	}
	ops[name] = f
}

func errnoName(err error) string {
	var e syscall.Errno
	if errors.As(err, &e) {
		if n, ok := errnoNames[e]; ok {
			return n
		}
		return fmt.Sprintf("errno%d", int(e))
	}
	return ""
}

var errnoNames = map[syscall.Errno]string{
	syscall.EPERM: "EPERM", syscall.EACCES: "EACCES", syscall.ENOENT: "ENOENT", syscall.EROFS: "EROFS",
	syscall.ENOSYS: "ENOSYS", syscall.ESRCH: "ESRCH", syscall.ENOSPC: "ENOSPC", syscall.EINVAL: "EINVAL",
	syscall.ECONNREFUSED: "ECONNREFUSED", syscall.ENETUNREACH: "ENETUNREACH", syscall.EAGAIN: "EAGAIN",
	syscall.EEXIST: "EEXIST", syscall.EIO: "EIO", syscall.EXDEV: "EXDEV", syscall.ENOTDIR: "ENOTDIR",
	syscall.EBADF: "EBADF", syscall.EFAULT: "EFAULT", syscall.ENOMEM: "ENOMEM", syscall.EBUSY: "EBUSY",
	syscall.ENODEV: "ENODEV", syscall.EOPNOTSUPP: "EOPNOTSUPP", syscall.EHOSTUNREACH: "EHOSTUNREACH",
	syscall.EADDRNOTAVAIL: "EADDRNOTAVAIL", syscall.EMFILE: "EMFILE",
}

// Names lists the ops, sorted.
func Names() []string {
	names := make([]string, 0, len(ops))
	for n := range ops {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Run runs one op and returns its report; ok is false for an unknown op.
func Run(op string, args []string) (r Result, ok bool) {
	f, ok := ops[op]
	if !ok {
		return Result{}, false
	}
	data, err := f(args)
	r = Result{Op: op, OK: err == nil, Data: data}
	if err != nil {
		r.Err, r.Errno = err.Error(), errnoName(err)
	}
	return r, true
}

// Main runs the op args[0] with args[1:], prints its report on stdout and
// returns the exit status: 0 whatever the op's outcome, 2 for a usage
// error.
func Main(args []string) int {
	if len(args) < 1 {
		fmt.Fprintf(os.Stderr, "usage: probe OP [ARGS...]\nops: %v\n", Names())
		return 2
	}
	r, ok := Run(args[0], args[1:])
	if !ok {
		fmt.Fprintf(os.Stderr, "probe: unknown op %q\n", args[0])
		return 2
	}
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
	return 0
}
