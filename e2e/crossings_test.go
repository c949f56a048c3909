package e2e

import (
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/testkit"
)

// A sandbox hammering state reads reaches its receipt bound: afterwards
// the store holds at most the bound plus the marker and the refusal
// count for it, the reads past it were refused (429), and a second
// sandbox of the same workload is unaffected (control: its reads pass
// and are receipted).
func TestCrossingsReceiptBound(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	const bound = 30
	cfg := stateConfig(t, "bound-e2e", "testing", "state: {quota_bytes: 1500, quota_entries: 10, max_value_bytes: 1KiB}\ncrossings: {max_receipts: 30}\n")
	hammer := `curl -sS -o /dev/null -X PUT --data-binary x "$CORDON_STATE_URL/notes/a"; ` +
		`for i in $(seq 120); do curl -sS -o /dev/null -w '%{http_code}\n' --max-time 10 "$CORDON_STATE_URL/notes/a"; done | sort | uniq -c`
	a := cordon(t, cordonBin, st, "run", "--json", "--config", cfg, "--", "/bin/sh", "-c", hammer)
	if a.Code != 0 || a.Outcome.SandboxID == "" {
		t.Fatalf("sandbox A = %d\nstdout: %s\nstderr: %s", a.Code, a.Stdout, a.Stderr)
	}
	// The put and 29 reads fit; 91 reads are refused.
	if !strings.Contains(a.Stdout, "29 200") || !strings.Contains(a.Stdout, "91 429") {
		t.Fatalf("sandbox A's reads: %s, want 29 answered (200) and 91 refused (429)", a.Stdout)
	}
	b := cordon(t, cordonBin, st, "run", "--json", "--config", cfg, "--", "/bin/sh", "-c",
		`for i in 1 2 3; do curl -sS -o /dev/null -w '%{http_code}\n' --max-time 10 "$CORDON_STATE_URL/notes/a"; done`)
	if b.Code != 0 || strings.Count(b.Stdout, "200\n") != 3 {
		t.Fatalf("sandbox B = %d, want 3 reads answered\nstdout: %s\nstderr: %s", b.Code, b.Stdout, b.Stderr)
	}
	var na, nb int
	var marker, tally bool
	for _, rc := range receiptsOf(t, st) {
		switch rc.Identity.SandboxID {
		case a.Outcome.SandboxID:
			na++
			marker = marker || strings.HasPrefix(rc.Reason, "receipt_budget_exhausted")
			tally = tally || strings.HasPrefix(rc.Reason, "receipt_budget_refusals: 91 crossings")
		case b.Outcome.SandboxID:
			nb++
		}
	}
	if na > bound+2 || !marker || !tally {
		t.Errorf("sandbox A has %d receipts (marker %v, refusal count %v), want at most %d with both", na, marker, tally, bound+2)
	}
	if nb != 3 {
		t.Errorf("sandbox B has %d receipts, want 3", nb)
	}
}
