package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// BuildTime is set at build time with -ldflags "-X …/cli.BuildTime=…"
// (RFC 3339); the Go toolchain records no build time of its own.
var BuildTime = ""

// Commit is set at build time with -ldflags "-X …/cli.Commit=…" by
// scripts/package.sh: the Go toolchain records no vcs.revision with
// -buildvcs=false (these machines set GOFLAGS=-buildvcs=false) or outside
// a git checkout.
// The build information's revision, when present, wins.
var Commit = ""

// versionInfo is what `cordon --version` and `cordon version` print:
// one value for both, read from the binary's own build information.
type versionInfo struct {
	Version    string `json:"version"`
	Commit     string `json:"commit"`
	Dirty      bool   `json:"dirty"`
	CommitTime string `json:"commit_time,omitempty"`
	BuildTime  string `json:"build_time,omitempty"`
	GoVersion  string `json:"go_version"`
	Platform   string `json:"platform"`
}

// buildVersion computes the version from the link-time Version and
// BuildTime and the module's build information (bi may be nil when the
// binary carries none). A field the binary does not know reads "dev"
// (version) or "unknown" (commit).
func buildVersion(linked, buildTime string, bi *debug.BuildInfo) versionInfo {
	v := versionInfo{Version: linked, Commit: "unknown", BuildTime: buildTime,
		GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi == nil {
		if v.Version == "" {
			v.Version = "dev"
		}
		return v
	}
	if bi.GoVersion != "" {
		v.GoVersion = bi.GoVersion
	}
	if (v.Version == "" || v.Version == "dev") && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v.Version = bi.Main.Version
	}
	if v.Version == "" {
		v.Version = "dev"
	}
	var goos, goarch string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.modified":
			v.Dirty = s.Value == "true"
		case "vcs.time":
			v.CommitTime = s.Value
		case "GOOS":
			goos = s.Value
		case "GOARCH":
			goarch = s.Value
		}
	}
	if goos != "" && goarch != "" {
		v.Platform = goos + "/" + goarch
	}
	return v
}

// String is the human form, the same for `cordon --version` and
// `cordon version`.
func (v versionInfo) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cordon %s\n", v.Version)
	commit := v.Commit
	if v.Dirty {
		commit += " (dirty)"
	}
	fmt.Fprintf(&b, "  commit:      %s\n", commit)
	if v.CommitTime != "" {
		fmt.Fprintf(&b, "  commit time: %s\n", v.CommitTime)
	}
	if v.BuildTime != "" {
		fmt.Fprintf(&b, "  built:       %s\n", v.BuildTime)
	}
	fmt.Fprintf(&b, "  go:          %s %s\n", v.GoVersion, v.Platform)
	return b.String()
}

// currentVersion is this binary's version.
func currentVersion() versionInfo {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	v := buildVersion(Version, BuildTime, bi)
	if v.Commit == "unknown" && Commit != "" {
		v.Commit = Commit
	}
	return v
}

// setVersionFlag gives root the --version flag, printing what `cordon
// version` prints.
func setVersionFlag(root *cobra.Command) {
	root.Version = currentVersion().String()
	root.SetVersionTemplate("{{.Version}}")
}

func versionCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print cordon's version, commit and Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := currentVersion()
			if asJSON {
				return writeJSON(g.stdout, v)
			}
			_, err := fmt.Fprint(g.stdout, v.String())
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}
