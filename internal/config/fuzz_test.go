package config

import (
	"errors"
	"testing"
)

// FuzzParse checks that Parse never panics, that it returns a Config or
// an *Error, and that an accepted Config keeps its invariants. Seeds are
// the examples (testdata/fuzz/FuzzParse).
func FuzzParse(f *testing.F) {
	f.Add([]byte(head))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b, "fuzz.yaml")
		if err != nil {
			var e *Error
			if c != nil || !errors.As(err, &e) {
				t.Fatalf("Parse = %v, %v; want nil and an *Error", c, err)
			}
			return
		}
		if c.Version != Version || c.Workload == "" || c.Tenant == "" || c.Purpose == "" {
			t.Fatalf("accepted %+v", c)
		}
		for _, r := range c.Egress.Allow {
			if r.Host == "" || len(r.Ports) == 0 {
				t.Fatalf("accepted rule %+v", r)
			}
		}
		for _, m := range c.Models {
			if m.UpstreamURL == nil || len(m.Models) == 0 {
				t.Fatalf("accepted model %+v", m)
			}
			if _, ok := c.Secrets[m.Credential]; !ok {
				t.Fatalf("model %s credential %q undeclared", m.Name, m.Credential)
			}
		}
		for n, s := range c.Secrets {
			if (s.Env == "") == (s.File == "") {
				t.Fatalf("secret %s = %+v", n, s)
			}
		}
		if c.Limits.MaxRequestBytes <= 0 || c.Limits.MaxResponseBytes <= 0 || c.Limits.MaxAttachmentBytes <= 0 {
			t.Fatalf("limits %+v", c.Limits)
		}
		// The crossing bounds can never be switched off.
		if c.Crossings.MaxReceipts <= 0 || c.Crossings.Rate <= 0 || c.Crossings.Burst <= 0 {
			t.Fatalf("crossings %+v", c.Crossings)
		}
	})
}
