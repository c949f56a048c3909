package e2e

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"
)

// A state write that policy holds for approval, end to end: the agent in
// a real sandbox gets 409 approval_pending and retries; the operator on
// the host sees the exact operation in `cordon approvals list` and
// approves it with `cordon approvals approve`; the retry is written, once.
// The same write again, and another key, each need their own approval
// (which dies with the sandbox). The host checks the store through the
// CLI. Control: the same write without the annotation needs nothing.
func TestStateApprovalFlow(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	dir := t.TempDir()
	annotated := filepath.Join(dir, "approve.cedar")
	control := filepath.Join(dir, "control.cedar")
	const text = `
@id("state-needs-approval")
@approval("required")
permit (principal, action == Action::"state.write", resource);
@id("read") permit (principal, action == Action::"state.read", resource);
`
	os.WriteFile(annotated, []byte(text), 0o644)
	os.WriteFile(control, []byte(strings.Replace(text, `@approval("required")`, "", 1)), 0o644)
	const limits = "state: {quota_bytes: 4096, quota_entries: 10, max_value_bytes: 1KiB}\n"
	cfg := stateConfig(t, "state-approval", "testing", limits+"approvals: {ttl: 5m}\npolicy: ["+annotated+"]\n")
	ctl := stateConfig(t, "state-approval-control", "testing", limits+"policy: ["+control+"]\n")

	// Control: written at once, no approval asked.
	r := cordon(t, cordonBin, st, "run", "--config", ctl, "--", "/bin/sh", "-c",
		`curl -sS -o /dev/null -w '%{http_code}\n' -X PUT --data-binary 'v' "$CORDON_STATE_URL/notes/a"`)
	if r.Code != 0 || r.Stdout != "201\n" {
		t.Fatalf("control write: exit %d %q %s", r.Code, r.Stdout, r.Stderr)
	}
	if l := cordon(t, cordonBin, st, "approvals", "list", "--all", "--json"); strings.TrimSpace(l.Stdout) != "" {
		t.Fatalf("the control asked for approvals:\n%s", l.Stdout)
	}

	const script = `u="$CORDON_STATE_URL"
put() { curl -sS -o /tmp/body -w '%{http_code}' -X PUT --data-binary "$2" "$u/$1"; }
c=$(put notes/a 'approved value'); echo "first $c"; cat /tmp/body; echo
i=0; while [ "$c" = 409 ] && [ $i -lt 300 ]; do sleep 0.2; c=$(put notes/a 'approved value'); i=$((i+1)); done
echo "after $c"
echo "again $(put notes/a 'approved value')"
echo "other $(put notes/b 'approved value')"
`
	done := make(chan result, 1)
	go func() { done <- cordon(t, cordonBin, st, "run", "--config", cfg, "--", "/bin/sh", "-c", script) }()

	type approval struct {
		ID        string          `json:"id"`
		State     string          `json:"state"`
		Action    string          `json:"action"`
		Target    string          `json:"target"`
		Arguments json.RawMessage `json:"arguments"`
	}
	var id string
	for i := 0; i < 150 && id == ""; i++ {
		l := cordon(t, cordonBin, st, "approvals", "list", "--json")
		for _, line := range strings.Split(strings.TrimSpace(l.Stdout), "\n") {
			var a approval
			if json.Unmarshal([]byte(line), &a) == nil && a.State == "pending" {
				var args struct {
					Op    string `json:"operation"`
					Key   string `json:"key"`
					Value string `json:"value"`
				}
				json.Unmarshal(a.Arguments, &args)
				if a.Action != "state.write" || a.Target != "notes/a" || args.Op != "put" || args.Value != "approved value" {
					t.Fatalf("the operator is shown %+v (%s)", a, a.Arguments)
				}
				id = a.ID
			}
		}
		if id == "" {
			time.Sleep(200 * time.Millisecond)
		}
	}
	if id == "" {
		t.Fatal("no pending approval appeared")
	}
	if a := cordon(t, cordonBin, st, "approvals", "approve", id); a.Code != 0 {
		t.Fatalf("approve: %d %s", a.Code, a.Stderr)
	}
	r = <-done
	if r.Code != 0 {
		t.Fatalf("run: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	var lines []string
	for _, l := range strings.Split(r.Stdout, "\n") {
		if l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) < 5 || lines[0] != "first 409" || !strings.Contains(lines[1], `"approval_pending"`) || !strings.Contains(lines[1], `"approval_id":"`+id+`"`) ||
		lines[2] != "after 201" || lines[3] != "again 409" || lines[4] != "other 409" {
		t.Fatalf("the agent saw:\n%s", r.Stdout)
	}
	// From the host: written once, with the approved value; notes/b never.
	ex := cordon(t, cordonBin, st, "state", "export", "--tenant", "acme", "--workload", "state-approval", "--purpose", "testing")
	want := base64.StdEncoding.EncodeToString([]byte("approved value"))
	if ex.Code != 0 || !strings.Contains(ex.Stdout, `"key":"notes/a","version":1,`) || !strings.Contains(ex.Stdout, want) || strings.Contains(ex.Stdout, "notes/b") {
		t.Fatalf("state after the run:\n%s\n%s", ex.Stdout, ex.Stderr)
	}
	// The receipt of the write names the approval; the approval is used;
	// the later requests died with the sandbox.
	rcs := cordon(t, cordonBin, st, "receipts", "--json", "--broker", "state")
	if !strings.Contains(rcs.Stdout, `"approval":"`+id+`"`) || !strings.Contains(rcs.Stdout, "approval pending") {
		t.Fatalf("receipts:\n%s", rcs.Stdout)
	}
	l := cordon(t, cordonBin, st, "approvals", "list", "--all", "--json")
	var consumed, revoked int
	for _, line := range strings.Split(strings.TrimSpace(l.Stdout), "\n") {
		var a approval
		json.Unmarshal([]byte(line), &a)
		switch {
		case a.ID == id && a.State == "consumed":
			consumed++
		case a.ID != id && a.State == "revoked":
			revoked++
		}
	}
	if consumed != 1 || revoked != 2 {
		t.Fatalf("approvals after the run (want %s consumed, two revoked):\n%s", id, l.Stdout)
	}
	if a := cordon(t, cordonBin, st, "approvals", "approve", id); a.Code != 125 {
		t.Fatalf("approving a used approval again: %d %s", a.Code, a.Stderr)
	}
}

// Egress connections held for approval, end to end through curl in a real
// sandbox: a per-connection approval lets exactly one connection through;
// a sandbox-scoped one (@approval_scope("sandbox")) every later
// connection to that host and port. The operator approves from the host;
// the upstreams count what reached them.
func TestEgressApprovalFlow(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	once := testkit.NewTarget(t, "once")
	session := testkit.NewTarget(t, "session")
	oport, sport := once.Port(), session.Port()
	pol := filepath.Join(t.TempDir(), "egress.cedar")
	os.WriteFile(pol, []byte(`
@id("once") @approval("required")
permit (principal, action == Action::"egress.connect", resource == Host::"once.test");
@id("session") @approval("required") @approval_scope("sandbox")
permit (principal, action == Action::"egress.connect", resource == Host::"session.test");
`), 0o644)
	up := testkit.NewModelUpstream(t, fakeKey, "x")
	cfg := gatewayConfig(t, up.URL(), fmt.Sprintf(`policy: [%s]
approvals: {ttl: 5m}
egress:
  allow:
    - {host: once.test, ports: [%s]}
    - {host: session.test, ports: [%s]}
  unsafe_allow_ranges: ["127.0.0.1/32"]
  resolve:
    once.test: 127.0.0.1
    session.test: 127.0.0.1
`, pol, oport, sport))
	script := fmt.Sprintf(`get() { curl -sS -o /dev/null -w '%%{http_code}' --max-time 10 "$1"; }
wait_ok() { c=$(get "$1"); i=0; while [ "$c" != 200 ] && [ $i -lt 300 ]; do sleep 0.2; c=$(get "$1"); i=$((i+1)); done; echo "$c"; }
echo "once $(wait_ok http://once.test:%[1]s/) $(get http://once.test:%[1]s/)"
echo "session $(wait_ok http://session.test:%[2]s/) $(get http://session.test:%[2]s/) $(get http://session.test:%[2]s/)"
`, oport, sport)
	done := make(chan result, 1)
	go func() { done <- cordon(t, cordonBin, st, "run", "--config", cfg, "--", "/bin/sh", "-c", script) }()
	approve := func(target string) string {
		for i := 0; i < 150; i++ {
			l := cordon(t, cordonBin, st, "approvals", "list", "--json")
			for _, line := range strings.Split(strings.TrimSpace(l.Stdout), "\n") {
				var a struct{ ID, State, Action, Target string }
				if json.Unmarshal([]byte(line), &a) == nil && a.State == "pending" && a.Target == target {
					if a.Action != "egress.connect" {
						t.Fatalf("approval %+v", a)
					}
					if r := cordon(t, cordonBin, st, "approvals", "approve", a.ID); r.Code != 0 {
						t.Fatalf("approve: %d %s", r.Code, r.Stderr)
					}
					return a.ID
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Fatalf("no pending approval for %s", target)
		return ""
	}
	onceID := approve("once.test")
	sessionID := approve("session.test")
	r := <-done
	if r.Code != 0 || r.Stdout != "once 200 403\nsession 200 200 200\n" {
		t.Fatalf("the agent saw (exit %d):\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	if once.Hits() != 1 || session.Hits() != 3 {
		t.Fatalf("upstream hits: once %d (want 1), session %d (want 3)", once.Hits(), session.Hits())
	}
	rcs := cordon(t, cordonBin, st, "receipts", "--json", "--broker", "egress")
	if strings.Count(rcs.Stdout, `"approval":"`+onceID+`"`) != 1 || strings.Count(rcs.Stdout, `"approval":"`+sessionID+`"`) != 3 ||
		!strings.Contains(rcs.Stdout, "approval-pending apr_") {
		t.Fatalf("receipts:\n%s", rcs.Stdout)
	}
	// The sandbox stopped: its held approval is revoked.
	if s := cordon(t, cordonBin, st, "approvals", "show", sessionID, "--json"); !strings.Contains(s.Stdout, `"revoked"`) {
		t.Fatalf("held approval after the sandbox stopped:\n%s", s.Stdout)
	}
}
