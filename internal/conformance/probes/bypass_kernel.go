package probes

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/record"
)

// kernelObject is one kernel interface the sandbox must not reach, and
// how the host sees an object of it held by a process.
type kernelObject struct {
	id, kind, title string
	fd              string // what /proc/PID/fd/N points to ("": keyctl, counted in /proc/key-users)
	// skipControl: without seccomp (a test build) the sandbox itself
	// creates it; false when a missing capability refuses it anyway.
	skipControl bool
}

var kernelObjects = []kernelObject{
	{"bypass.kernel.io-uring", "io_uring", "io_uring_setup", "anon_inode:[io_uring]", true},
	{"bypass.kernel.userfaultfd", "userfaultfd", "userfaultfd", "anon_inode:[userfaultfd]", true},
	{"bypass.kernel.perf", "perf", "perf_event_open", "anon_inode:[perf_event]", true},
	{"bypass.kernel.bpf", "bpf", "bpf(BPF_MAP_CREATE)", "anon_inode:bpf-map", false},
	{"bypass.kernel.keyctl", "keyctl", "a new session keyring (keyctl)", "", true},
}

func init() {
	for _, k := range kernelObjects {
		conformance.Register(conformance.Probe{
			ID:     k.id,
			Class:  record.Bypass,
			Clause: "§2.2 every undeclared route is denied by a control outside the agent: kernel interfaces",
			Title:  k.title + " is refused: the host finds no such object held by the program",
			Run:    func(ctx context.Context, e *conformance.Env) conformance.Outcome { return kernelBypass(ctx, e, k) },
		})
	}
}

// holds says, from the host, whether pid holds an object of k: a
// descriptor pointing to it, or keys charged to its host uid.
func (k kernelObject) holds(pid int) (bool, string, error) {
	if k.fd == "" {
		uid, err := hostUID(pid)
		if err != nil {
			return false, "", err
		}
		n, err := keyUserCount(uid)
		return n > 0, fmt.Sprintf("%d keys charged to host uid %s", n, uid), err
	}
	n, err := countLinks(pid, k.fd)
	return n > 0, fmt.Sprintf("%d descriptors to %s", n, k.fd), err
}

func (k kernelObject) source(pid int) string {
	if k.fd == "" {
		return "/proc/key-users on the host, for the held program's host uid"
	}
	return fmt.Sprintf("/proc/%d/fd of the held program, read on the host", pid)
}

// kernelBypass: the program makes one object of k and holds it; the host
// looks for it. Control: in a test build, a sandbox without seccomp makes
// it and the host sees it; otherwise (and for bpf, which the missing
// capability refuses anyway) the same op held on the host makes it and
// the same reading sees it (keyctl: as an unused uid, so its keys are
// counted apart).
func kernelBypass(ctx context.Context, e *conformance.Env, k kernelObject) conformance.Outcome {
	op := []string{"hold", "kobj", k.kind, "cordon-conformance-" + randToken(4)}
	h, err := e.Start(ctx, conformance.RunOpts{Op: op})
	if err != nil {
		return broke(err)
	}
	_, prog, err := h.Pids()
	if err != nil {
		return broke(err)
	}
	held, got, err := k.holds(prog)
	if err != nil {
		return broke(err)
	}
	r, err := h.Finish(ctx)
	if err != nil {
		return broke(err)
	}
	facts := []record.Fact{fact(k.title+" held by the program", "none", got, !held, k.source(prog))}
	var cfact record.Fact
	if k.skipControl && hasSkipLayer(ctx, e) {
		c, err := e.Start(ctx, conformance.RunOpts{Flags: []string{"--test-skip-layer", "seccomp", "--level", "DOMAIN_ISOLATED"}, Op: op})
		if err != nil {
			return broke(err)
		}
		_, cprog, err := c.Pids()
		if err != nil {
			return broke(err)
		}
		cheld, cgot, err := k.holds(cprog)
		if err != nil {
			return broke(err)
		}
		if k.fd == "" {
			uid, _ := hostUID(cprog)
			defer waitKeysGone(uid)
		}
		if _, err := c.Finish(ctx); err != nil {
			return broke(err)
		}
		cfact = control("the same op in a sandbox without seccomp (test build)", "held", cgot, cheld, k.source(cprog))
	} else {
		var cred *syscall.Credential
		if k.fd == "" {
			cred = &syscall.Credential{Uid: wsOwnerUID + 1, Gid: wsOwnerUID + 1}
		}
		c, err := startHostHeld(ctx, e, cred, op[1:]...)
		if err != nil {
			return broke(err)
		}
		cheld, cgot, err := k.holds(c.Pid())
		if err != nil {
			return broke(err)
		}
		c.stop()
		if k.fd == "" {
			waitKeysGone(fmt.Sprint(wsOwnerUID + 1))
		}
		cfact = control("the same op held on the host", "held", cgot, cheld, strings.Replace(k.source(c.Pid()), "the held program", "the host process", 1))
	}
	return conformance.Outcome{Hint: r.Hint(), Facts: append(facts, cfact)}
}

// waitKeysGone waits (up to 10 s) for the kernel's key collector to free
// the keys of uid, so that no later probe counts them.
func waitKeysGone(uid string) {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if n, err := keyUserCount(uid); err != nil || n == 0 {
			return
		}
	}
}
