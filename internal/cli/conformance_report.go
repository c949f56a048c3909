package cli

import "github.com/spf13/cobra"

func conformanceReportCmd(g *globals) *cobra.Command {
	return &cobra.Command{Use: "report RECORD -o FILE.html", Hidden: true, RunE: func(*cobra.Command, []string) error { return nil }}
}
