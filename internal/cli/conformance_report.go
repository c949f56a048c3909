package cli

import (
	"bytes"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cordon-project/cordon/internal/attest"
	"github.com/cordon-project/cordon/internal/conformance/record"
	"github.com/cordon-project/cordon/internal/conformance/report"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/safefile"
	"github.com/cordon-project/cordon/internal/textsafe"
)

func conformanceReportCmd(g *globals) *cobra.Command {
	var out, key string
	var unverified bool
	cmd := &cobra.Command{
		Use:   "report RECORD -o FILE.html",
		Short: "Render a conformance record as a self-contained HTML page",
		Long: `Render a signed conformance record as one HTML file (no scripts, no external
resources): the claim, the matrix class × clause × probe × result with the
facts observed, the bindings, the host, the TCB, assumptions and non-claims.

The record's signature is checked first (--key, default
<state-dir>/evidence/log.pub); a record that does not verify is refused
unless --unverified, which renders it under a NOT VERIFIED banner.

Example:
  cordon conformance report record.json --key log.pub -o record.html`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return failure.Failf(failure.KindUsage, "conformance report", "-o FILE.html is required")
			}
			return g.conformanceReport(args[0], out, key, unverified)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&out, "output", "o", "", "the HTML file to write")
	fl.StringVar(&key, "key", "", "public key file (log.pub; default <state-dir>/evidence/log.pub)")
	fl.BoolVar(&unverified, "unverified", false, "render a record whose signature does not verify, under a NOT VERIFIED banner")
	return cmd
}

// conformanceReport verifies the record (or, with unverified, reads it
// anyway) and writes its report.
func (g *globals) conformanceReport(path, out, key string, unverified bool) error {
	b, err := safefile.ReadBounded(path, attest.MaxEnvelope, true)
	if err != nil {
		return failure.Fail(failure.KindUsage, "conformance report", err)
	}
	env, err := attest.ParseEnvelope(b)
	if err != nil {
		return failure.Fail(failure.KindUsage, "conformance report", err)
	}
	rep := &verifyReport{Record: path, Checked: []string{}, Problems: []verifyProblem{}}
	rec := g.verifySignature(rep, env, key)
	v := report.Verification{Checked: true, Verified: rec != nil, KeyID: rep.KeyID}
	for _, p := range rep.Problems {
		v.Problems = append(v.Problems, p.Where+": "+p.Detail)
	}
	if rec == nil {
		if !unverified {
			return failure.Failf(failure.KindEvidence, "conformance report", "%s does not verify (%v); --unverified renders it anyway", path, v.Problems)
		}
		if rec, err = unverifiedRecord(env); err != nil {
			return failure.Fail(failure.KindUsage, "conformance report", err)
		}
	}
	var buf bytes.Buffer
	if err := report.Render(&buf, rec, v); err != nil {
		return err
	}
	if err := safefile.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		return failure.Fail(failure.KindUsage, "conformance report", err)
	}
	fmt.Fprintf(g.stdout, "wrote %s (claim %s)\n", textsafe.Line(out), textsafe.Line(rec.Claim.Admitted))
	return nil
}

// unverifiedRecord decodes the record of an envelope whose signature did
// not verify (for --unverified only).
func unverifiedRecord(env attest.Envelope) (*record.Record, error) {
	body, err := attest.Payload(env)
	if err != nil {
		return nil, err
	}
	st, err := attest.ParseStatement(body)
	if err != nil {
		return nil, err
	}
	return record.FromStatement(st)
}
