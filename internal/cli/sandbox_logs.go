package cli

import (
	"io"
	"os"
	"time"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/hostmgr"
	"github.com/cordon-project/cordon/internal/textsafe"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

func sbLogsCmd(g *globals, sf *sandboxFlags) *cobra.Command {
	var follow, raw bool
	var tail int
	var since string
	cmd := &cobra.Command{
		Use:   "logs NAME [--follow] [--tail N] [--since DURATION|TIME] [--raw]",
		Short: "Print the output of a sandbox's main program",
		Long: `Print what the sandbox's main program wrote to its stdout and stderr.

That output is the program's: on a terminal it is shown through cordon's
escaper (newlines and tabs kept; escape sequences, other control characters,
bidi overrides and invalid UTF-8 shown as \u / \x escapes), so a program
cannot move the cursor, rewrite lines or set the title of the operator's
terminal. When stdout is not a terminal (a pipe, a file) the bytes are
written exactly as the program wrote them, like docker logs; --raw writes
them exactly to a terminal too.

--since prints only what was written since a time: a duration back from
now (10m, 1h30m) or an RFC 3339 time (2026-12-01T22:00:00Z). The log holds
no times itself (it is the program's raw bytes); the daemon keeps a small
time index beside it, sampling the log's size every quarter second while
the program runs, so --since may start up to that much earlier — never
later — and may start inside a line. With --tail, the later start wins.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t0, err := parseSince("sandbox logs", since, time.Now())
			if err != nil {
				return err
			}
			c, err := sf.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			out, flush := logsWriter(g.stdout, raw, isTerminal(g.stdout))
			defer flush()
			var off int64
			first := hostmgr.LogsArgs{Name: args[0]}
			switch {
			case tail == 0:
				first.Offset = -1 // the end: nothing of what is there
			case tail > 0:
				first.Tail = tail
			}
			if tail != 0 {
				first.Since = t0
			}
			for {
				var ch hostmgr.LogsChunk
				a := hostmgr.LogsArgs{Name: args[0], Offset: off}
				if first.Name != "" {
					a, first = first, hostmgr.LogsArgs{}
				}
				if err := c.Do(cmd.Context(), "logs", a, nil, &ch); err != nil {
					return err
				}
				out.Write(ch.Data)
				off = ch.Next
				if len(ch.Data) > 0 {
					continue
				}
				if !follow || ch.Done {
					return nil
				}
				select {
				case <-cmd.Context().Done():
					return nil
				case <-time.After(300 * time.Millisecond):
				}
			}
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing as the program writes, until it exits or the sandbox stops")
	cmd.Flags().IntVar(&tail, "tail", -1, "print only the last N lines first (0: none; with --follow, then what follows)")
	cmd.Flags().StringVar(&since, "since", "", "print only what was written since then: a duration back from now (10m) or an RFC 3339 time")
	cmd.Flags().BoolVar(&raw, "raw", false, "write the program's bytes exactly, also to a terminal (escape sequences act on it)")
	return cmd
}

// logsWriter is where a program's output goes: escaped by textsafe when
// written to a terminal (unless raw), exactly as written otherwise.
func logsWriter(w io.Writer, raw, tty bool) (io.Writer, func()) {
	if raw || !tty {
		return w, func() {}
	}
	tw := textsafe.NewWriter(w)
	return tw, func() { _ = tw.Flush() }
}

// isTerminal reports whether w is a terminal (a tty answers TCGETS).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// parseSince reads --since for command op (receipts, sandbox logs): ""
// (no limit), a duration back from now (10m, 1h30m; positive), or an
// RFC 3339 time.
func parseSince(op, s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, failure.Failf(failure.KindUsage, op, "--since %q: a duration back from now must be positive (10m, 1h30m)", s)
		}
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	return time.Time{}, failure.Failf(failure.KindUsage, op, "--since %q: want a duration back from now (10m, 1h30m) or an RFC 3339 time (2026-12-01T22:00:00Z)", textsafe.Line(s))
}
