package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/testkit"
)

// runIn runs one command against a state dir.
func runIn(t *testing.T, dir string, mk func(*globals) *cobra.Command, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	g := &globals{stateDir: dir, leaseSlots: store.DefaultPool.Slots, stdout: &out, stderr: &errOut}
	cmd := mk(g)
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.ExecuteContext(context.Background())
	return out.String() + errOut.String(), err
}

const replayConfig = `version: cordon/v1
workload: agent
tenant: t
purpose: p
egress:
  allow:
    - host: ok.test
      ports: [443]
budgets:
  connections: 5
`

// TestReceiptsDecisionSinceAndReplay: receipts --decision/--since select
// in the store; a denial is shown with its rule and suggestion; policy
// explain --receipt replays the recorded question, gives the runtime's
// answer at the config stage, and says when the answer changed (the
// suggested entry added to the configuration).
func TestReceiptsDecisionSinceAndReplay(t *testing.T) {
	testkit.RequireRoot(t)
	dir := t.TempDir()
	st, err := store.Open(dir, store.DefaultPool)
	if err != nil {
		t.Fatal(err)
	}
	id := crossing.Identity{Workload: "agent", Tenant: "t", Purpose: "p", SandboxID: "sb1"}
	old := time.Now().Add(-2 * time.Hour)
	var ids []int64
	for _, rc := range []crossing.Receipt{
		{Time: old, Identity: id, Broker: "egress", Action: "connect", Target: "old.test:443", Decision: crossing.Deny, Reason: "host-not-allowed",
			Rule: "config: egress.allow has no entry for old.test:443"},
		{Time: time.Now(), Identity: id, Broker: "egress", Action: "connect", Target: "evil.test:443", Decision: crossing.Deny, Reason: "host-not-allowed",
			Rule: "config: egress.allow has no entry for evil.test:443"},
		{Time: time.Now(), Identity: id, Broker: "egress", Action: "connect", Target: "ok.test:443", Decision: crossing.Allow, Reason: "ok"},
	} {
		n, err := st.RecordReceipt(context.Background(), rc)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, n)
	}
	st.Close()

	out, err := runIn(t, dir, receiptsCmd, "--decision", "deny", "--since", "1h", "--json")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var v ReceiptView
	if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &v) != nil || v.ID != ids[1] {
		t.Fatalf("receipts --decision deny --since 1h --json = %q, want receipt %d only", out, ids[1])
	}
	if v.Suggestion == nil || v.Suggestion.Kind != "config" || !strings.Contains(v.Suggestion.Text, `host: "evil.test"`) {
		t.Errorf("suggestion = %+v, want an egress.allow entry for evil.test", v.Suggestion)
	}
	out, err = runIn(t, dir, receiptsCmd, "--decision", "deny")
	if err != nil || !strings.Contains(out, "receipt "+strconv.FormatInt(ids[0], 10)+" denied: config: egress.allow has no entry for old.test:443") ||
		!strings.Contains(out, `- host: "evil.test"`) {
		t.Errorf("receipts --decision deny = %v\n%s", err, out)
	}
	if _, err := runIn(t, dir, receiptsCmd, "--decision", "maybe"); err == nil {
		t.Error("--decision maybe: accepted")
	}
	if _, err := runIn(t, dir, receiptsCmd, "--since", "yesterday"); err == nil {
		t.Error("--since yesterday: accepted")
	}

	cfg := filepath.Join(t.TempDir(), "cordon.yaml")
	if err := os.WriteFile(cfg, []byte(replayConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	explainReceipt := func(id int64) ExplainReport {
		t.Helper()
		out, err := runIn(t, dir, policyCmd, "explain", "--config", cfg, "--json", "--receipt", strconv.FormatInt(id, 10))
		var x ExplainReport
		if err != nil || json.Unmarshal([]byte(out), &x) != nil || x.Replay == nil {
			t.Fatalf("explain --receipt %d = %v, %q", id, err, out)
		}
		return x
	}
	x := explainReceipt(ids[1])
	if x.Allow || x.DeniedAt != "config" || x.Rule != "config: egress.allow has no entry for evil.test:443" || x.Replay.Changed || x.Replay.Decision != "deny" {
		t.Errorf("explain --receipt (denied) = allow %v at %q rule %q replay %+v; want the recorded denial at config", x.Allow, x.DeniedAt, x.Rule, x.Replay)
	}
	// Positive control: the allowed receipt is allowed now too.
	if x := explainReceipt(ids[2]); !x.Allow || x.DeniedAt != "" || x.Replay.Changed {
		t.Errorf("explain --receipt (allowed) = allow %v at %q replay %+v; want allow, unchanged", x.Allow, x.DeniedAt, x.Replay)
	}
	// With the suggested entry, the answer changes — and says so.
	fixed := strings.Replace(replayConfig, "      ports: [443]\n", "      ports: [443]\n"+strings.Replace(v.Suggestion.Text, "egress:\n  allow:\n", "", 1), 1)
	if err := os.WriteFile(cfg, []byte(fixed), 0o644); err != nil {
		t.Fatal(err)
	}
	if x := explainReceipt(ids[1]); !x.Allow || !x.Replay.Changed || len(x.Replay.Why) == 0 {
		t.Errorf("explain --receipt after the suggestion = allow %v replay %+v; want allow, changed", x.Allow, x.Replay)
	}
	if _, err := runIn(t, dir, policyCmd, "explain", "--config", cfg, "--receipt", "999"); err == nil {
		t.Error("explain --receipt 999: no error")
	}
}

// A store written before the privileged side refused a forged decision
// holds a receipt whose decision is a gateway's text: policy explain
// --receipt printed it raw, an escape sequence on the operator's
// terminal. Observed in the printed replay: every control byte escaped.
// Control: the same receipt's decision is in --json as recorded.
func TestReplayPrintsARecordedDecisionEscaped(t *testing.T) {
	testkit.RequireRoot(t)
	dir := t.TempDir()
	st, err := store.Open(dir, store.DefaultPool)
	if err != nil {
		t.Fatal(err)
	}
	forged := "deny\x1b]0;owned\x07\x1b[2J"
	n, err := st.RecordReceipt(context.Background(), crossing.Receipt{Time: time.Now(), Identity: crossing.Identity{Workload: "agent", Tenant: "t", Purpose: "p", SandboxID: "sb1"},
		Broker: "egress", Action: "connect", Target: "evil.test:443", Decision: forged, Reason: "host-not-allowed"})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	cfg := filepath.Join(t.TempDir(), "cordon.yaml")
	if err := os.WriteFile(cfg, []byte(replayConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runIn(t, dir, policyCmd, "explain", "--config", cfg, "--receipt", strconv.FormatInt(n, 10))
	if err != nil || !strings.Contains(out, "receipt "+strconv.FormatInt(n, 10)+": recorded deny") {
		t.Fatalf("explain --receipt = %v\n%q", err, out)
	}
	if strings.ContainsAny(out, "\x1b\x07") {
		t.Errorf("explain --receipt printed the recorded decision raw: %q", out)
	}
	out, err = runIn(t, dir, policyCmd, "explain", "--config", cfg, "--json", "--receipt", strconv.FormatInt(n, 10))
	var x ExplainReport
	if err != nil || json.Unmarshal([]byte(out), &x) != nil || x.Replay == nil || x.Replay.RecordedDecision != forged {
		t.Errorf("explain --receipt --json = %v, %q; want the decision as recorded", err, out)
	}
}
