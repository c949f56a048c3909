package cli

import (
	"fmt"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/hostmgr"
	"github.com/cordon-project/cordon/internal/textsafe"
	"github.com/spf13/cobra"
)

func sbLsCmd(g *globals, sf *sandboxFlags) *cobra.Command {
	var quiet bool
	cmd := &cobra.Command{
		Use:   "ls [-q]",
		Short: "List sandboxes (yours; every one for root)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if quiet && sf.json {
				return failure.Failf(failure.KindUsage, "ls", "give -q or --json, not both")
			}
			var is []hostmgr.Info
			if err := sf.do(cmd.Context(), "ls", struct{}{}, nil, &is); err != nil {
				return err
			}
			if quiet {
				for _, i := range is {
					fmt.Fprintln(g.stdout, textsafe.Line(i.Name))
				}
				return nil
			}
			return g.print(sf, is, func() { printInfo(g, is) })
		},
	}
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only the names, one a line")
	return cmd
}
