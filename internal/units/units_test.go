package units_test

import (
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/units"
	"github.com/cordon-project/cordon/internal/units/unitstest"
)

func TestParse(t *testing.T) {
	for _, tc := range unitstest.Sizes {
		got, err := units.Parse(tc.Text)
		if tc.Err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.Err) {
				t.Errorf("Parse(%q) = %d, %v, want an error containing %q", tc.Text, got, err, tc.Err)
			}
			continue
		}
		if err != nil || got != tc.Want {
			t.Errorf("Parse(%q) = %d, %v, want %d", tc.Text, got, err, tc.Want)
		}
	}
}

// TestParseErrorIsUsage: a refused size is the user's mistake, of kind
// usage, and its message quotes the text and states the grammar.
func TestParseErrorIsUsage(t *testing.T) {
	_, err := units.Parse("1PB")
	if k := failure.KindOf(err); k != failure.KindUsage {
		t.Errorf("KindOf(Parse(1PB)) = %s, want %s", k, failure.KindUsage)
	}
	if want := `size "1PB": want ` + units.Grammar; err.Error() != want {
		t.Errorf("Parse(1PB) = %q, want %q", err, want)
	}
	if _, err := units.Parse("512M"); err != nil {
		t.Errorf("Parse(512M) = %v, want nil (positive control)", err)
	}
}

func TestFormatRoundTrip(t *testing.T) {
	for _, n := range []int64{0, 1, 100, 1 << 10, 1536, 3 << 29, 5 << 29, 1 << 40, 1<<40 + 1, units.Max} {
		s := units.Format(n)
		got, err := units.Parse(s)
		if err != nil || got != n {
			t.Errorf("Parse(Format(%d) = %q) = %d, %v, want %d", n, s, got, err, n)
		}
	}
	for n, want := range map[int64]string{0: "0B", 100: "100B", 2 << 30: "2GiB", 1536: "1536B", 1536 << 10: "1536KiB"} {
		if got := units.Format(n); got != want {
			t.Errorf("Format(%d) = %q, want %q", n, got, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, tc := range unitstest.Sizes {
		f.Add(tc.Text)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := units.Parse(s)
		if err != nil {
			if failure.KindOf(err) != failure.KindUsage {
				t.Fatalf("Parse(%q) error %v is not of kind usage", s, err)
			}
			return
		}
		if n < 0 || n > units.Max {
			t.Fatalf("Parse(%q) = %d, want 0..%d", s, n, units.Max)
		}
		// A size Parse accepts reads back the same through Format.
		if m, err := units.Parse(units.Format(n)); err != nil || m != n {
			t.Fatalf("Parse(Format(%d)) = %d, %v", n, m, err)
		}
	})
}
