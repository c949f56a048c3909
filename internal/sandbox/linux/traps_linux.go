package linux

import (
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/textsafe"
	"github.com/cordon-project/cordon/internal/trapscan"
)

// ScanTraps reports, for each writable bind that is a directory (the
// workspace first), what the program left there that can trap a host user
// (trapscan): it walks the very tree that was bound, by its descriptor.
// Call it after the program has ended (the sandbox's PID namespace is
// empty once Wait returns) and before Deprovision, which closes the
// descriptors.
func (sb *linuxSandbox) ScanTraps() []trapscan.Report {
	var out []trapscan.Report
	for _, h := range sb.binds {
		if h == nil || !h.writable || h.fd < 0 || h.st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		r := trapscan.Scan(h.fd, h.path, trapscan.DefaultLimits)
		r.Sandbox = h.target
		if h.target == "/workspace" {
			out = append([]trapscan.Report{r}, out...)
		} else {
			out = append(out, r)
		}
	}
	return out
}

// socketRefusal is the error for a directory that holds a Unix socket at
// sock (relative, from findSocketFD): it says which path and what to do,
// ending with a command to remove it that a person may copy into a shell.
// The name is the program's choice: it goes through textsafe, and the
// command does not hold it (removeCommand).
func socketRefusal(op, dir, sock string) error {
	p := path.Join(dir, strings.TrimPrefix(sock, "./"))
	return failure.Failf(failure.KindPolicyRejected, op,
		"%s holds a Unix socket, %s; a directory holding a socket is never bound (it would be a way to whatever listens on it). A program run there earlier may have left it (cordon run reports these after each run): remove it, and any other socket there, and run again: %s",
		textsafe.Line(dir), textsafe.Line(p), removeCommand(dir))
}

// removeCommand is a shell command that removes every socket under dir:
// the directory is refused while any is there, so all must go. It never
// holds the socket's name (the program's choice, which could otherwise
// carry shell syntax, or name a path a sandbox still running could turn
// into a symlink to a host file before a person runs the command): find
// does not follow symlinks, stays on dir's filesystem and deletes sockets
// only. dir is the caller's, quoted without a backslash so that textsafe
// (which escapes backslashes, never quotes) cannot move a quote boundary.
func removeCommand(dir string) string {
	return "find " + shellQuote(dir) + " -xdev -type s -print -delete"
}

// shellQuote quotes s for a POSIX shell without a backslash.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'"
}
