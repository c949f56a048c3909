package cli

import (
	"fmt"
	"time"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/hostmgr"
	"github.com/cordon-project/cordon/internal/textsafe"
	"github.com/spf13/cobra"
)

func sbStopCmd(g *globals, sf *sandboxFlags) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "stop NAME | --all",
		Short: "Stop a sandbox for good (kill its processes, close its gateway, revoke its approvals); --all: every sandbox",
		Args: func(cmd *cobra.Command, args []string) error {
			if all != (len(args) == 0) || len(args) > 1 {
				return failure.Failf(failure.KindUsage, "stop", "give one sandbox name, or --all")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if all {
				var r hostmgr.StopAllResult
				if err := sf.do(cmd.Context(), "stop_all", struct{}{}, nil, &r); err != nil {
					return err
				}
				if err := g.print(sf, r, func() {
					fmt.Fprintf(g.stdout, "stopped %d sandboxes in %s\n", len(r.Stopped), r.Duration.Round(time.Millisecond))
					for _, f := range r.Failed {
						fmt.Fprintf(g.stdout, "failed: %s\n", textsafe.Line(f))
					}
				}); err != nil {
					return err
				}
				if len(r.Failed) > 0 {
					return &exitError{code: failure.ExitRefused}
				}
				return nil
			}
			var i hostmgr.Info
			if err := sf.do(cmd.Context(), "stop", hostmgr.NameArgs{Name: args[0]}, nil, &i); err != nil {
				return err
			}
			return g.print(sf, i, func() { printInfo(g, []hostmgr.Info{i}); printTraps(g.stderr, i.WorkspaceTraps) })
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "emergency stop: every sandbox of the daemon (root)")
	return cmd
}
