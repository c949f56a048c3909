//go:build cordon_testhooks

package cli

import (
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// addTestFlags adds --test-skip-layer to test builds only: positive
// controls in escape tests leave one layer out to show it is the one that
// denies. The production binary has no such flag.
func addTestFlags(root *cobra.Command, g *globals) {
	root.PersistentFlags().StringSliceVar(&g.testSkip, "test-skip-layer", nil, "TEST BUILD ONLY: leave out a hardening layer (seccomp, landlock, masks, userns-owner, userns-limits, kmem-tcp, tcp-watch)")
	root.PersistentFlags().StringVar(&g.panicAt, "test-panic-at", "", "TEST BUILD ONLY: panic at this point of cordon run (run.after_attach)")
	root.PersistentFlags().StringVar(&g.pauseAt, "test-pause-at", "", "TEST BUILD ONLY: pause 3 s at this point of cordon run (run.after_exec: the program runs, its terminal not yet relayed)")
}

// addDaemonTestFlags adds --test-crash-at to test builds of the daemon:
// the crash-recovery tests make it SIGKILL itself at a named point.
func addDaemonTestFlags(fl *pflag.FlagSet, g *globals) {
	fl.StringVar(&g.crashAt, "test-crash-at", "", "TEST BUILD ONLY: SIGKILL the daemon at this point (e.g. create.after_provision)")
}

// testArgs are the test flags a child of `cordon oci` (its keeper) gets.
func testArgs(g *globals) []string {
	var a []string
	for _, l := range g.testSkip {
		a = append(a, "--test-skip-layer", l)
	}
	return a
}
