package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cordon-project/cordon/internal/hostmgr"
	"github.com/cordon-project/cordon/internal/hostmgr/proto"
	"github.com/cordon-project/cordon/internal/textsafe"
)

// Exit statuses of 'cordon daemon status', as an LSB init script's
// status action: 0 healthy, 1 the daemon answers but reports a problem,
// 3 no daemon answers on the socket (or the caller may not connect), 4
// the answer could not be had or read (refused, timed out, another
// protocol).
const (
	statusHealthy     = 0
	statusUnhealthy   = 1
	statusUnreachable = 3
	statusUnknown     = 4
)

// statusTimeout bounds the whole health call: a wedged daemon is
// reported, not waited for.
const statusTimeout = 10 * time.Second

func daemonStatusCmd(g *globals) *cobra.Command {
	var socket string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Ask the running daemon for its health",
		Long: `Ask the daemon on --socket for its health (the cordon-host/v1 "health"
operation): version, pid, start time and uptime, whether its store reads,
the host policy set in force (and whether a reload was refused), its
sandboxes by state and when the drift scan last ran.

Root sees every sandbox on the host; another user (a member of the
daemon's --group) sees counts of their own sandboxes only.

Exit status: 0 healthy; 1 the daemon answers but is unhealthy (the
problems are listed); 3 no daemon answers on the socket (none runs, or
you may not connect to it); 4 the daemon refused the question or its
answer could not be read.`,
		Example: `  cordon daemon status
  cordon daemon status --json
  cordon daemon status --socket /run/cordon/cordon.sock`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.daemonStatus(cmd.Context(), socket, asJSON)
		},
	}
	cmd.Flags().StringVar(&socket, "socket", defaultSocket(), "the daemon's socket (env CORDON_SOCKET)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the health report as one JSON object")
	return cmd
}

func (g *globals) daemonStatus(ctx context.Context, socket string, asJSON bool) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	c, err := proto.Dial(socket)
	if err != nil {
		fmt.Fprintf(g.stderr, "cordon: daemon: unreachable: %s\n", textsafe.Line(err.Error()))
		return &exitError{statusUnreachable}
	}
	defer c.Close()
	var h hostmgr.Health
	if err := c.Do(ctx, "health", nil, nil, &h); err != nil {
		fmt.Fprintf(g.stderr, "cordon: daemon: health: %s\n", describe(err))
		return &exitError{statusUnknown}
	}
	if asJSON {
		if err := writeJSON(g.stdout, h); err != nil {
			return err
		}
	} else {
		printHealth(g.stdout, h, time.Now())
	}
	if !h.Healthy {
		return &exitError{statusUnhealthy}
	}
	return nil
}

// printHealth writes the report for a person. The daemon's strings pass
// through textsafe.Line (a refused policy's error quotes a file).
func printHealth(w io.Writer, h hostmgr.Health, now time.Time) {
	state := "healthy"
	if !h.Healthy {
		state = "UNHEALTHY"
	}
	fmt.Fprintf(w, "cordon daemon: %s\n", state)
	row := func(k, f string, a ...any) { fmt.Fprintf(w, "  %-10s %s\n", k, textsafe.Line(fmt.Sprintf(f, a...))) }
	row("version", "%s (%s), pid %d", h.Version, h.Protocol, h.PID)
	row("started", "%s (up %s)", h.Started.Format(time.RFC3339), (time.Duration(h.Uptime) * time.Second).Round(time.Second))
	if h.Store.OK {
		row("store", "ok")
	} else {
		row("store", "FAILING: %s", h.Store.Error)
	}
	files := fmt.Sprintf("%d host policy files", h.Policy.Files)
	if h.Policy.Dir != "" {
		files += " in " + h.Policy.Dir
	}
	row("policy", "%s (%s)", shortDigest(h.Policy.Digest), files)
	if h.Policy.Refused {
		msg := "the last reload was refused; the set above stays in force"
		if h.Policy.RefusedError != "" {
			msg += ": " + h.Policy.RefusedError
		}
		row("", "%s", msg)
	}
	whose := "on this host"
	if h.Scope != "all" {
		whose = "yours"
	}
	row("sandboxes", "%s (%s)", countStates(h.Sandboxes), whose)
	if h.Draining > 0 {
		row("draining", "%d (cordon sandbox readmit NAME)", h.Draining)
	}
	drift := fmt.Sprintf("every %s", time.Duration(h.Drift.Every*float64(time.Second)))
	if h.Drift.LastRun != nil {
		drift += fmt.Sprintf(", last run %s ago", now.Sub(*h.Drift.LastRun).Round(time.Second))
	} else {
		drift += ", not run yet"
	}
	if h.Drift.Stale {
		drift += " (STALE)"
	}
	row("drift", "%s", drift)
	for _, p := range h.Problems {
		row("problem", "%s", p)
	}
}

func countStates(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func shortDigest(d string) string {
	if len(d) > 19 {
		return d[:19] + "…"
	}
	return d
}
