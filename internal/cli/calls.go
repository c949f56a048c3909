package cli

import (
	"errors"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cordon-project/cordon/internal/approval"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/textsafe"
)

func callsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "calls",
		Short: "List tool calls and reconcile quarantined ones",
		Long: `Every tools/call through the tool broker is recorded before it is sent. A
call answered by its tool server is "done" (its result is kept, so a
retransmission replays it instead of running again). A call whose outcome is
unknown — the server timed out after the request was sent, or the connection
or the gateway died — is "quarantined": a retransmission is refused, and it
is listed here until an operator finds out what happened and reconciles it.`,
		Example: `  cordon calls list --state quarantined
  cordon calls reconcile 42 --note "checked: the file was written"`,
	}
	cmd.AddCommand(callsListCmd(g), callsReconcileCmd(g))
	return cmd
}

func callsListCmd(g *globals) *cobra.Command {
	var asJSON bool
	var f store.ToolCallFilter
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List tool calls, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireRoot("calls"); err != nil {
				return err
			}
			st, err := g.openStore()
			if err != nil {
				return err
			}
			defer st.Close()
			cs, err := st.ToolCalls(cmd.Context(), f)
			if err != nil {
				return err
			}
			if asJSON {
				for _, c := range cs {
					if err := writeJSON(g.stdout, c); err != nil {
						return err
					}
				}
				return nil
			}
			tw := tabwriter.NewWriter(g.stdout, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tCREATED\tWORKLOAD\tSANDBOX\tTOOL\tSTATE\tOUTCOME\tRECEIPT\tAPPROVAL\tARGUMENTS\tNOTE")
			for _, c := range cs {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s/%s\t%s\t%s\t%d\t%s\t%s\t%s\n", c.ID, c.Created.Format(time.RFC3339),
					textsafe.Line(c.Workload), textsafe.Line(c.SandboxID), textsafe.Line(c.Server), textsafe.Line(c.Tool),
					textsafe.Line(c.State), textsafe.Line(c.Outcome), c.ReceiptID, textsafe.Line(c.Approval),
					cut(approval.CompactJSON(c.Arguments), 60), textsafe.Line(c.Note))
			}
			return tw.Flush()
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&asJSON, "json", false, "print one JSON call per line (with the full arguments and stored result)")
	fl.StringVar(&f.Workload, "workload", "", "only this workload")
	fl.StringVar(&f.State, "state", "", "only this state: started, done, quarantined, reconciled")
	fl.IntVar(&f.Limit, "limit", 100, "at most N (0: all)")
	return cmd
}

func callsReconcileCmd(g *globals) *cobra.Command {
	var note string
	cmd := &cobra.Command{
		Use:   "reconcile ID --note TEXT",
		Short: "Record what happened to a quarantined call",
		Long: `Record an operator's finding about a quarantined call. The call leaves the
quarantine list; it is never replayed or retried by cordon (a retransmission
of it stays refused), so the agent must make a new call if one is needed.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireRoot("calls"); err != nil {
				return err
			}
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || id <= 0 {
				return failure.Failf(failure.KindUsage, "calls reconcile", "%q is not a call id (see cordon calls list)", args[0])
			}
			if note == "" {
				return failure.Failf(failure.KindUsage, "calls reconcile", "--note is required: say what happened")
			}
			st, err := g.openStore()
			if err != nil {
				return err
			}
			defer st.Close()
			c, err := st.ReconcileToolCall(cmd.Context(), id, note)
			if errors.Is(err, store.ErrCallNotFound) || errors.Is(err, store.ErrCallState) {
				return failure.Fail(failure.KindUsage, "calls reconcile", err)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "call %d (%s/%s) reconciled: %s\n", c.ID, textsafe.Line(c.Server), textsafe.Line(c.Tool), textsafe.Line(note))
			return nil
		},
	}
	cmd.Flags().StringVar(&note, "note", "", "what happened (required)")
	return cmd
}
