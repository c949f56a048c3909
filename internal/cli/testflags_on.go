//go:build cordon_testhooks

package cli

import "github.com/spf13/cobra"

// addTestFlags adds --test-skip-layer to test builds only: positive
// controls in escape tests leave one layer out to show it is the one that
// denies. The production binary has no such flag.
func addTestFlags(root *cobra.Command, g *globals) {
	root.PersistentFlags().StringSliceVar(&g.testSkip, "test-skip-layer", nil, "TEST BUILD ONLY: leave out a hardening layer (seccomp, landlock)")
}
