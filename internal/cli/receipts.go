package cli

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/textsafe"
)

func receiptsCmd(g *globals) *cobra.Command {
	var asJSON bool
	var f store.ReceiptFilter
	cmd := &cobra.Command{
		Use:   "receipts",
		Short: "List the receipts of crossings (model requests, egress connections, tool calls, state)",
		Long: `List the receipts the gateway recorded: one per crossing, with the workload,
tenant, broker, action, target, request digest, decision and reason, budget
state, upstream status, bytes and timings. Secrets never appear in receipts.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireRoot("receipts"); err != nil {
				return err
			}
			st, err := g.openStore()
			if err != nil {
				return err
			}
			defer st.Close()
			rs, err := st.Receipts(cmd.Context(), f)
			if err != nil {
				return err
			}
			if asJSON {
				for _, r := range rs {
					if err := writeJSON(g.stdout, r); err != nil {
						return err
					}
				}
				return nil
			}
			tw := tabwriter.NewWriter(g.stdout, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tTIME\tWORKLOAD\tSANDBOX\tBROKER\tACTION\tTARGET\tDECISION\tREASON\tSTATUS\tIN\tOUT\tDURATION")
			for _, r := range rs {
				// Every text cell may hold agent or upstream bytes (a
				// target is the model name or host the agent sent).
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\n", r.ID, r.Time.UTC().Format(time.RFC3339),
					textsafe.Line(r.Identity.Workload), textsafe.Line(r.Identity.SandboxID), textsafe.Line(r.Broker), textsafe.Line(r.Action),
					textsafe.Line(r.Target), textsafe.Line(r.Decision), textsafe.Line(r.Reason),
					r.UpstreamCode, r.BytesIn, r.BytesOut, r.Duration.Round(time.Microsecond))
			}
			return tw.Flush()
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&asJSON, "json", false, "print one JSON receipt per line")
	fl.StringVar(&f.Workload, "workload", "", "only this workload")
	fl.StringVar(&f.SandboxID, "sandbox", "", "only this sandbox id")
	fl.StringVar(&f.Broker, "broker", "", "only this broker (model, egress, tool, state, ingress)")
	fl.IntVar(&f.Limit, "limit", 0, "only the last N")
	return cmd
}
