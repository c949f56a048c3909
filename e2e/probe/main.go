// Command probe runs inside a sandbox in the e2e tests: `probe OP ARGS`
// runs one of package probeops' attempts and prints its JSON line. The
// tests never take this as the verdict on an escape: they observe the
// effect (or its absence) from outside.
package main

import (
	"os"

	"github.com/cordon-project/cordon/internal/conformance/probeops"
)

func main() { os.Exit(probeops.Main(os.Args[1:])) }
