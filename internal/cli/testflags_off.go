//go:build !cordon_testhooks

package cli

import (
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// addTestFlags adds nothing in production builds.
func addTestFlags(*cobra.Command, *globals) {}

// addDaemonTestFlags adds nothing in production builds.
func addDaemonTestFlags(*pflag.FlagSet, *globals) {}

// testArgs: production builds forward no test flags.
func testArgs(*globals) []string { return nil }
