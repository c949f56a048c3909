package failure

import (
	"errors"
	"fmt"
	"testing"
)

type carried struct{ k Kind }

func (c carried) Error() string     { return "carried" }
func (c carried) FailureKind() Kind { return c.k }

func TestKindOf(t *testing.T) {
	tests := []struct {
		err  error
		want Kind
	}{
		{Failf(KindTimeout, "op", "x"), KindTimeout},
		{fmt.Errorf("wrapped: %w", Fail(KindPolicyRejected, "bind", errors.New("no"))), KindPolicyRejected},
		{errors.New("plain"), KindInternal},
		{fmt.Errorf("hop: %w", carried{KindEvidence}), KindEvidence},
		// A kind outside the closed set is not trusted from a carrier.
		{carried{Kind("made_up")}, KindInternal},
		{nil, KindInternal},
	}
	for _, tt := range tests {
		if got := KindOf(tt.err); got != tt.want {
			t.Errorf("KindOf(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
	for k := range kinds {
		if !Known(k) {
			t.Errorf("Known(%q) = false", k)
		}
	}
}
