// Command cordon runs untrusted programs and AI agents inside an evidenced
// Linux boundary. See README.md.
package main

import (
	"os"

	"github.com/cordon-project/cordon/internal/cli"
	// The sandbox init dispatches from this package's init when the binary
	// is started as the init; see package sbinit.
	_ "github.com/cordon-project/cordon/internal/sandbox/linux/sbinit"
)

func main() {
	os.Exit(cli.Main(os.Args[1:]))
}
