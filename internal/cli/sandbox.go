package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/hostmgr"
	"github.com/cordon-project/cordon/internal/hostmgr/proto"
	"github.com/cordon-project/cordon/internal/textsafe"
	"github.com/spf13/cobra"
)

type sandboxFlags struct {
	socket string
	json   bool
}

func sandboxCmd(g *globals) *cobra.Command {
	sf := &sandboxFlags{}
	cmd := &cobra.Command{
		Use:   "sandbox",
		Short: "Long-lived sandboxes owned by the daemon: create, start, exec, stop, rm, ls, logs",
		Long: `Manage sandboxes owned by 'cordon daemon' (which must be running). They
outlive this command: create provisions one, start builds and admits its
boundary (and runs its main program, if it has one), exec runs more programs
in it under the same boundary and gateway identity, stop ends it for good,
rm removes its record and logs.

Per operation:
  create   mints a new identity (sandbox id, lease); a taken name is refused.
  start    idempotent: starting a running sandbox reports it; a stopped one
           never starts again (create a new one).
  exec     each call is a new process; not retried.
  stop     idempotent; final: the state is persisted, a daemon restart does
           not resume stopped work. --all is the emergency stop (root).
  rm       idempotent: removing an absent sandbox succeeds.
  ls, logs, status: read only.`,
		Example: `  cordon sandbox create dev --workspace "$PWD" --config cordon.yaml
  cordon sandbox start dev
  cordon sandbox exec dev -- make test
  cordon sandbox logs dev --follow
  cordon sandbox stop dev && cordon sandbox rm dev
  cordon sandbox stop --all`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&sf.socket, "socket", defaultSocket(), "the daemon's socket (env CORDON_SOCKET)")
	pf.BoolVar(&sf.json, "json", false, "machine-readable output")
	cmd.AddCommand(sbCreateCmd(g, sf), sbNameCmd(g, sf, "start", "Start a created sandbox: build, evidence and admit its boundary; run its main program"),
		sbExecCmd(g, sf), sbStopCmd(g, sf), sbNameCmd(g, sf, "rm", "Remove a sandbox (stopping it first): its record and logs"),
		sbLsCmd(g, sf), sbLogsCmd(g, sf), sbNameCmd(g, sf, "readmit", "Re-admit a draining sandbox with the current runtime, policy and rootfs identities"),
		sbStatusCmd(g, sf), sbProfileCmd(g, sf))
	return cmd
}

// stopCmd is the top-level `cordon stop NAME | --all`.
func stopCmd(g *globals) *cobra.Command {
	sf := &sandboxFlags{}
	c := sbStopCmd(g, sf)
	c.Flags().StringVar(&sf.socket, "socket", defaultSocket(), "the daemon's socket (env CORDON_SOCKET)")
	c.Flags().BoolVar(&sf.json, "json", false, "machine-readable output")
	return c
}

// dial connects to the daemon, with an error that says what to do.
func (sf *sandboxFlags) dial() (*proto.Client, error) {
	c, err := proto.Dial(sf.socket)
	if err != nil {
		return nil, failure.Failf(failure.KindUnsupported, "daemon", "no cordon daemon answers on %s (%v); start one with 'cordon daemon', or use 'cordon run' for a one-off sandbox", sf.socket, err)
	}
	return c, nil
}

// do makes one call on a fresh connection to the daemon.
func (sf *sandboxFlags) do(ctx context.Context, op string, args any, files []*os.File, out any) error {
	c, err := sf.dial()
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Do(ctx, op, args, files, out)
}

func (g *globals) print(sf *sandboxFlags, v any, text func()) error {
	if sf.json {
		return writeJSON(g.stdout, v)
	}
	text()
	return nil
}

func sbNameCmd(g *globals, sf *sandboxFlags, op, short string) *cobra.Command {
	return &cobra.Command{
		Use:   op + " NAME",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var out json.RawMessage
			if err := sf.do(cmd.Context(), op, hostmgr.NameArgs{Name: args[0]}, nil, &out); err != nil {
				return err
			}
			if sf.json {
				// The daemon's JSON as is, with invisible characters
				// in its strings written as \u escapes (same value).
				_, err := io.WriteString(g.stdout, textsafe.JSON(out)+"\n")
				return err
			}
			var i hostmgr.Info
			if json.Unmarshal(out, &i) == nil && i.Name != "" {
				printInfo(g, []hostmgr.Info{i})
			} else {
				fmt.Fprintf(g.stdout, "%s: %s\n", op, textsafe.Line(args[0]))
			}
			return nil
		},
	}
}

func printInfo(g *globals, is []hostmgr.Info) {
	now, owners := time.Now(), ownerNames{}
	tw := tabwriter.NewWriter(g.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tID\tOWNER\tSTATE\tAGE\tPROFILE\tLEVEL\tDRAIN\tMAIN\tNOTE")
	for _, i := range is {
		r := lsRow(i, owners, now).escaped()
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.ID, r.Owner, r.State, r.Age, r.Profile, r.Level, r.Drain, r.Main, r.Note)
	}
	tw.Flush()
	for _, i := range is {
		if len(i.Bypassed) > 0 {
			fmt.Fprintf(g.stdout, "%s runs FULL_CONTROL_LAB; bypassed controls:\n", textsafe.Line(i.Name))
			for _, b := range i.Bypassed {
				fmt.Fprintf(g.stdout, "  - %s\n", textsafe.Line(b))
			}
		}
	}
}

// age is how long ago created was, in its largest whole unit (45s, 12m,
// 3h, 9d); "-" when it is unknown (the zero time).
func age(created, now time.Time) string {
	if created.IsZero() {
		return "-"
	}
	d := max(now.Sub(created), 0)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	default:
		return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
	}
}

func sbProfileCmd(g *globals, sf *sandboxFlags) *cobra.Command {
	var accept string
	cmd := &cobra.Command{
		Use:   "profile NAME SAFE_GUIDED|FULL_CONTROL_LAB [--accept PHRASE]",
		Short: "Switch a sandbox's profile (FULL_CONTROL_LAB needs the exact risk acceptance)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var i hostmgr.Info
			if err := sf.do(cmd.Context(), "profile", hostmgr.ProfileArgs{Name: args[0], Profile: args[1], Accept: accept}, nil, &i); err != nil {
				return err
			}
			return g.print(sf, i, func() { printInfo(g, []hostmgr.Info{i}) })
		},
	}
	cmd.Flags().StringVar(&accept, "accept", "", "the exact risk-acceptance phrase")
	return cmd
}
