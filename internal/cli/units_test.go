package cli

import (
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/units/unitstest"
)

// TestParseSize runs the command line's size parser (the one --memory and
// --tmp-size of run and sandbox create use) over the table package config
// is tested against too: the same text gives the same answer.
func TestParseSize(t *testing.T) {
	for _, tc := range unitstest.Sizes {
		got, err := ParseSize(tc.Text)
		if tc.Err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.Err) {
				t.Errorf("ParseSize(%q) = %d, %v, want an error containing %q", tc.Text, got, err, tc.Err)
			}
			continue
		}
		if err != nil || got != tc.Want {
			t.Errorf("ParseSize(%q) = %d, %v, want %d", tc.Text, got, err, tc.Want)
		}
	}
}

// TestRunMemoryFlag: `cordon run --memory 2.5G` reaches the spec as
// 2.5GiB, and a refused size is a usage error naming the flag.
func TestRunMemoryFlag(t *testing.T) {
	f := &runFlags{level: "DOMAIN_ISOLATED", memory: "2.5G", tmp: "1.5G"}
	spec, err := f.parseSpec([]string{"/bin/true"})
	if err != nil {
		t.Fatalf("parseSpec(--memory 2.5G) = %v", err)
	}
	if spec.Limits.MemoryBytes != 5<<29 || spec.Limits.TmpBytes != 3<<29 {
		t.Errorf("parseSpec(--memory 2.5G --tmp-size 1.5G) = %d, %d, want %d, %d", spec.Limits.MemoryBytes, spec.Limits.TmpBytes, int64(5<<29), int64(3<<29))
	}
	f.memory = "2.5"
	if _, err := f.parseSpec([]string{"/bin/true"}); err == nil || !strings.Contains(err.Error(), `--memory: size "2.5": a fraction of a byte`) {
		t.Errorf("parseSpec(--memory 2.5) = %v, want a usage error naming --memory", err)
	}
}
