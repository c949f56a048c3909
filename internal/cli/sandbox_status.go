package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/hostmgr"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/sandbox/linux"
	"github.com/cordon-project/cordon/internal/textsafe"
	"github.com/cordon-project/cordon/internal/units"
)

// statusReply is what the daemon's status answers, as far as the
// readable summary uses it (--json prints the daemon's JSON as is).
type statusReply struct {
	hostmgr.Info
	Limits        sandbox.Limits   `json:"limits"`
	GatewayRoutes []string         `json:"gateway_routes"`
	Evidence      *evidence.Record `json:"evidence"`
	Receipt       *struct {
		ReceiptID int64  `json:"receipt_id"`
		Digest    string `json:"digest"`
	} `json:"receipt"`
}

func sbStatusCmd(g *globals, sf *sandboxFlags) *cobra.Command {
	var pretty bool
	cmd := &cobra.Command{
		Use:   "status NAME [--json [--pretty]]",
		Short: "Show one sandbox: state, owner, level, limits, gateway, evidence, drift",
		Long: `Show one sandbox as a readable summary: name, id, state, owner, profile,
level, when it was created and started, its limits, the gateway routes its
programs are pointed at, a summary of its evidence record and whether it
drifted (drains). --json prints the daemon's full record, evidence
included, as one JSON line (stable, for scripts); --pretty indents it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var out json.RawMessage
			if err := sf.do(cmd.Context(), "status", hostmgr.NameArgs{Name: args[0]}, nil, &out); err != nil {
				return err
			}
			if sf.json || pretty {
				if pretty {
					// The daemon's bytes, indented: no number is re-encoded.
					var b bytes.Buffer
					if err := json.Indent(&b, out, "", "  "); err != nil {
						return fmt.Errorf("the daemon's status answer: %w", err)
					}
					_, err := io.WriteString(g.stdout, textsafe.JSON(b.Bytes())+"\n")
					return err
				}
				// The daemon's JSON as is, with invisible characters
				// in its strings written as \u escapes (same value).
				_, err := io.WriteString(g.stdout, textsafe.JSON(out)+"\n")
				return err
			}
			var r statusReply
			if err := json.Unmarshal(out, &r); err != nil {
				return fmt.Errorf("the daemon's status answer: %w", err)
			}
			printStatus(g.stdout, r, time.Now())
			return nil
		},
	}
	cmd.Flags().BoolVar(&pretty, "pretty", false, "with --json: indented JSON")
	return cmd
}

// printStatus writes r as "Field: value" lines; every string that came
// from the daemon goes through textsafe.Line (names, notes, argv are a
// user's or a program's).
func printStatus(w io.Writer, r statusReply, now time.Time) {
	tw := tabwriter.NewWriter(w, 2, 4, 1, ' ', 0)
	line := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	when := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return fmt.Sprintf("%s (%s ago)", t.UTC().Format(time.RFC3339), age(t, now))
	}
	line("Name", textsafe.Line(r.Name))
	line("ID", textsafe.Line(r.ID))
	state := textsafe.Line(r.State)
	if r.MainExit != "" {
		state += " (main program: " + textsafe.Line(r.MainExit) + ")"
	}
	line("State", state)
	line("Owner", fmt.Sprintf("%s (uid %d)", textsafe.Line(ownerNames{}.name(r.Owner)), r.Owner))
	line("Profile", textsafe.Line(r.Profile))
	lvl := textsafe.Line(r.Level)
	if lvl == "" {
		lvl = "- (not admitted yet)"
	}
	line("Level", lvl)
	line("Created", when(r.Created))
	if ev := r.Evidence; ev != nil {
		line("Started", when(ev.CollectedAt))
		if ev.FinishedAt != nil {
			line("Finished", when(*ev.FinishedAt))
		}
	} else {
		line("Started", "- (not started)")
	}
	if len(r.Argv) > 0 {
		args := make([]string, len(r.Argv))
		for i, a := range r.Argv {
			args[i] = strconv.Quote(a)
		}
		line("Program", textsafe.Line(strings.Join(args, " ")))
	} else {
		line("Program", "none (idle: runs what you exec)")
	}
	ws := "none"
	if r.Workspace {
		ws = "bound at /workspace"
	}
	line("Workspace", ws)
	line("Limits", limitsText(r.Limits))
	if len(r.GatewayRoutes) == 0 {
		line("Gateway", "none (no way out)")
	}
	for i, rt := range r.GatewayRoutes {
		k := "Gateway:"
		if i > 0 {
			k = ""
		}
		fmt.Fprintf(tw, "%s\t%s\n", k, textsafe.Line(rt))
	}
	line("Evidence", evidenceText(r.Evidence))
	rc := "none"
	if r.Receipt != nil {
		rc = fmt.Sprintf("signed, evidence-log receipt %d, %s (--json: .receipt.envelope; docs/session-receipts.md)", r.Receipt.ReceiptID, textsafe.Line(short(r.Receipt.Digest)))
	}
	line("Receipt", rc)
	drift := "none"
	if r.Drain != "" {
		drift = "DRAINING: " + textsafe.Line(r.Drain) + " (cordon sandbox readmit NAME)"
	}
	line("Drift", drift)
	line("Admitted with", fmt.Sprintf("runtime %s, policy %s, rootfs %s", short(r.Admitted.Runtime), short(r.Admitted.Policy), short(r.Admitted.Rootfs)))
	if r.Note != "" {
		line("Note", textsafe.Line(r.Note))
	}
	if len(r.Bypassed) > 0 {
		line("FULL_CONTROL_LAB bypasses", textsafe.Line(strings.Join(r.Bypassed, ", ")))
	}
	if n := len(r.WorkspaceTraps); n > 0 {
		line("Workspace traps", fmt.Sprintf("%d report(s) (see --json)", n))
	}
	tw.Flush()
}

// limitsText is a sandbox's limits, the defaults named as such.
func limitsText(l sandbox.Limits) string {
	size := func(n, def int64) string {
		if n == 0 {
			return units.Format(def) + " (default)"
		}
		return units.Format(n)
	}
	pids := strconv.FormatInt(l.Pids, 10)
	if l.Pids == 0 {
		pids = strconv.Itoa(linux.DefaultPids) + " (default)"
	}
	cpus := "all"
	if l.CPUs > 0 {
		cpus = strconv.FormatFloat(l.CPUs, 'f', -1, 64)
	}
	s := fmt.Sprintf("memory %s, pids %s, cpus %s, tmp %s", size(l.MemoryBytes, linux.DefaultMemory), pids, cpus, size(l.TmpBytes, linux.DefaultTmp))
	if l.Timeout > 0 {
		s += ", timeout " + l.Timeout.String()
	}
	return s
}

// evidenceText summarises an evidence record: how many boundaries were
// verified, which were not.
func evidenceText(ev *evidence.Record) string {
	if ev == nil {
		return "none yet (written when the sandbox starts)"
	}
	var bad []string
	all := evidence.Boundaries()
	for _, b := range all {
		if !ev.Boundaries[b].Verified {
			bad = append(bad, b)
		}
	}
	s := fmt.Sprintf("%d of %d boundaries verified, %s, level %s (requested %s)", len(all)-len(bad), len(all),
		textsafe.Line(ev.EnforcementMode), ev.LevelAdmitted.String(), ev.LevelRequested.String())
	if len(bad) > 0 {
		s += "; unverified: " + strings.Join(bad, ", ")
	}
	if in := ev.InSitu; in != nil {
		ok := 0
		for _, c := range in.Checks {
			if c.OK {
				ok++
			}
		}
		s += fmt.Sprintf("; in-situ %s set: %d of %d checks OK", textsafe.Line(in.Set), ok, len(in.Checks))
	}
	return s + " (cordon sandbox status NAME --json --pretty for every fact)"
}

// short is a digest's first 12 characters ("-" for none).
func short(d string) string {
	d = textsafe.Line(d)
	if d == "" {
		return "-"
	}
	if _, h, ok := strings.Cut(d, ":"); ok {
		d = h
	}
	if len(d) > 12 {
		return d[:12]
	}
	return d
}
