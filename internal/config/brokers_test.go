package config

import (
	"strings"
	"testing"
)

// limits.default_max_output_tokens is read, bounded, and handed to the
// model broker's configuration; absent, the broker's default applies (0).
func TestDefaultMaxOutputTokens(t *testing.T) {
	for _, tc := range []struct {
		name, limits string
		want         int64
		err          string
	}{
		{"absent", "", 0, ""},
		{"set", "limits:\n  default_max_output_tokens: 2048\n", 2048, ""},
		{"largest", "limits:\n  default_max_output_tokens: 10_000_000\n", 10_000_000, ""},
		{"zero", "limits:\n  default_max_output_tokens: 0\n", 0, "limits.default_max_output_tokens"},
		{"too large", "limits:\n  default_max_output_tokens: 10000001\n", 0, "limits.default_max_output_tokens"},
		{"not an integer", "limits:\n  default_max_output_tokens: 1.5\n", 0, "want an integer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(head+tc.limits), "t.yaml")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Parse = %v, want an error naming %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := c.ModelConfig().Limits.DefaultMaxOutputTokens; got != tc.want {
				t.Fatalf("ModelConfig().Limits.DefaultMaxOutputTokens = %d, want %d", got, tc.want)
			}
		})
	}
}
