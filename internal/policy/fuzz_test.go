package policy

import (
	"errors"
	"strings"
	"testing"
)

// FuzzLoad checks that loading a policy file never panics (the Cedar
// parser and the experimental validator included), that a refusal is made
// only of *LoadErrors matching ErrInvalid, and that an accepted set has a
// digest and decides without panicking. Seeds are in
// testdata/fuzz/FuzzLoad: the examples, and files with one error each.
func FuzzLoad(f *testing.F) {
	f.Add([]byte(defaultSource))
	f.Add([]byte(decideSet))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := build([]source{{name: "fuzz.cedar", data: b}})
		if err != nil {
			if s != nil {
				t.Fatalf("build = %v, %v; want nil with an error", s, err)
			}
			for _, e := range flatten(err) {
				var le *LoadError
				if !errors.As(e, &le) && !strings.HasPrefix(e.Error(), "and ") {
					t.Fatalf("build error %T %v; want *LoadError", e, e)
				}
				if le != nil && !errors.Is(le, ErrInvalid) {
					t.Fatalf("build error %v does not match ErrInvalid", le)
				}
			}
			return
		}
		if !strings.HasPrefix(s.Digest(), "sha256:") || s.Len() != len(s.byID) {
			t.Fatalf("accepted set: digest %q, %d policies, %d ids", s.Digest(), s.Len(), len(s.byID))
		}
		for _, r := range allActions() {
			allow, d := s.Decide(r)
			if allow && len(d.Errors) > 0 {
				t.Fatalf("Decide(%+v) = allow with errors %v", r, d.Errors)
			}
			if d.ApprovalRequired && !allow {
				t.Fatalf("Decide(%+v) = deny requiring approval", r)
			}
			_ = s.Explain(r)
		}
	})
}
