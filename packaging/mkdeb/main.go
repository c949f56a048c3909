// Command mkdeb builds cordon's Debian package from packaging/nfpm.yaml
// with nfpm's library (pure Go: no dpkg-deb, no fakeroot, no cgo).
// scripts/package.sh stages the files and runs it; run it from there.
//
// It lives in its own module (packaging/go.mod) so that nfpm's dependency
// tree (git, OpenPGP, templating) never enters the cordon binary's module
// graph, go.sum or vulnerability surface.
//
// Plane: build time, on the packager's machine. It must never be linked
// into cordon, and it never runs as part of installing the package.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/deb"
)

func main() {
	config := flag.String("config", "nfpm.yaml", "the nfpm configuration ($VERSION, $ARCH and $STAGE are expanded from the environment)")
	out := flag.String("out", "", "the .deb to write")
	flag.Parse()
	if *out == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: mkdeb -config nfpm.yaml -out cordon_VERSION_ARCH.deb")
		os.Exit(2)
	}
	if err := build(*config, *out); err != nil {
		fmt.Fprintf(os.Stderr, "mkdeb: %v\n", err)
		os.Exit(1)
	}
}

// build writes the package to a temporary file beside out and renames it
// into place, so a failed build never leaves a truncated .deb.
func build(config, out string) error {
	cfg, err := nfpm.ParseFile(config)
	if err != nil {
		return fmt.Errorf("parse %s: %w", config, err)
	}
	info, err := cfg.Get("deb")
	if err != nil {
		return err
	}
	info = nfpm.WithDefaults(info)
	if err := nfpm.Validate(info); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), ".mkdeb-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	info.Target = out
	if err := deb.Default.Package(info, tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("package: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), out)
}
