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
// sock (relative, from findSocketFD): it says which path and what to do.
// The name may be a program's choice: it goes through textsafe.
func socketRefusal(op, dir, sock string) error {
	p := path.Join(dir, strings.TrimPrefix(sock, "./"))
	return sandbox.Failf(sandbox.KindPolicyRejected, op,
		"%s holds a Unix socket, %s; a directory holding a socket is never bound (it would be a way to whatever listens on it). A program run there earlier may have left it (cordon run reports these after each run): remove it (rm -- %s) and run again",
		textsafe.Line(dir), textsafe.Line(p), textsafe.Line(shellQuote(p)))
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
