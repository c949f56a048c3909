package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cordon-project/cordon/internal/hostmgr"
	"github.com/cordon-project/cordon/internal/textsafe"
	"github.com/spf13/cobra"
)

func volumeCmd(g *globals) *cobra.Command {
	sf := &sandboxFlags{}
	cmd := &cobra.Command{
		Use:   "volume",
		Short: "Named volumes managed by the daemon: create, ls, rm",
		Long: `A volume is a directory the daemon creates and manages; a sandbox names it
(cordon sandbox create --volume NAME:/data) and what it writes there
outlives the sandbox. A volume belongs to its creator; other users cannot
see or use it. rm refuses while a sandbox that is not stopped uses it, and
is idempotent.`,
		Example: `  cordon volume create cache
  cordon sandbox create job --volume cache:/cache -- ./build.sh
  cordon volume ls
  cordon volume rm cache`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&sf.socket, "socket", defaultSocket(), "the daemon's socket (env CORDON_SOCKET)")
	pf.BoolVar(&sf.json, "json", false, "machine-readable output")
	for _, op := range []struct{ use, op, short string }{
		{"create NAME", "volume_create", "Create a volume"},
		{"rm NAME", "volume_rm", "Remove a volume and its contents"},
	} {
		cmd.AddCommand(&cobra.Command{
			Use: op.use, Short: op.short, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				var out json.RawMessage
				if err := sf.do(cmd.Context(), op.op, hostmgr.NameArgs{Name: args[0]}, nil, &out); err != nil {
					return err
				}
				return g.print(sf, out, func() { fmt.Fprintf(g.stdout, "%s: %s\n", strings.Fields(op.use)[0], textsafe.Line(args[0])) })
			},
		})
	}
	cmd.AddCommand(&cobra.Command{
		Use: "ls", Short: "List your volumes (every one for root)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var vs []struct {
				Name     string    `json:"name"`
				OwnerUID uint32    `json:"owner_uid"`
				Created  time.Time `json:"created"`
			}
			if err := sf.do(cmd.Context(), "volume_ls", struct{}{}, nil, &vs); err != nil {
				return err
			}
			return g.print(sf, vs, func() {
				tw := tabwriter.NewWriter(g.stdout, 2, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tOWNER\tCREATED")
				for _, v := range vs {
					fmt.Fprintf(tw, "%s\t%d\t%s\n", textsafe.Line(v.Name), v.OwnerUID, v.Created.Format(time.RFC3339))
				}
				tw.Flush()
			})
		},
	})
	return cmd
}
