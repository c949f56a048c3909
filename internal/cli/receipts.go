package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/denial"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/textsafe"
)

// ReceiptView is one line of cordon receipts --json: the receipt as
// recorded and, for a denial, the smallest change that would allow it
// (computed here, for a human; never applied, never shown to the agent).
type ReceiptView struct {
	crossing.Receipt
	Suggestion *denial.Suggestion `json:"suggestion,omitempty"`
}

func receiptsCmd(g *globals) *cobra.Command {
	var asJSON bool
	var f store.ReceiptFilter
	var since string
	cmd := &cobra.Command{
		Use:   "receipts",
		Short: "List the receipts of crossings (model requests, egress connections, tool calls, state)",
		Long: `List the receipts the gateway recorded: one per crossing, with the workload,
tenant, broker, action, target, request digest, decision and reason, budget
state, upstream status, bytes and timings. Secrets never appear in receipts.

A denial's receipt names its rule — what denied it: the Cedar forbid ids or
"no permit matched", the configuration line that is missing (egress.allow
has no entry for example.com:443), the budget and its window, or the
approval's state — and is shown with a suggestion: the smallest
configuration or Cedar snippet that would allow exactly that crossing.
Suggestions are for you to read; cordon never applies them. cordon policy
explain --receipt ID replays a receipt's question against the current
configuration and policy. See docs/denials.md.

Examples:

  # the denials of the last hour
  cordon receipts --decision deny --since 1h

  # since a moment, as JSON lines (each denial with its "suggestion")
  cordon receipts --decision deny --since 2026-03-01T12:00:00Z --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch f.Decision {
			case "", crossing.Allow, crossing.Deny:
			default:
				return failure.Failf(failure.KindUsage, "receipts", "--decision %q: want allow or deny", f.Decision)
			}
			if since != "" {
				t, err := parseSince("receipts", since, time.Now())
				if err != nil {
					return err
				}
				f.Since = t
			}
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
					if err := writeJSON(g.stdout, viewOf(r)); err != nil {
						return err
					}
				}
				return nil
			}
			return printReceipts(g.stdout, rs)
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&asJSON, "json", false, "print one JSON receipt per line")
	fl.StringVar(&f.Workload, "workload", "", "only this workload")
	fl.StringVar(&f.SandboxID, "sandbox", "", "only this sandbox id")
	fl.StringVar(&f.Broker, "broker", "", "only this broker (model, egress, tool, state, ingress, evidence)")
	fl.StringVar(&f.Decision, "decision", "", "only this decision (allow or deny)")
	fl.StringVar(&since, "since", "", "only receipts from this long ago (10m, 24h) or since this time (RFC 3339)")
	fl.IntVar(&f.Limit, "limit", 0, "only the last N")
	return cmd
}

// viewOf is a receipt with its suggestion. A denial recorded before
// receipts named their rule gets it named here, from what it recorded.
func viewOf(r crossing.Receipt) ReceiptView {
	if r.Decision != crossing.Allow && r.Rule == "" {
		r.Rule = denial.Rule(r, 0)
	}
	return ReceiptView{Receipt: r, Suggestion: denial.Suggest(r)}
}

func printReceipts(w io.Writer, rs []crossing.Receipt) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTIME\tWORKLOAD\tSANDBOX\tBROKER\tACTION\tTARGET\tDECISION\tREASON\tSTATUS\tIN\tOUT\tDURATION")
	var denials []ReceiptView
	for _, r := range rs {
		// Every text cell may hold agent or upstream bytes (a
		// target is the model name or host the agent sent).
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\n", r.ID, r.Time.UTC().Format(time.RFC3339),
			textsafe.Line(r.Identity.Workload), textsafe.Line(r.Identity.SandboxID), textsafe.Line(r.Broker), textsafe.Line(r.Action),
			textsafe.Line(r.Target), textsafe.Line(r.Decision), textsafe.Line(r.Reason),
			r.UpstreamCode, r.BytesIn, r.BytesOut, r.Duration.Round(time.Microsecond))
		if r.Decision != crossing.Allow {
			denials = append(denials, viewOf(r))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, v := range denials {
		printDenial(w, v.ID, v.Rule, v.Suggestion)
	}
	return nil
}

// printDenial shows why one receipt's crossing was denied and what would
// allow it.
func printDenial(w io.Writer, id int64, rule string, s *denial.Suggestion) {
	fmt.Fprintf(w, "\nreceipt %d denied: %s\n", id, textsafe.Line(rule))
	printSuggestion(w, s)
}

func printSuggestion(w io.Writer, s *denial.Suggestion) {
	if s == nil {
		return
	}
	if s.Note != "" {
		fmt.Fprintf(w, "  suggestion (%s): %s\n", s.Kind, textsafe.Line(s.Note))
	} else {
		fmt.Fprintf(w, "  suggestion (%s):\n", s.Kind)
	}
	for _, l := range strings.Split(strings.TrimRight(s.Text, "\n"), "\n") {
		if l != "" {
			fmt.Fprintf(w, "    %s\n", textsafe.Line(l))
		}
	}
}
