package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cordon-project/cordon/internal/broker/state"
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/textsafe"
)

func stateCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "state",
		Short: "List, export, reset and purge workloads' managed state",
		Long: `Managed state is what agents keep through the state broker
(http://127.0.0.1:83/v1/state inside a sandbox): entries of bytes under
path-like keys, scoped by tenant, workload and purpose, and shared by every
sandbox of that scope. These commands read and reset it from the host (root).

Listing and exporting read the store; they are not crossings and record no
receipt. A reset records a receipt (broker "state", action "reset").`,
		Example: `  cordon state ls --workload ci-agent
  cordon state export --tenant acme --workload ci-agent --purpose coding > mind.json
  cordon state reset --tenant acme --workload ci-agent --purpose coding`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(stateLsCmd(g), stateExportCmd(g), stateResetCmd(g), statePurgeCmd(g))
	return cmd
}

// scopeFlags are --tenant, --workload and --purpose.
type scopeFlags struct{ sc store.StateScope }

func (f *scopeFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.sc.Tenant, "tenant", "", "the scope's tenant")
	fl.StringVar(&f.sc.Workload, "workload", "", "the scope's workload")
	fl.StringVar(&f.sc.Purpose, "purpose", "", "the scope's purpose")
}

// exact refuses a scope that is not named in full: an operation on one
// scope must never reach another.
func (f *scopeFlags) exact(op string) error {
	if f.sc.Tenant == "" || f.sc.Workload == "" || f.sc.Purpose == "" {
		return failure.Failf(failure.KindUsage, op, "--tenant, --workload and --purpose are all required: this acts on exactly one scope")
	}
	return nil
}

// stateLine is one entry as `state ls --json` prints it.
type stateLine struct {
	store.StateScope
	state.Entry
}

func stateLsCmd(g *globals) *cobra.Command {
	var f scopeFlags
	var prefix string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List entries (metadata, no values) of the scopes the flags select",
		Long: `List the entries of every scope the flags select (no flag: every scope), in
scope and key order: key, version, size, last write, expiry, and the
sandbox and receipt of the last write. Values are not printed (see export).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := state.ValidCursor(prefix); err != nil {
				return failure.Fail(failure.KindUsage, "state ls", err)
			}
			return g.withStore("state ls", func(st *store.Store) error {
				scopes, err := st.StateScopes(cmd.Context(), f.sc)
				if err != nil {
					return failure.Fail(failure.KindStore, "state ls", err)
				}
				tw := tabwriter.NewWriter(g.stdout, 2, 4, 2, ' ', 0)
				if !asJSON {
					fmt.Fprintln(tw, "TENANT\tWORKLOAD\tPURPOSE\tKEY\tVERSION\tSIZE\tUPDATED\tEXPIRES\tSANDBOX\tRECEIPT")
				}
				for _, sc := range scopes {
					err := eachStateEntry(cmd.Context(), st, sc.StateScope, store.StateQuery{Prefix: prefix, Limit: 1000}, func(e state.Entry) error {
						if asJSON {
							return writeJSON(g.stdout, stateLine{sc.StateScope, e})
						}
						expires := "-"
						if !e.Expires.IsZero() {
							expires = e.Expires.Format(time.RFC3339)
						}
						_, err := fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%d\n", textsafe.Line(sc.Tenant), textsafe.Line(sc.Workload),
							textsafe.Line(sc.Purpose), textsafe.Line(e.Key), e.Version,
							e.Size, e.Updated.Format(time.RFC3339), expires, textsafe.Line(e.Provenance.SandboxID), e.Provenance.Receipt)
						return err
					})
					if err != nil {
						return err
					}
				}
				return tw.Flush()
			})
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&prefix, "prefix", "", "only keys starting with this")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON entry per line, with its scope")
	return cmd
}

// eachStateEntry calls fn for each entry of sc that q selects, page by
// page.
func eachStateEntry(ctx context.Context, st *store.Store, sc store.StateScope, q store.StateQuery, fn func(state.Entry) error) error {
	for {
		p, _, err := st.ListState(ctx, sc, q, nil)
		if err != nil {
			return failure.Fail(failure.KindStore, "state", err)
		}
		for _, e := range p.Entries {
			if err := fn(stateEntry(e)); err != nil {
				return err
			}
		}
		if !p.More || len(p.Entries) == 0 {
			return nil
		}
		q.After = p.Entries[len(p.Entries)-1].Key
	}
}

func stateEntry(e store.StateEntry) state.Entry {
	return state.Entry{Key: e.Key, Version: e.Version, Size: e.Size, Created: e.Created, Updated: e.Updated, Expires: e.Expires, Value: e.Value,
		Provenance: state.Provenance{SandboxID: e.SandboxID, Written: e.Updated, Receipt: e.ReceiptID, Trust: state.TrustAgent}}
}

func stateExportCmd(g *globals) *cobra.Command {
	var f scopeFlags
	cmd := &cobra.Command{
		Use:   "export --tenant T --workload W --purpose P",
		Short: "Print every entry of one scope, values included, as one JSON document",
		Long: `Print every entry of exactly one scope as one JSON document on stdout, in the
format an agent's own export has: {"scope": …, "usage": …, "entries": […]},
each entry with its metadata, provenance and its value in base64.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.exact("state export"); err != nil {
				return err
			}
			return g.withStore("state export", func(st *store.Store) error {
				return exportState(cmd.Context(), st, f.sc, g.stdout)
			})
		},
	}
	f.add(cmd)
	return cmd
}

// exportState writes sc's export document to w.
func exportState(ctx context.Context, st *store.Store, sc store.StateScope, w io.Writer) error {
	scopes, err := st.StateScopes(ctx, sc)
	if err != nil {
		return failure.Fail(failure.KindStore, "state export", err)
	}
	var u state.Usage
	if len(scopes) == 1 {
		u.Bytes, u.Entries = scopes[0].Bytes, scopes[0].Entries
	}
	head, err := json.Marshal(struct {
		Scope state.Scope `json:"scope"`
		Usage state.Usage `json:"usage"`
	}{state.Scope{Tenant: sc.Tenant, Workload: sc.Workload, Purpose: sc.Purpose}, u})
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, "%s,\"entries\":[", textsafe.JSON(head[:len(head)-1])); err != nil {
		return err
	}
	sep := "\n"
	err = eachStateEntry(ctx, st, sc, store.StateQuery{Limit: state.ExportPageEntries, Values: true, MaxBytes: state.ExportPageBytes}, func(e state.Entry) error {
		b, err := json.Marshal(e)
		if err == nil {
			_, err = fmt.Fprintf(w, "%s%s", sep, textsafe.JSON(b))
		}
		sep = ",\n"
		return err
	})
	if err != nil {
		return err
	}
	_, err = io.WriteString(w, "\n]}\n")
	return err
}

func stateResetCmd(g *globals) *cobra.Command {
	var f scopeFlags
	cmd := &cobra.Command{
		Use:   "reset --tenant T --workload W --purpose P",
		Short: "Remove every entry of exactly one scope",
		Long: `Remove every entry of exactly one scope, named in full; no other scope is
touched (not another purpose of the same workload, not another tenant's
workload of the same name). The scope's versions are never reused afterwards,
so a version an agent kept from before cannot match a new entry. The reset
is recorded as a receipt (broker "state", action "reset"); receipts and the
evidence log are never removed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.exact("state reset"); err != nil {
				return err
			}
			return g.withStore("state reset", func(st *store.Store) error {
				rc := crossing.Receipt{Time: time.Now().UTC(), Broker: state.Name, Action: state.OpReset, Target: state.ScopeTarget,
					Identity: crossing.Identity{Tenant: f.sc.Tenant, Workload: f.sc.Workload, Purpose: f.sc.Purpose},
					Decision: crossing.Allow, Reason: "operator reset (" + decider() + ")"}
				n, rid, err := st.ResetState(cmd.Context(), f.sc, &rc)
				if err != nil {
					return failure.Fail(failure.KindStore, "state reset", err)
				}
				fmt.Fprintf(g.stdout, "state of tenant %s, workload %s, purpose %s reset: %d entries removed (receipt %d)\n",
					textsafe.Line(f.sc.Tenant), textsafe.Line(f.sc.Workload), textsafe.Line(f.sc.Purpose), n, rid)
				return nil
			})
		},
	}
	f.add(cmd)
	return cmd
}

func statePurgeCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "purge",
		Short: "Remove every entry past its retention, of every scope",
		Long: `Remove every entry past its scope's retention (state.retention in the
configuration, as of the scope's last run). Runs also do this when they start
and on every write; this command does it without a run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withStore("state purge", func(st *store.Store) error {
				n, err := st.PurgeExpiredState(cmd.Context())
				if err != nil {
					return failure.Fail(failure.KindStore, "state purge", err)
				}
				fmt.Fprintf(g.stdout, "%d expired entries removed\n", n)
				return nil
			})
		},
	}
}
