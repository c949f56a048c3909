// Command probe runs inside a sandbox in the e2e tests. Each subcommand
// attempts one thing and prints one JSON line: what it tried, whether the
// call succeeded, and the errno. The tests never take this as the verdict
// on an escape: they observe the effect (or its absence) from outside.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
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

func main() {
	if len(os.Args) < 2 {
		names := make([]string, 0, len(ops))
		for n := range ops {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintf(os.Stderr, "usage: probe OP [ARGS...]\nops: %v\n", names)
		os.Exit(2)
	}
	f, ok := ops[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "probe: unknown op %q\n", os.Args[1])
		os.Exit(2)
	}
	data, err := f(os.Args[2:])
	r := Result{Op: os.Args[1], OK: err == nil, Data: data}
	if err != nil {
		r.Err, r.Errno = err.Error(), errnoName(err)
	}
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
}
