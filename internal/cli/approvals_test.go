package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/testkit"
)

// approvalsTest is a state dir with one pending approval, and a way to run
// `cordon approvals …` against it.
type approvalsTest struct {
	t   *testing.T
	dir string
	a   store.Approval
}

func newApprovalsTest(t *testing.T) *approvalsTest {
	t.Helper()
	testkit.RequireRoot(t)
	at := &approvalsTest{t: t, dir: t.TempDir()}
	st, err := store.Open(at.dir, store.DefaultPool)
	if err != nil {
		t.Fatalf("store.Open = %v", err)
	}
	defer st.Close()
	at.a, err = st.RequestApproval(context.Background(), store.Approval{Workload: "wl", SandboxID: "sb-1", Action: "tool.call",
		Target: "fs/write_file", Digest: "sha256:" + strings.Repeat("ab", 32),
		Arguments: json.RawMessage(`{"path":"/w/x.txt","content":"hi\u001b[2J \u202e"}`)}, time.Hour)
	if err != nil {
		t.Fatalf("RequestApproval = %v", err)
	}
	return at
}

// run runs `cordon --state-dir DIR approvals ARGS…` and returns its
// stdout and error.
func (at *approvalsTest) run(ctx context.Context, args ...string) (string, error) {
	var out, errOut bytes.Buffer
	g := &globals{stateDir: at.dir, leaseSlots: store.DefaultPool.Slots, stdout: &out, stderr: &errOut}
	cmd := approvalsCmd(g)
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}

func (at *approvalsTest) state() store.Approval {
	at.t.Helper()
	st, err := store.Open(at.dir, store.DefaultPool)
	if err != nil {
		at.t.Fatalf("store.Open = %v", err)
	}
	defer st.Close()
	a, err := st.Approval(context.Background(), at.a.ID)
	if err != nil {
		at.t.Fatalf("Approval = %v", err)
	}
	return a
}

func TestApprovalsListShowApprove(t *testing.T) {
	at := newApprovalsTest(t)
	ctx := context.Background()
	out, err := at.run(ctx, "list")
	if err != nil {
		t.Fatalf("approvals list = %v", err)
	}
	for _, want := range []string{at.a.ID, "pending", "fs/write_file", at.a.Digest, `\u001b[2J`, `\u202e`} {
		if !strings.Contains(out, want) {
			t.Errorf("approvals list lacks %q:\n%s", want, out)
		}
	}
	if strings.ContainsAny(out, "\x1b\u202e") {
		t.Errorf("approvals list printed a terminal control or bidi character raw:\n%q", out)
	}
	out, err = at.run(ctx, "show", at.a.ID)
	if err != nil || !strings.Contains(out, `"content": "hi\u001b[2J \u202e"`) {
		t.Errorf("approvals show = %v:\n%s\nwant the exact arguments, indented, escapes visible", err, out)
	}
	out, err = at.run(ctx, "list", "--json")
	var v approvalJSON
	if err != nil || json.Unmarshal([]byte(out), &v) != nil || v.ID != at.a.ID || string(v.Arguments) != string(at.a.Arguments) {
		t.Errorf("approvals list --json = %v:\n%s\nwant %s with exact arguments", err, out, at.a.ID)
	}

	out, err = at.run(ctx, "approve", at.a.ID)
	if err != nil || !strings.HasPrefix(out, "approved "+at.a.ID) {
		t.Fatalf("approvals approve = %v: %s", err, out)
	}
	a := at.state()
	if want := fmt.Sprintf("cli uid %d", os.Getuid()); a.State != store.ApprovalApproved || a.DecidedBy != want {
		t.Errorf("after approve: %s by %q, want approved by %q", a.State, a.DecidedBy, want)
	}
	if out, _ := at.run(ctx, "list"); strings.Contains(out, at.a.ID) {
		t.Errorf("approvals list still shows the approved %s as pending", at.a.ID)
	}
	if out, _ := at.run(ctx, "list", "--all"); !strings.Contains(out, at.a.ID) || !strings.Contains(out, "approved") {
		t.Errorf("approvals list --all lacks the approved %s:\n%s", at.a.ID, out)
	}

	// Replays and forgeries are refused with the reason, as usage errors.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"approve", at.a.ID}, "approval " + at.a.ID + " is already approved"},
		{[]string{"deny", at.a.ID}, "approval " + at.a.ID + " is already approved"},
		{[]string{"approve", "apr_000000000000000000000000"}, "approval apr_000000000000000000000000 not found"},
		{[]string{"deny", "apr_' OR 1=1 --"}, `approval "apr_' OR 1=1 --" not found`},
		{[]string{"show", "nope"}, `approval "nope" not found`},
	} {
		_, err := at.run(ctx, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || failure.KindOf(err) != failure.KindUsage {
			t.Errorf("approvals %s = %v, want a usage error containing %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}

	if out, err := at.run(ctx, "revoke", at.a.ID); err != nil || !strings.HasPrefix(out, "revoked "+at.a.ID) {
		t.Errorf("approvals revoke = %v: %s", err, out)
	}
	if _, err := at.run(ctx, "revoke", at.a.ID); err == nil || !strings.Contains(err.Error(), "was revoked") {
		t.Errorf("second revoke = %v, want a refusal", err)
	}
}

func TestApprovalsDeny(t *testing.T) {
	at := newApprovalsTest(t)
	if out, err := at.run(context.Background(), "deny", at.a.ID); err != nil || !strings.HasPrefix(out, "denied "+at.a.ID) {
		t.Fatalf("approvals deny = %v: %s", err, out)
	}
	if a := at.state(); a.State != store.ApprovalDenied {
		t.Errorf("after deny: %s, want denied", a.State)
	}
}

// TestApprovalsExitStatus runs the whole CLI: a refusal exits 125.
func TestApprovalsExitStatus(t *testing.T) {
	at := newApprovalsTest(t)
	if code := Main([]string{"--state-dir", at.dir, "approvals", "approve", "apr_000000000000000000000000"}); code != failure.ExitRefused {
		t.Errorf("approve of an unknown id exited %d, want %d", code, failure.ExitRefused)
	}
	if code := Main([]string{"--state-dir", at.dir, "approvals", "approve", at.a.ID}); code != 0 {
		t.Errorf("approve exited %d, want 0", code)
	}
	if code := Main([]string{"--state-dir", at.dir, "approvals", "approve", at.a.ID}); code != failure.ExitRefused {
		t.Errorf("second approve exited %d, want %d", code, failure.ExitRefused)
	}
}

func TestApprovalsConsole(t *testing.T) {
	at := newApprovalsTest(t)
	if _, err := at.run(context.Background(), "console", "--listen", "0.0.0.0:0"); err == nil || failure.KindOf(err) != failure.KindUsage {
		t.Errorf("console --listen 0.0.0.0:0 = %v, want a usage refusal", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := at.run(ctx, "console")
		done <- err
	}()
	path := filepath.Join(at.dir, consoleURLFile)
	var loginURL string
	for deadline := time.Now().Add(10 * time.Second); loginURL == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if b, err := os.ReadFile(path); err == nil {
			loginURL = strings.TrimSpace(string(b))
		}
	}
	if !strings.HasPrefix(loginURL, "http://127.0.0.1:") || !strings.Contains(loginURL, "/login?token=") {
		t.Fatalf("%s = %q, want the login URL", path, loginURL)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("%s mode = %v (%v), want 0600", path, fi.Mode().Perm(), err)
	}
	cl := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := cl.Get(loginURL)
	if err != nil {
		t.Fatalf("GET login = %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Errorf("GET login = %s, want 303", resp.Status)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("console = %v, want nil after cancel", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("console did not stop")
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still exists after the console stopped (%v)", path, err)
	}
}
