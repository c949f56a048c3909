package cli

import (
	"encoding/json"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestBuildVersion(t *testing.T) {
	stamped := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/cordon-project/cordon", Version: "v0.4.0"},
		Settings: []debug.BuildSetting{
			{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "arm64"},
			{Key: "vcs.revision", Value: "26277d8abc"}, {Key: "vcs.time", Value: "2026-12-01T21:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	tests := []struct {
		name              string
		linked, buildTime string
		bi                *debug.BuildInfo
		want              versionInfo
	}{
		{"stamped module", "dev", "", stamped, versionInfo{Version: "v0.4.0", Commit: "26277d8abc", Dirty: true,
			CommitTime: "2026-12-01T21:00:00Z", GoVersion: "go1.26.8", Platform: "linux/arm64"}},
		{"ldflags win", "1.2.3", "2026-12-01T22:00:00Z", stamped, versionInfo{Version: "1.2.3", Commit: "26277d8abc", Dirty: true,
			CommitTime: "2026-12-01T21:00:00Z", BuildTime: "2026-12-01T22:00:00Z", GoVersion: "go1.26.8", Platform: "linux/arm64"}},
		{"devel, no vcs", "dev", "", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			versionInfo{Version: "dev", Commit: "unknown", GoVersion: "go1.26.8", Platform: runtime.GOOS + "/" + runtime.GOARCH}},
		{"no build info", "", "", nil,
			versionInfo{Version: "dev", Commit: "unknown", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}},
	}
	for _, tt := range tests {
		got := buildVersion(tt.linked, tt.buildTime, tt.bi)
		if d := cmp.Diff(tt.want, got); d != "" {
			t.Errorf("%s: buildVersion diff (-want +got):\n%s", tt.name, d)
		}
	}
}

func TestVersionString(t *testing.T) {
	v := versionInfo{Version: "v0.4.0", Commit: "26277d8abc", Dirty: true, CommitTime: "2026-12-01T21:00:00Z",
		BuildTime: "2026-12-01T22:00:00Z", GoVersion: "go1.26.8", Platform: "linux/amd64"}
	want := "cordon v0.4.0\n" +
		"  commit:      26277d8abc (dirty)\n" +
		"  commit time: 2026-12-01T21:00:00Z\n" +
		"  built:       2026-12-01T22:00:00Z\n" +
		"  go:          go1.26.8 linux/amd64\n"
	if got := v.String(); got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	clean := versionInfo{Version: "dev", Commit: "unknown", GoVersion: "go1.26.8", Platform: "linux/amd64"}
	if got, want := clean.String(), "cordon dev\n  commit:      unknown\n  go:          go1.26.8 linux/amd64\n"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

// TestVersionFlagMatchesCommand runs the CLI both ways: `cordon --version`
// and `cordon version` print the same text, and `version --json` decodes
// to the same fields.
func TestVersionFlagMatchesCommand(t *testing.T) {
	run := func(args ...string) string {
		t.Helper()
		var out, errb strings.Builder
		g := &globals{stdout: &out, stderr: &errb}
		root := newRoot(g)
		root.SetArgs(args)
		root.SetOut(&out)
		root.SetErr(&errb)
		if err := root.Execute(); err != nil {
			t.Fatalf("cordon %v: %v (stderr %q)", args, err, errb.String())
		}
		return out.String()
	}
	flag, cmd := run("--version"), run("version")
	if flag != cmd || !strings.HasPrefix(flag, "cordon ") || !strings.Contains(flag, runtime.Version()) {
		t.Fatalf("--version = %q, version = %q; want the same text naming %s", flag, cmd, runtime.Version())
	}
	var v versionInfo
	if err := json.Unmarshal([]byte(run("version", "--json")), &v); err != nil {
		t.Fatalf("version --json: %v", err)
	}
	if v.String() != cmd {
		t.Errorf("version --json renders %q, want %q", v.String(), cmd)
	}
}

// TestLinkedCommit checks the link-time commit (scripts/package.sh sets
// cli.Commit) fills in a build that records no vcs.revision, and that a
// recorded revision wins.
func TestLinkedCommit(t *testing.T) {
	defer func(c string) { Commit = c }(Commit)
	Commit = "0e07e15786015f3e799f125166d4f71a81622050"
	v := currentVersion()
	bi, _ := debug.ReadBuildInfo()
	want := Commit
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			want = s.Value
		}
	}
	if v.Commit != want {
		t.Errorf("currentVersion().Commit = %q, want %q", v.Commit, want)
	}
}
