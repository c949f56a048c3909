package conformance

import (
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/conformance/record"
)

// TestProgressLineIsTerminalSafe: a failing probe's reason quotes the fact
// it observed (say, the content of a host file the sandbox managed to
// write); the progress line on the operator's terminal carries no escape
// sequence from it. The control: the plain text is kept.
func TestProgressLineIsTerminalSafe(t *testing.T) {
	r := record.ProbeResult{ID: "bypass.x", Verdict: record.Fail, Reason: "marker: got \x1b]52;c;ZWNobyBwd25lZA==\x07\x1b[2Jowned\u202e, want absent"}
	l := progressLine(r)
	if strings.ContainsAny(l, "\x1b\x07\u202e") {
		t.Fatalf("progress line passes a terminal control: %q", l)
	}
	if !strings.Contains(l, "FAIL") || !strings.Contains(l, "bypass.x") || !strings.Contains(l, "owned") {
		t.Errorf("control: %q", l)
	}
}
