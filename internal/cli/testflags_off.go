//go:build !cordon_testhooks

package cli

import "github.com/spf13/cobra"

// addTestFlags adds nothing in production builds.
func addTestFlags(*cobra.Command, *globals) {}
