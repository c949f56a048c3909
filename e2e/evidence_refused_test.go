package e2e

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/testkit"
	_ "modernc.org/sqlite"
)

// An evidence log that refuses appends denies the model crossing's answer
// (design decision 12): with a trigger in the run's own store aborting
// every insert into log_leaves, an agent's call still reaches the fake
// upstream (the crossing was allowed and made), but the official SDK
// inside the sandbox gets an error instead of the upstream's answer — for
// a non-streamed call the body is withheld, for a stream the terminal
// event — and the run's receipts are unchanged. Controls: the same calls
// on the working log, before the trigger and after it is dropped, get
// the answer and add receipts.
func TestGatewayEvidenceLogRefused(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	const answer = "an answer that needs its receipt"
	up := testkit.NewModelUpstream(t, fakeKey, answer)
	cfg := gatewayConfig(t, up.URL(), "")
	ops := []struct{ op, model string }{
		{"anthropic", "claude-test-1"},
		{"anthropic-stream", "claude-test-1"},
		{"openai-chat", "gpt-test"},
		{"openai-chat-stream", "gpt-test"},
		{"openai-responses", "gpt-test"},
	}
	call := func(op, model string) result {
		return cordon(t, cordonBin, st, "run", "--config", cfg, "--ro", probeDir+":/probe", "--", "/probe/sdkclient", op, model, "say hello")
	}
	receipts := func() int {
		r := cordon(t, cordonBin, st, "receipts", "--json", "--broker", "model")
		if r.Code != 0 {
			t.Fatalf("cordon receipts = %d: %s", r.Code, r.Stderr)
		}
		return strings.Count(r.Stdout, `"broker":"model"`)
	}
	exec := func(stmt string) {
		db, err := sql.Open("sqlite", filepath.Join(st, "cordon.db"))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.ExecContext(context.Background(), stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	// Control: the working log.
	if r := call("anthropic", "claude-test-1"); r.Code != 0 || !strings.Contains(r.Stdout, "ANSWER: "+answer) {
		t.Fatalf("control on the working log = %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	before := receipts()
	if before != 1 {
		t.Fatalf("%d model receipts after the control call, want 1", before)
	}
	// The log refuses every append but a session's own signed receipt
	// (broker evidence, logged at admission: a log refusing that refuses
	// the session before its program starts, docs/session-receipts.md),
	// so the crossing is made and its answer is what is withheld.
	exec("CREATE TRIGGER e2e_refuse_leaf BEFORE INSERT ON log_leaves WHEN (SELECT broker FROM receipts WHERE id = NEW.receipt_id) IS NOT 'evidence' BEGIN SELECT RAISE(ABORT, 'e2e: the evidence log refuses appends'); END")
	for _, tc := range ops {
		t.Run(tc.op, func(t *testing.T) {
			seen := len(up.Seen())
			r := call(tc.op, tc.model)
			// Exactly one: the crossing was made (else this observes
			// nothing), and the SDK did not retry (X-Should-Retry: false).
			if n := len(up.Seen()) - seen; n != 1 {
				t.Fatalf("the upstream saw %d requests, want 1", n)
			}
			if r.Code == 0 || strings.Contains(r.Stdout, "ANSWER:") || !strings.Contains(r.Stdout, "ERROR") {
				t.Fatalf("%s with the log refusing appends = %d, want the SDK's error and no answer\nstdout: %s\nstderr: %s", tc.op, r.Code, r.Stdout, r.Stderr)
			}
			// The OpenAI SDK prints a non-streamed error's status only.
			if !strings.Contains(r.Stdout, "evidence log unavailable") && !strings.Contains(r.Stdout, "503 Service Unavailable") {
				t.Errorf("the SDK's error is not the broker's 503 evidence-log error: %s", r.Stdout)
			}
		})
	}
	if n := receipts(); n != before {
		t.Errorf("%d model receipts while the log refused appends, want %d (unchanged)", n, before)
	}
	// Control: the same log once it records again.
	exec("DROP TRIGGER e2e_refuse_leaf")
	if r := call("anthropic", "claude-test-1"); r.Code != 0 || !strings.Contains(r.Stdout, "ANSWER: "+answer) {
		t.Fatalf("after the trigger is dropped = %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	if n := receipts(); n != before+1 {
		t.Errorf("%d model receipts after the log records again, want %d", n, before+1)
	}
}
