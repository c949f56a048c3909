package cli

import "github.com/spf13/cobra"

// conformanceCmd is the `cordon conformance` group: run (the runner),
// verify and report (conformance_verify.go, conformance_report.go).
func conformanceCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "conformance",
		Short: "Run the conformance probes; verify and render a signed conformance record",
		Long: `The conformance suite runs a probe for every claim of the isolation contract
against the live system and judges each from the trusted side; its record is
signed with the evidence log's key (a DSSE envelope over an in-toto
statement) and appended to the evidence log. See docs/conformance.md.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(conformanceVerifyCmd(g), conformanceReportCmd(g))
	return cmd
}
