package main

import (
	"os"
	"path/filepath"

	"github.com/cordon-project/cordon/internal/cli"
	"github.com/cordon-project/cordon/internal/conformance/probeops"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/gateway"
	"github.com/cordon-project/cordon/internal/gateway/proc"

	// The sandbox init dispatches from this package's init when the binary
	// is started as the init; see package sbinit.
	_ "github.com/cordon-project/cordon/internal/sandbox/linux/sbinit"
)

func main() {
	// `cordon __probe OP`: one attempt of the conformance suite, run
	// inside a sandbox as an untrusted program would (or on the host as
	// its positive control); nothing of cordon's own start-up applies.
	if len(os.Args) > 1 && os.Args[1] == "__probe" {
		probeops.Self = []string{"__probe"}
		os.Exit(probeops.Main(os.Args[2:]))
	}
	// Nothing cordon inherited beyond stdio may reach a sandbox: a leaked
	// descriptor (a shell's "exec 7<>file", a supervisor's socket, a
	// jobserver pipe) would carry host files or the host's network past
	// every namespace. Mark them all close-on-exec before anything starts.
	if err := cli.CloseInherited(); err != nil {
		os.Stderr.WriteString("cordon: internal: mark inherited descriptors close-on-exec: " + err.Error() + "\n")
		os.Exit(failure.ExitRefused)
	}
	if len(os.Args) > 0 && os.Args[0] == gateway.Argv0 {
		os.Exit(proc.ChildMain())
	}
	args := os.Args[1:]
	if len(os.Args) > 0 && filepath.Base(os.Args[0]) == cli.OCIArgv0 {
		// The name engines are given: cordon-oci ARGS is cordon oci ARGS.
		args = append([]string{"oci"}, args...)
	}
	os.Exit(cli.Main(args))
}
