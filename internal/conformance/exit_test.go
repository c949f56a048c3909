package conformance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/conformance/record"
)

func TestExitStatus(t *testing.T) {
	res := func(c record.Class, v record.Verdict) record.ProbeResult {
		return record.ProbeResult{Class: c, Verdict: v}
	}
	all := func(v record.Verdict) []record.ProbeResult {
		var out []record.ProbeResult
		for _, c := range record.Classes() {
			out = append(out, res(c, v))
		}
		return out
	}
	tests := []struct {
		name string
		r    Report
		want int
	}{
		{"every class passes", Report{Full: true, Results: all(record.Pass)}, ExitPass},
		{"one fail", Report{Full: true, Results: append(all(record.Pass), res(record.Bypass, record.Fail))}, ExitFail},
		{"a class missing", Report{Full: true, Results: all(record.Pass)[1:]}, ExitIncomplete},
		{"all not evidenced", Report{Full: true, Results: all(record.NotEvidenced)}, ExitIncomplete},
		{"partial: its class passes", Report{Results: []record.ProbeResult{res(record.Bypass, record.Pass)}}, ExitPass},
		{"partial: nothing passed", Report{Results: []record.ProbeResult{res(record.Bypass, record.NotEvidenced)}}, ExitIncomplete},
		{"partial: a selected class without pass", Report{Results: []record.ProbeResult{res(record.Bypass, record.Pass), res(record.Failure, record.NotEvidenced)}}, ExitIncomplete},
		{"nothing ran", Report{}, ExitIncomplete},
	}
	for _, tc := range tests {
		if got := tc.r.ExitStatus(); got != tc.want {
			t.Errorf("%s: ExitStatus = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// A provider that cannot evidence the level requested runs no probe:
// each is not evidenced with the reason, never run (the probe's Run
// would fail the test).
func TestCannotEvidenceRunsNothing(t *testing.T) {
	Register(Probe{ID: "bypass.test-only.never-run", Class: record.Bypass, Clause: "c", Title: "t",
		Run: func(context.Context, *Env) Outcome { t.Error("the probe ran"); return Outcome{} }})
	rep, err := Run(context.Background(), Options{Bin: "/nonexistent/cordon", Only: []string{"bypass.test-only.never-run"},
		Dir: t.TempDir(), CannotEvidence: "provider x evidences at most SHARED here"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 1 || rep.Results[0].Verdict != record.NotEvidenced || rep.Results[0].Reason == "" {
		t.Fatalf("results = %+v, want one not_evidenced with its reason", rep.Results)
	}
	if rep.Baseline != nil || rep.BaselineError == "" {
		t.Errorf("baseline = %v, %q: want none, and why", rep.Baseline, rep.BaselineError)
	}
	if rep.ExitStatus() != ExitIncomplete {
		t.Errorf("exit status %d, want %d", rep.ExitStatus(), ExitIncomplete)
	}
}

// A scratch directory too deep for the sockets the suite's sandboxes make
// under it is refused before anything runs; a short one is not.
func TestScratchDirTooDeep(t *testing.T) {
	Register(Probe{ID: "bypass.test-only.depth", Class: record.Bypass, Clause: "c", Title: "t",
		Run: func(context.Context, *Env) Outcome { return Outcome{} }})
	o := Options{Bin: "/nonexistent/cordon", Only: []string{"bypass.test-only.depth"}, CannotEvidence: "x"}
	o.Dir = "/" + strings.Repeat("d", maxSocketPath-len(longestSocket))
	if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), "TMPDIR") {
		t.Fatalf("Run in %d-byte dir = %v, want a refusal naming TMPDIR", len(o.Dir), err)
	}
	o.Dir = t.TempDir()
	if _, err := Run(context.Background(), o); err != nil {
		t.Fatalf("control: Run in %s: %v", o.Dir, err)
	}
}

// The progress line goes to the operator's terminal as each probe ends:
// a reason carries what the sandbox influenced (a program's stderr in a
// broken run, a fact's observed value), so its control characters are
// escaped, never written raw.
func TestProgressEscapesReason(t *testing.T) {
	hostile := "program said \x1b]0;owned\x07\x1b[2J\rPASS"
	Register(Probe{ID: "bypass.test-only.progress", Class: record.Bypass, Clause: "c", Title: "t",
		Run: func(context.Context, *Env) Outcome { return Outcome{Err: errors.New(hostile)} }})
	var buf strings.Builder
	rep, err := Run(context.Background(), Options{Bin: "/nonexistent/cordon", Only: []string{"bypass.test-only.progress"},
		Dir: t.TempDir(), Progress: &buf})
	if err != nil {
		t.Fatal(err)
	}
	// Control: the hostile text did reach the reason the line prints.
	if len(rep.Results) != 1 || !strings.Contains(rep.Results[0].Reason, "\x1b]0;owned") {
		t.Fatalf("results = %+v, want the probe's error in its reason", rep.Results)
	}
	if strings.ContainsAny(buf.String(), "\x1b\x07\r") {
		t.Errorf("progress line carries raw control characters: %q", buf.String())
	}
	if !strings.Contains(buf.String(), "owned") {
		t.Errorf("progress line %q lost the reason", buf.String())
	}
}

// A probe's error is downgraded to not_evidenced for want of a gateway
// only when cordon itself (its --json outcome on fd 3) refused the
// gateway during the probe: an error carrying the same words from what
// the program printed (cordon run's stderr) stays a fail.
func TestNoGatewayNeedsCordonsRefusal(t *testing.T) {
	Register(Probe{ID: "bypass.test-only.nogw-forged", Class: record.Bypass, Clause: "c", Title: "t",
		Run: func(context.Context, *Env) Outcome {
			return Outcome{Err: errors.New("the run (exit 1) did not run the probe: program stderr: the sandbox " + NoGateway)}
		}})
	Register(Probe{ID: "bypass.test-only.nogw-real", Class: record.Bypass, Clause: "c", Title: "t",
		Run: func(ctx context.Context, e *Env) Outcome {
			r, err := e.Run(ctx, RunOpts{Argv: []string{"true"}})
			if err != nil {
				return Outcome{Err: err}
			}
			return Outcome{Err: fmt.Errorf("the run (exit %d) did not run the probe: %s", r.Code, r.Stderr)}
		}})
	Register(Probe{ID: "bypass.test-only.nogw-held", Class: record.Bypass, Clause: "c", Title: "t",
		Run: func(ctx context.Context, e *Env) Outcome {
			_, err := e.Start(ctx, RunOpts{Op: []string{"hold", "ids"}})
			return Outcome{Err: err}
		}})
	bin := filepath.Join(t.TempDir(), "cordon")
	script := "#!/bin/sh\necho '{\"failure_kind\":\"start_failed\",\"error\":\"gateway: the sandbox " + NoGateway + "\"}' >&3\necho 'cordon: gateway: the sandbox " + NoGateway + "' >&2\nexit 125\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	rep, err := Run(context.Background(), Options{Bin: bin, Only: []string{"bypass.test-only.nogw-forged", "bypass.test-only.nogw-real", "bypass.test-only.nogw-held"}, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]record.Verdict{}
	for _, r := range rep.Results {
		got[r.ID] = r.Verdict
	}
	if got["bypass.test-only.nogw-forged"] != record.Fail {
		t.Errorf("forged refusal: verdict %q, want fail", got["bypass.test-only.nogw-forged"])
	}
	for _, id := range []string{"bypass.test-only.nogw-real", "bypass.test-only.nogw-held"} {
		if got[id] != record.NotEvidenced {
			t.Errorf("control: cordon's own refusal (%s): verdict %q, want not_evidenced", id, got[id])
		}
	}
}
