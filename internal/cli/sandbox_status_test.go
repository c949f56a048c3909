package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/hostmgr"
	"github.com/cordon-project/cordon/internal/sandbox"
)

// The readable status names every field, counts unverified boundaries,
// shows drift, and escapes what a user or program chose.
func TestPrintStatus(t *testing.T) {
	now := time.Now()
	ev := &evidence.Record{EnforcementMode: evidence.Verified, CollectedAt: now.Add(-time.Minute),
		Boundaries: map[string]evidence.Boundary{}}
	for _, b := range evidence.Boundaries() {
		ev.Boundaries[b] = evidence.Boundary{Verified: b != evidence.Network}
	}
	r := statusReply{
		Info: hostmgr.Info{Name: "dev\x1b[2J", ID: "sb-1", Owner: 0, State: "running", Profile: "SAFE_GUIDED", Level: "DEDICATED_CONTAINER",
			Created: now.Add(-2 * time.Minute), Drain: "policy changed", Argv: []string{"/bin/sh", "-c", "echo hi"},
			Admitted: hostmgr.Admitted{Runtime: "sha256:0123456789abcdef"}},
		Limits:        sandbox.Limits{MemoryBytes: 2 << 30, Pids: 64},
		GatewayRoutes: []string{"ANTHROPIC_BASE_URL=http://127.0.0.1:1", "HTTPS_PROXY=http://127.0.0.1:2"},
		Evidence:      ev,
	}
	var b bytes.Buffer
	printStatus(&b, r, now)
	out := b.String()
	for _, want := range []string{"Name:", `dev\u001b[2J`, "ID:", "sb-1", "State:", "running", "Owner:", "root (uid 0)", "Profile:", "Level:", "DEDICATED_CONTAINER",
		"Created:", "(2m ago)", "Started:", "(1m ago)", "Program:", `"/bin/sh" "-c" "echo hi"`, "Limits:", "memory 2GiB, pids 64, cpus all, tmp 1GiB (default)",
		"Gateway:", "ANTHROPIC_BASE_URL=http://127.0.0.1:1", "HTTPS_PROXY=http://127.0.0.1:2", "Evidence:", "5 of 6 boundaries verified", "unverified: network",
		"Drift:", "DRAINING: policy changed", "runtime 0123456789ab"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
	if strings.ContainsRune(out, 0x1b) {
		t.Errorf("status output carries a raw escape:\n%q", out)
	}
	// Positive control: a sandbox not started yet says so.
	b.Reset()
	printStatus(&b, statusReply{Info: hostmgr.Info{Name: "x", State: "created"}}, now)
	for _, want := range []string{"Started:", "not started", "Evidence:", "none yet", "Gateway:", "none (no way out)", "Drift:", "none"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("created status lacks %q:\n%s", want, b.String())
		}
	}
}
