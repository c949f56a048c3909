package linux

import (
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/sandbox"
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
// command is built so that no escaping, here or when the error is printed,
// can change how a shell splits it (removeCommand).
func socketRefusal(op, dir, sock string) error {
	p := path.Join(dir, strings.TrimPrefix(sock, "./"))
	return sandbox.Failf(sandbox.KindPolicyRejected, op,
		"%s holds a Unix socket, %s; a directory holding a socket is never bound (it would be a way to whatever listens on it). A program run there earlier may have left it (cordon run reports these after each run): remove it and run again: %s",
		textsafe.Line(dir), textsafe.Line(p), removeCommand(dir, p))
}

// removeCommand is a shell command that removes the socket at p (under
// dir). A name that shows as itself is single-quoted, a quote in it
// written as '"'"' — no backslash, so textsafe (which escapes backslashes
// and invisible characters, never a quote) cannot move a quote boundary.
// A name that does not show as itself (control characters, invalid UTF-8,
// a backslash) cannot be copied from a screen: the command finds the
// sockets under dir instead of naming it.
func removeCommand(dir, p string) string {
	if textsafe.Line(p) == p {
		return "rm -- " + shellQuote(p)
	}
	return "find " + shellQuote(dir) + " -xdev -type s -print -delete"
}

// shellQuote quotes s for a POSIX shell without a backslash.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'"
}
