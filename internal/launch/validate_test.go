package launch

import (
	"math"
	"os"
	"testing"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/sandbox"
)

// Every check refuses what it names, with the failure kind the caller
// shows (usage: exit 125 with the flag named; policy_rejected for a level
// no provider may evidence); a valid spec passes them all.
func TestValidateChecks(t *testing.T) {
	ok := func() sandbox.Spec {
		return sandbox.Spec{Argv: []string{"/bin/true"}, Level: sandbox.DedicatedContainer}
	}
	f, err := os.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tests := []struct {
		name  string
		edit  func(*sandbox.Spec)
		check string
		kind  failure.Kind
	}{
		{"valid", func(*sandbox.Spec) {}, "", ""},
		{"idle sandbox", func(s *sandbox.Spec) { s.Argv = nil }, "", ""},
		{"descriptor bind", func(s *sandbox.Spec) { s.Binds = []sandbox.Bind{{File: f, Target: "/x"}} }, "", ""},
		{"no level", func(s *sandbox.Spec) { s.Level = sandbox.LevelUnknown }, "level", failure.KindUsage},
		{"DEDICATED_VM", func(s *sandbox.Spec) { s.Level = sandbox.DedicatedVM }, "level", failure.KindPolicyRejected},
		{"level out of range", func(s *sandbox.Spec) { s.Level = 42 }, "level", failure.KindUsage},
		{"NUL in argv", func(s *sandbox.Spec) { s.Argv = []string{"/bin/echo", "a\x00b"} }, "argv", failure.KindUsage},
		{"empty program", func(s *sandbox.Spec) { s.Argv = []string{""} }, "argv", failure.KindUsage},
		{"env without =", func(s *sandbox.Spec) { s.Env = []string{"NOEQUALS"} }, "env", failure.KindUsage},
		{"env empty key", func(s *sandbox.Spec) { s.Env = []string{"=v"} }, "env", failure.KindUsage},
		{"env NUL", func(s *sandbox.Spec) { s.Env = []string{"K=a\x00"} }, "env", failure.KindUsage},
		{"workspace relative", func(s *sandbox.Spec) { s.Workspace = "rel" }, "workspace", failure.KindUsage},
		{"workspace both", func(s *sandbox.Spec) { s.Workspace, s.WorkspaceFile = "/w", f }, "workspace", failure.KindUsage},
		{"bind relative", func(s *sandbox.Spec) { s.Binds = []sandbox.Bind{{Source: "rel", Target: "/x"}} }, "binds", failure.KindUsage},
		{"bind target relative", func(s *sandbox.Spec) { s.Binds = []sandbox.Bind{{Source: "/opt", Target: "x"}} }, "binds", failure.KindUsage},
		{"bind both", func(s *sandbox.Spec) { s.Binds = []sandbox.Bind{{Source: "/opt", File: f, Target: "/x"}} }, "binds", failure.KindUsage},
		{"rootfs relative", func(s *sandbox.Spec) { s.Rootfs = "rel" }, "rootfs", failure.KindUsage},
		{"rootfs both", func(s *sandbox.Spec) { s.Rootfs, s.RootfsFile = "/r", f }, "rootfs", failure.KindUsage},
		{"memory small", func(s *sandbox.Spec) { s.Limits.MemoryBytes = 1024 }, "memory", failure.KindUsage},
		{"memory huge", func(s *sandbox.Spec) { s.Limits.MemoryBytes = 1 << 51 }, "memory", failure.KindUsage},
		{"tmp small", func(s *sandbox.Spec) { s.Limits.TmpBytes = 1024 }, "tmp", failure.KindUsage},
		{"pids negative", func(s *sandbox.Spec) { s.Limits.Pids = -5 }, "pids", failure.KindUsage},
		{"pids small", func(s *sandbox.Spec) { s.Limits.Pids = 3 }, "pids", failure.KindUsage},
		{"pids huge", func(s *sandbox.Spec) { s.Limits.Pids = 1 << 23 }, "pids", failure.KindUsage},
		{"cpus negative", func(s *sandbox.Spec) { s.Limits.CPUs = -1 }, "cpus", failure.KindUsage},
		{"cpus NaN", func(s *sandbox.Spec) { s.Limits.CPUs = math.NaN() }, "cpus", failure.KindUsage},
		{"cpus Inf", func(s *sandbox.Spec) { s.Limits.CPUs = math.Inf(1) }, "cpus", failure.KindUsage},
		{"cpus tiny", func(s *sandbox.Spec) { s.Limits.CPUs = 0.001 }, "cpus", failure.KindUsage},
		{"timeout negative", func(s *sandbox.Spec) { s.Limits.Timeout = -1 }, "timeout", failure.KindUsage},
	}
	byName := map[string]func(*sandbox.Spec) error{}
	for _, c := range specChecks {
		byName[c.name] = c.check
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := ok()
			tt.edit(&s)
			err := Validate(&s)
			if tt.check == "" {
				if err != nil {
					t.Fatalf("Validate(%s) = %v, want nil", tt.name, err)
				}
				return
			}
			if got := failure.KindOf(err); err == nil || got != tt.kind {
				t.Fatalf("Validate(%s) = %v (kind %q), want kind %q", tt.name, err, got, tt.kind)
			}
			// The named check is the one that refuses: alone, it fails too.
			check, found := byName[tt.check]
			if !found {
				t.Fatalf("no check named %q", tt.check)
			}
			if err := check(&s); err == nil {
				t.Errorf("check %s(%s) = nil, want a refusal", tt.check, tt.name)
			}
		})
	}
}
