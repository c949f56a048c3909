package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/units"
	"github.com/cordon-project/cordon/internal/units/unitstest"
)

// TestSizesMatchCommandLine parses every text of the shared size table as
// a configuration file's size (budgets.egress_bytes): it gives the bytes,
// or the very error, that package units and so the command line's
// --memory give for the same text. A text is written as a plain YAML
// scalar (so 4096 arrives as an !!int and 1.5 as a !!float) unless it
// needs quoting to keep its blanks.
func TestSizesMatchCommandLine(t *testing.T) {
	for _, tc := range unitstest.Sizes {
		val := tc.Text
		if val == "" || val != strings.TrimSpace(val) {
			val = fmt.Sprintf("%q", val)
		}
		c, err := Parse([]byte(head+"budgets:\n  egress_bytes: "+val+"\n"), "s.yaml")
		want, wantErr := units.Parse(tc.Text)
		if wantErr != nil {
			var e *Error
			if !errors.As(err, &e) || e.Field != "budgets.egress_bytes" || e.Msg != wantErr.Error() || !strings.Contains(e.Msg, tc.Err) {
				t.Errorf("egress_bytes: %s: Parse = %v, want budgets.egress_bytes: %v", val, err, wantErr)
			}
			continue
		}
		if err != nil || c.Budgets.EgressBytes != want || want != tc.Want {
			t.Errorf("egress_bytes: %s: Parse = %v, want %d (units.Parse %d)", val, err, tc.Want, want)
			continue
		}
	}
}

// TestSizeFieldsShareTheGrammar: a fractional size with a unit — refused
// in a file before — is read the same in a limit, a tool's memory and the
// state quota as in a budget.
func TestSizeFieldsShareTheGrammar(t *testing.T) {
	c, err := Parse([]byte(head+"limits:\n  max_request_bytes: 1.5M\nstate:\n  quota_bytes: 2.5M\n"), "s.yaml")
	if err != nil {
		t.Fatalf("Parse = %v", err)
	}
	if c.Limits.MaxRequestBytes != 3<<19 || c.State.QuotaBytes != 5<<19 {
		t.Errorf("max_request_bytes 1.5M, quota_bytes 2.5M = %d, %d; want %d, %d", c.Limits.MaxRequestBytes, c.State.QuotaBytes, 3<<19, 5<<19)
	}
}
