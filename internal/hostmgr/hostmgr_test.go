package hostmgr

import (
	"errors"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/hostmgr/proto"
	"github.com/cordon-project/cordon/internal/sandbox"
)

func TestDrifted(t *testing.T) {
	a := Admitted{Runtime: "sha256:aaaa", Policy: "sha256:bbbb", Rootfs: "sha256:cccc"}
	if why := drifted(a, a); why != "" {
		t.Fatalf("no change drifted: %s", why)
	}
	for name, b := range map[string]Admitted{
		"runtime": {Runtime: "sha256:xxxx", Policy: a.Policy, Rootfs: a.Rootfs},
		"policy":  {Runtime: a.Runtime, Policy: "sha256:xxxx", Rootfs: a.Rootfs},
		"rootfs":  {Runtime: a.Runtime, Policy: a.Policy, Rootfs: "sha256:xxxx"},
	} {
		if why := drifted(a, b); !strings.HasPrefix(why, name) {
			t.Errorf("%s change: %q", name, why)
		}
	}
}

func TestParseProfile(t *testing.T) {
	if p, err := parseProfile("", "", "x"); err != nil || p != SafeGuided {
		t.Fatalf("default: %v %v", p, err)
	}
	_, err := parseProfile("FULL_CONTROL_LAB", "yes", "x")
	if proto.KindOf(err) != proto.KindUnauthorized || !strings.Contains(err.Error(), AcceptPhrase("x")) {
		t.Fatalf("lab without the phrase: %v", err)
	}
	// The phrase names the sandbox: another sandbox's phrase is refused.
	if _, err := parseProfile("FULL_CONTROL_LAB", AcceptPhrase("y"), "x"); err == nil {
		t.Fatal("another sandbox's acceptance accepted")
	}
	if p, err := parseProfile("FULL_CONTROL_LAB", AcceptPhrase("x"), "x"); err != nil || p != FullControlLab {
		t.Fatalf("lab: %v %v", p, err)
	}
	if _, err := parseProfile("ROOT", "", "x"); proto.KindOf(err) != proto.KindBadRequest {
		t.Fatalf("unknown profile: %v", err)
	}
}

func TestMarkBypassedLowersTheClaim(t *testing.T) {
	rec := &evidence.Record{Boundaries: map[string]evidence.Boundary{}}
	for _, b := range evidence.Boundaries() {
		rec.Boundaries[b] = evidence.Boundary{Verified: true}
	}
	rec.LevelAdmitted, rec.EnforcementMode = evidence.Admit(rec.Boundaries)
	if rec.LevelAdmitted != sandbox.DedicatedContainer {
		t.Fatalf("setup: %v", rec.LevelAdmitted)
	}
	markBypassed(rec)
	if rec.EnforcementMode != evidence.Unverified || rec.LevelAdmitted >= sandbox.DedicatedContainer {
		t.Fatalf("after lab: %s %s", rec.EnforcementMode, rec.LevelAdmitted)
	}
	for _, b := range labUnverified {
		if rec.Boundaries[b].Verified {
			t.Errorf("%s still verified", b)
		}
	}
	if !rec.Boundaries[evidence.Process].Verified || !rec.Boundaries[evidence.Filesystem].Verified {
		t.Error("the OS boundaries lost their verdicts")
	}
}

func TestCheckIdentity(t *testing.T) {
	d := &Daemon{o: Options{Tenants: map[uint32][]string{1000: {"acme"}}}}
	cfg := func(w, tn string) []byte {
		return []byte("version: cordon/v1\nworkload: " + w + "\ntenant: " + tn + "\npurpose: p\n")
	}
	for _, c := range []struct {
		uid   uint32
		w, tn string
		ok    bool
	}{
		{0, "anything", "any", true},
		{1000, "u1000-agent", "u1000", true},
		{1000, "u1000-agent", "acme", true},
		{1000, "u1000-agent", "other", false},
		{1000, "agent", "u1000", false},
		{1000, "u10000-agent", "u1000", false},
		{1001, "u1001-x", "acme", false},
	} {
		err := d.checkIdentity(c.uid, cfg(c.w, c.tn))
		if (err == nil) != c.ok {
			t.Errorf("uid %d workload %s tenant %s: %v, want ok=%v", c.uid, c.w, c.tn, err, c.ok)
		}
	}
}

// TestToProtoKeepsFailureKind: the daemon's wire error carries the
// lifecycle's failure kind, so policy_rejected and evidence_insufficient
// reach the client as they were raised, not as the wire kind alone.
func TestToProtoKeepsFailureKind(t *testing.T) {
	tests := []struct {
		err  error
		wire string
		fk   failure.Kind
	}{
		{failure.Failf(failure.KindPolicyRejected, "bind", "refused"), proto.KindUnauthorized, failure.KindPolicyRejected},
		{failure.Failf(failure.KindEvidence, "admit", "short"), proto.KindInternal, failure.KindEvidence},
		{failure.Failf(failure.KindUsage, "spec", "bad"), proto.KindBadRequest, failure.KindUsage},
		{failure.Failf(failure.KindLeaseExhausted, "lease", "full"), proto.KindUnavailable, failure.KindLeaseExhausted},
		{errors.New("plain"), proto.KindInternal, failure.KindInternal},
	}
	for _, tt := range tests {
		pe := toProto(tt.err)
		if pe.Kind != tt.wire || pe.Failure != tt.fk || failure.KindOf(pe) != tt.fk {
			t.Errorf("toProto(%v) = %q/%q, want %q/%q", tt.err, pe.Kind, pe.Failure, tt.wire, tt.fk)
		}
	}
}
