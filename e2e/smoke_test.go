package e2e

import (
	"testing"

	"github.com/cordon-project/cordon/internal/testkit"
)

func TestSmokeEcho(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	r := cordon(t, cordonBin, st, "run", "--json", "--", "/bin/echo", "hello")
	if r.Code != 0 || r.Outcome.LevelAdmitted != "DEDICATED_CONTAINER" || r.Outcome.EnforcementMode != "VERIFIED" {
		t.Fatalf("cordon run echo = %d, %+v\nstderr: %s", r.Code, r.Outcome, r.Stderr)
	}
	p := cordon(t, cordonBin, st, probeArgs(nil, "ids")...)
	if p.Code != 0 || !p.Probe.OK || p.Probe.Data != "uid=1000 gid=1000 euid=1000 groups=[]" {
		t.Fatalf("probe ids = %d %+v\nstderr: %s", p.Code, p.Probe, p.Stderr)
	}
}
