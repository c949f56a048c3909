package sandbox

import (
	"errors"
	"testing"

	"github.com/cordon-project/cordon/internal/failure"
)

func TestParseLevel(t *testing.T) {
	for _, l := range Levels() {
		got, err := ParseLevel(l.String())
		if err != nil || got != l {
			t.Errorf("ParseLevel(%q) = %v, %v, want %v", l.String(), got, err, l)
		}
	}
	if got, err := ParseLevel("dedicated_container"); err != nil || got != DedicatedContainer {
		t.Errorf("ParseLevel(lower case) = %v, %v", got, err)
	}
	for _, bad := range []string{"", "VM", "UNKNOWN", "DEDICATED"} {
		if _, err := ParseLevel(bad); err == nil {
			t.Errorf("ParseLevel(%q) = nil error, want an error", bad)
		}
	}
}

func TestLevelOrder(t *testing.T) {
	ls := Levels()
	for i := 1; i < len(ls); i++ {
		if ls[i-1] >= ls[i] {
			t.Fatalf("levels not ordered: %v >= %v", ls[i-1], ls[i])
		}
	}
}

// Selection fails closed: a provider whose probed maximum is below the
// request is never chosen, and there is no fallback.
func TestSelectFailsClosed(t *testing.T) {
	weak := Candidate{Capability: Capability{Provider: "weak", MaxLevel: DomainIsolated}}
	strong := Candidate{Capability: Capability{Provider: "strong", MaxLevel: DedicatedContainer}}
	tests := []struct {
		want  Level
		cands []Candidate
		got   string
		kind  failure.Kind
	}{
		{DedicatedContainer, []Candidate{weak, strong}, "strong", ""},
		{DomainIsolated, []Candidate{weak, strong}, "weak", ""},
		{DedicatedContainer, []Candidate{weak}, "", failure.KindPolicyRejected},
		{DedicatedVM, []Candidate{weak, strong}, "", failure.KindPolicyRejected},
		{LevelUnknown, []Candidate{strong}, "", failure.KindUsage},
		{Shared, nil, "", failure.KindPolicyRejected},
	}
	for _, tt := range tests {
		c, err := Select(tt.want, tt.cands)
		if c.Capability.Provider != tt.got || (tt.kind != "" && failure.KindOf(err) != tt.kind) || (tt.kind == "" && err != nil) {
			t.Errorf("Select(%v) = %q, %v, want %q, kind %q", tt.want, c.Capability.Provider, err, tt.got, tt.kind)
		}
	}
	if _, err := Select(DedicatedContainer, []Candidate{weak}); !errors.Is(err, ErrNoProvider) {
		t.Errorf("Select below = %v, want ErrNoProvider", err)
	}
}
