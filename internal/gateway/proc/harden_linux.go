package proc

import (
	"fmt"

	"github.com/landlock-lsm/go-landlock/landlock"
	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/sandbox/linux/filter"
)

// The hardening of a broker process, in the order it runs. The process
// starts as the sandbox's gateway uid with no capabilities, in a fresh
// network namespace with nothing in it (the privileged side cloned it so).

// hardenEarly runs first, before the process reads its configuration
// (which carries its secrets): no_new_privs, so nothing it could exec
// gains privilege, and non-dumpable, so no process of the same uid — a
// compromised sibling broker process — can read its memory, environment
// or descriptors through /proc or ptrace it.
func hardenEarly() error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("dumpable: %w", err)
	}
	return nil
}

// hardenFS confines the process to a read-only Landlock domain: it writes
// nothing to any filesystem.
func hardenFS() error {
	if err := landlock.V5.BestEffort().RestrictPaths(landlock.RODirs("/")); err != nil {
		return fmt.Errorf("landlock: %w", err)
	}
	return nil
}

// hardenNet installs the broker filter: from here on the process can
// create no socket of any family. An empty network namespace does not
// isolate pathname Unix sockets (the system bus, cordon's daemon socket);
// this does. It runs before the process reads a byte of agent traffic or
// of an upstream; every connection it makes from here on is one the
// privileged side's checked dialer opened for it.
func hardenNet() error {
	p, err := filter.BuildBroker()
	if err != nil {
		return err
	}
	return filter.Install(p)
}
