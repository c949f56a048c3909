package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/record"
	"github.com/cordon-project/cordon/internal/conformance/report"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/sandbox/level"
	"github.com/cordon-project/cordon/internal/textsafe"

	// The probes register themselves.
	_ "github.com/cordon-project/cordon/internal/conformance/probes"
)

func conformanceCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "conformance",
		Short: "Run the conformance probes against this host; verify a conformance record",
		Long: `The conformance suite runs one probe per claim of the isolation contract
against the live system on this host, through this binary, and judges each
from the trusted side: a listener's count, a host file, /proc, the store.
What the program inside the sandbox reports is a hint, never the verdict.

Classes (contract section 2, item 5): allowed (each declared crossing
works), bypass (each undeclared route is denied), stale_state, cross_tenant,
exhaustion, failure (an unavailable dependency denies), reset_recovery.

A probe passes only when what it attempted was denied AND its positive
control (the same attempt by a permitted route) was observed to work. A
provider or host that cannot support a probe yields not_evidenced, never a
pass. See docs/conformance.md.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(conformanceRunCmd(g), conformanceListCmd(g), conformanceVerifyCmd(g), conformanceReportCmd(g))
	return cmd
}

type conformanceRunFlags struct {
	level, profile string
	only, classes  []string
	asJSON         bool
	timeout        time.Duration
	out, html      string
}

// conformanceOutput is the --json output of cordon conformance run.
type conformanceOutput struct {
	Exit          int                  `json:"exit_status"`
	Started       string               `json:"started"`
	Finished      string               `json:"finished"`
	Provider      string               `json:"provider"`
	Capability    sandbox.Capability   `json:"capability"`
	Claim         record.Claim         `json:"claim"`
	BaselineError string               `json:"baseline_error,omitempty"`
	Results       []record.ProbeResult `json:"results"`
	// Record and ReceiptID say where the signed record went (--out).
	Record    string `json:"record,omitempty"`
	ReceiptID int64  `json:"receipt_id,omitempty"`
}

func conformanceRunCmd(g *globals) *cobra.Command {
	var f conformanceRunFlags
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the conformance probes against this host",
		Long: `Run the conformance probes (all, or those --only and --class select) one
after another against this host, each in its own state directory, through
this binary (the probes run 'cordon run' and 'cordon daemon' as a user
would) and the global --provider. Needs root, like 'cordon run'.

The claim is the level requested (--level), capped by what the provider
says it can evidence (its capability descriptor), and admitted only when
every class has a passing probe and no probe failed; otherwise no level
is claimed and the record says why.

--out writes the conformance record, signed (a DSSE envelope over an
in-toto statement) with the evidence log's key of --state-dir (made on
first use, as 'cordon run' does), and appends it to that evidence log
with a checkpoint that covers it: 'cordon conformance verify' checks it.
--html writes the readable report of the same record.

Exit status: 0 when no probe failed and (for the whole suite) every class
has a passing probe; 1 when a probe failed; 3 when nothing failed but a
class has no pass (the claim is not evidenced); 125 when the suite could
not run. See docs/conformance-suite.md.

Examples:
  sudo cordon conformance run
  sudo cordon conformance run --class bypass --json
  sudo cordon conformance run --only bypass.net.host-loopback
  sudo cordon conformance run --out record.json --html report.html`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.conformanceRun(cmd, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.level, "level", "DEDICATED_CONTAINER", "the isolation level every sandbox of the suite must be admitted at")
	fl.StringVar(&f.profile, "profile", "SAFE_GUIDED", "the profile of the suite's daemon sandboxes (SAFE_GUIDED, FULL_CONTROL_LAB)")
	fl.StringSliceVar(&f.only, "only", nil, "run only these probes (IDs, comma-separated; see 'cordon conformance list')")
	fl.StringSliceVar(&f.classes, "class", nil, "run only the probes of these classes")
	fl.BoolVar(&f.asJSON, "json", false, "print the results as JSON on stdout (progress still goes to stderr)")
	fl.DurationVar(&f.timeout, "timeout", 0, "deadline of the whole suite (0: none; each probe has its own); probes not run by then are not evidenced")
	fl.StringVar(&f.out, "out", "", "write the signed conformance record (DSSE envelope) here and append it to the evidence log of --state-dir")
	fl.StringVar(&f.html, "html", "", "write the readable HTML report here")
	return cmd
}

func (g *globals) conformanceRun(cmd *cobra.Command, f conformanceRunFlags) error {
	bin, err := os.Executable()
	if err == nil {
		bin, err = filepath.EvalSymlinks(bin)
	}
	if err != nil {
		return failure.Fail(failure.KindInternal, "conformance", fmt.Errorf("find this binary: %w", err))
	}
	if _, err := level.Parse(f.level); err != nil {
		return failure.Failf(failure.KindUsage, "conformance", "--level %q: %v", f.level, err)
	}
	o := conformance.Options{Bin: bin, Provider: g.provider, Level: f.level, Profile: f.profile, Only: f.only, Progress: g.stderr}
	for _, c := range f.classes {
		o.Classes = append(o.Classes, record.Class(c))
	}
	sel, err := conformance.Selected(o)
	if err != nil {
		return failure.Fail(failure.KindUsage, "conformance", err)
	}
	if len(sel) == 0 {
		return failure.Failf(failure.KindUsage, "conformance", "%v (classes: %v)", conformance.ErrNoProbes, record.Classes())
	}
	if err := requireRoot("conformance run"); err != nil {
		return err
	}
	var sink *recordSink
	if f.out != "" {
		if sink, err = g.openRecordSink(); err != nil {
			return err
		}
		defer sink.Close()
	}
	ctx := cmd.Context()
	rec, capability, err := g.newRecord(ctx, f)
	if err != nil {
		return err
	}
	if f.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, f.timeout, fmt.Errorf("--timeout %s", f.timeout))
		defer cancel()
	}
	if req, _ := level.Parse(f.level); capability.MaxLevel < req {
		o.CannotEvidence = fmt.Sprintf("provider %s evidences at most %s on this host, below the level requested (%s)", capability.Provider, capability.MaxLevel, f.level)
		if len(capability.Missing) > 0 {
			o.CannotEvidence += "; missing: " + strings.Join(capability.Missing, "; ")
		}
	}
	rep, err := conformance.Run(ctx, o)
	if err != nil {
		return failure.Fail(failure.KindInternal, "conformance", err)
	}
	finishRecord(rec, rep, capability)
	code := rep.ExitStatus()
	out := conformanceOutput{Exit: code, Started: rep.Started.Format(timeFormat), Finished: rep.Finished.Format(timeFormat),
		Provider: g.provider, Capability: capability, Claim: rec.Claim, BaselineError: rep.BaselineError, Results: rep.Results}
	// Background: a deadline that cut the probes short must not stop
	// the record of what ran from being written.
	wctx := context.WithoutCancel(cmd.Context())
	if sink != nil {
		if out.ReceiptID, err = sink.write(wctx, rec, f.out); err != nil {
			return err
		}
		out.Record = f.out
	}
	if f.html != "" {
		v := report.Verification{}
		if sink != nil {
			// Signed by this run, and checked with the key's public half.
			v = report.Verification{Checked: true, Verified: true, KeyID: sink.key.ID}
		}
		if err := writeReport(f.html, rec, v); err != nil {
			return err
		}
	}
	if f.asJSON {
		enc := json.NewEncoder(g.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
	} else {
		printConformance(g, rep, out)
	}
	if code != 0 {
		return &exitError{code: code}
	}
	return nil
}

const timeFormat = "2006-01-02T15:04:05.000Z07:00"

// printConformance prints the verdicts by class and the claim; every
// fact is escaped (facts carry what the sandbox could influence).
func printConformance(g *globals, rep *conformance.Report, out conformanceOutput) {
	c := out.Capability
	fmt.Fprintf(g.stdout, "provider %s v%s: evidences at most %s here", textsafe.Line(c.Provider), textsafe.Line(c.Version), c.MaxLevel)
	if len(c.Missing) > 0 {
		fmt.Fprintf(g.stdout, " (missing: %s)", textsafe.Line(strings.Join(c.Missing, "; ")))
	}
	fmt.Fprintln(g.stdout)
	if rep.BaselineError != "" {
		fmt.Fprintf(g.stdout, "baseline run: %s\n", textsafe.Line(rep.BaselineError))
	}
	counts := map[record.Verdict]int{}
	for _, r := range rep.Results {
		counts[r.Verdict]++
		fmt.Fprintf(g.stdout, "%-13s %-14s %s\n", strings.ToUpper(string(r.Verdict)), r.Class, r.ID)
		if r.Reason != "" {
			fmt.Fprintf(g.stdout, "    %s\n", textsafe.Line(r.Reason))
		}
	}
	fmt.Fprintf(g.stdout, "%d pass, %d fail, %d not evidenced\n", counts[record.Pass], counts[record.Fail], counts[record.NotEvidenced])
	fmt.Fprintf(g.stdout, "claim: %s (requested %s)\n", out.Claim.Admitted, out.Claim.Requested)
	for _, w := range out.Claim.Why {
		fmt.Fprintf(g.stdout, "    %s\n", textsafe.Line(w))
	}
	if out.Record != "" {
		fmt.Fprintf(g.stdout, "signed record: %s (evidence log receipt %d)\n", out.Record, out.ReceiptID)
	}
}

func conformanceListCmd(g *globals) *cobra.Command {
	var asJSON, markdown bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the conformance probes with their class and contract clause",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if markdown {
				_, err := fmt.Fprint(g.stdout, conformance.MarkdownTable(conformance.All()))
				return err
			}
			type entry struct {
				ID          string       `json:"id"`
				Class       record.Class `json:"class"`
				Clause      string       `json:"clause"`
				Title       string       `json:"title"`
				Destructive bool         `json:"destructive,omitempty"`
				Launcher    bool         `json:"launcher,omitempty"`
			}
			var out []entry
			for _, p := range conformance.All() {
				out = append(out, entry{p.ID, p.Class, p.Clause, p.Title, p.Destructive, p.Launcher})
			}
			if asJSON {
				enc := json.NewEncoder(g.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			for _, e := range out {
				fmt.Fprintf(g.stdout, "%-14s %-36s %s\n    %s\n", e.Class, e.ID, e.Title, e.Clause)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON")
	cmd.Flags().BoolVar(&markdown, "markdown", false, "print docs/testing.md's table of the probes by class")
	return cmd
}
