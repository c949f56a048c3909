package launch_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/launch"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/sandbox/fake"
	"github.com/cordon-project/cordon/internal/testkit"
)

// run drives the lifecycle the way cordon run does (package cli): one
// Launch, Provision → Start (admission enforced) → StartGateway → Exec →
// Wait → ScanTraps → Close.
func run(t *testing.T, h *launch.Host, spec sandbox.Spec, plan *launch.Plan) (sandbox.Exit, *launch.Launch, error) {
	t.Helper()
	ctx := context.Background()
	l, err := launch.Provision(ctx, h, spec, plan)
	if err != nil {
		return sandbox.Exit{}, nil, err
	}
	defer l.Close(ctx)
	if err := l.Start(ctx, nil, true); err != nil {
		return sandbox.Exit{}, l, err
	}
	if err := l.StartGateway(ctx); err != nil {
		return sandbox.Exit{}, l, err
	}
	if err := l.Exec(ctx); err != nil {
		return sandbox.Exit{}, l, err
	}
	ex, err := l.Wait(ctx)
	_ = l.ScanTraps(ctx)
	return ex, l, err
}

// A second provider goes through the run path: the fake's program runs
// (its output and the file it writes are observed here) when SHARED is
// asked for, admitted from the fake's own evidence record.
func TestFakeProviderThroughRunPath(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	var out bytes.Buffer
	p := &fake.Provider{}
	ex, l, err := run(t, &launch.Host{Provider: p}, sandbox.Spec{Level: sandbox.Shared,
		Argv: []string{"/bin/sh", "-c", `echo "hello $WHO" && : > "$0"; exit 3`, marker}, Env: []string{"WHO=fake"}, Stdout: &out}, nil)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if ex.Code != 3 || out.String() != "hello fake\n" {
		t.Errorf("exit %+v output %q, want exit 3 and %q", ex, out.String(), "hello fake\n")
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the program did not run: %v", err)
	}
	if l.Level != sandbox.Shared || l.Record == nil || l.Record.Provider.Name != fake.Name || l.Record.LevelRequested != sandbox.Shared {
		t.Errorf("admitted %v with record %+v, want SHARED from the fake's record", l.Level, l.Record)
	}
}

// Asking the fake for a level it cannot evidence fails closed, observed
// as the typed failure, and the program never runs: selection refuses a
// provider whose capability is below the level (nothing provisioned); a
// provider that overstates its capability is refused at admission by its
// own evidence (evidence_insufficient); a provider whose summary
// disagrees with its record is judged by the record.
func TestFakeProviderCannotEvidenceMore(t *testing.T) {
	tests := []struct {
		name        string
		p           *fake.Provider
		kind        failure.Kind
		provisioned int
	}{
		{"capability below the level", &fake.Provider{}, failure.KindUnsupported, 0},
		{"capability overstated", &fake.Provider{ClaimLevel: sandbox.DedicatedContainer}, failure.KindEvidence, 1},
		{"summary overstated", &fake.Provider{ClaimLevel: sandbox.DedicatedContainer, SummaryLevel: sandbox.DedicatedContainer}, failure.KindEvidence, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			marker := filepath.Join(t.TempDir(), "ran")
			_, _, err := run(t, &launch.Host{Provider: tt.p}, sandbox.Spec{Level: sandbox.DedicatedContainer,
				Argv: []string{"/bin/sh", "-c", `: > "$0"`, marker}}, nil)
			if got := failure.KindOf(err); got != tt.kind {
				t.Fatalf("run at DEDICATED_CONTAINER = %v (kind %q), want kind %q", err, got, tt.kind)
			}
			if _, serr := os.Stat(marker); serr == nil {
				t.Errorf("the program ran although it was refused (%v)", err)
			}
			if n := tt.p.Provisioned(); n != tt.provisioned {
				t.Errorf("%d sandboxes provisioned, want %d", n, tt.provisioned)
			}
		})
	}
}

// Admit is the one rule: the record's level, never above it, and no
// record is no admission.
func TestAdmitFromTheRecord(t *testing.T) {
	ctx := context.Background()
	sb, _ := (&fake.Provider{SummaryLevel: sandbox.DedicatedContainer}).Provision(ctx, sandbox.Spec{Argv: []string{"/bin/true"}})
	adm, err := sb.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lvl, err := launch.Admit(adm, sandbox.Shared); err != nil || lvl != sandbox.Shared {
		t.Errorf("Admit(summary DEDICATED_CONTAINER, record SHARED) for SHARED = %v, %v; want SHARED", lvl, err)
	}
	if _, err := launch.Admit(adm, sandbox.DomainIsolated); failure.KindOf(err) != failure.KindEvidence {
		t.Errorf("Admit above the record = %v, want evidence_insufficient", err)
	}
	adm.Record = nil
	if _, err := launch.Admit(adm, sandbox.Shared); failure.KindOf(err) != failure.KindEvidence {
		t.Errorf("Admit without a record = %v, want evidence_insufficient", err)
	}
}

// A refusal names each failed check (fact, want, got) of each unverified
// boundary, and no check that held, so the cause is in stderr alone.
func TestAdmitNamesTheFailedChecks(t *testing.T) {
	b := map[string]evidence.Boundary{}
	for _, n := range evidence.Boundaries() {
		b[n] = evidence.Boundary{Verified: true, Facts: []evidence.Check{{Name: n + "_fact", OK: true, Want: "w", Got: "w"}}}
	}
	b[evidence.Network] = evidence.Boundary{Facts: []evidence.Check{
		{Name: "net_namespace", Want: "differs from host net:[1]", Got: "net:[1]"},
		{Name: "interfaces", OK: true, Want: "lo only", Got: "lo"},
		{Name: "ipv6_routes", Want: "none but loopback", Got: "non-loopback routes: [eth0]"},
	}}
	b[evidence.IPC] = evidence.Boundary{}
	adm := sandbox.Admission{Level: sandbox.DedicatedRuntime, Record: &evidence.Record{LevelAdmitted: sandbox.DedicatedRuntime, Boundaries: b}}
	_, err := launch.Admit(adm, sandbox.DedicatedContainer)
	if failure.KindOf(err) != failure.KindEvidence {
		t.Fatalf("Admit = %v, want evidence_insufficient", err)
	}
	msg := err.Error()
	for _, want := range []string{
		`network (net_namespace: want "differs from host net:[1]", got "net:[1]"; ipv6_routes: want "none but loopback", got "non-loopback routes: [eth0]")`,
		"ipc (no facts)",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("Admit error %q does not contain %q", msg, want)
		}
	}
	if strings.Contains(msg, "interfaces") || strings.Contains(msg, "_fact") {
		t.Errorf("Admit error %q names checks that held", msg)
	}
}

// A sandbox without a leased identity gets no gateway: the lifecycle
// refuses (start_failed) instead of running it under a shared uid, and
// the program never runs.
func TestNoGatewayWithoutALease(t *testing.T) {
	plan, err := launch.DetachedPlan(launch.Detached{Source: "test.yaml", Config: []byte("version: cordon/v1\nworkload: demo\ntenant: acme\npurpose: coding\n")}, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(t.TempDir(), "ran")
	_, _, err = run(t, &launch.Host{Provider: &fake.Provider{}}, sandbox.Spec{Level: sandbox.Shared,
		Argv: []string{"/bin/sh", "-c", `: > "$0"`, marker}}, plan)
	if failure.KindOf(err) != failure.KindStart || !strings.Contains(err.Error(), "leased identity") {
		t.Fatalf("run with a gateway on the fake = %v, want start_failed for the missing lease", err)
	}
	if _, serr := os.Stat(marker); serr == nil {
		t.Error("the program ran without its gateway")
	}
}

// The fake is for tests only: the cordon binary does not contain it.
func TestNotInTheBinary(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/cordon-project/cordon/cmd/cordon").CombinedOutput()
	if err != nil {
		testkit.Unavailable(t, "go list: %v: %s", err, out)
	}
	if !strings.Contains(string(out), "internal/launch\n") {
		t.Fatalf("positive control: cmd/cordon does not depend on internal/launch:\n%s", out)
	}
	if strings.Contains(string(out), "internal/sandbox/fake") {
		t.Error("cmd/cordon depends on the fake provider")
	}
	// Positive control: the test build registers the fake (package
	// sandbox/registry, fake_on.go), so this check would see it.
	out, err = exec.Command("go", "list", "-tags", "cordon_testhooks", "-deps", "github.com/cordon-project/cordon/cmd/cordon").CombinedOutput()
	if err != nil {
		testkit.Unavailable(t, "go list: %v: %s", err, out)
	}
	if !strings.Contains(string(out), "internal/sandbox/fake\n") {
		t.Error("positive control: the cordon_testhooks build of cmd/cordon does not depend on the fake provider")
	}
}
