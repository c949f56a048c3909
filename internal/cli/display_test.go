package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cordon-project/cordon/internal/hostmgr/proto"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/evlog"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/hostmgr"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/testkit"
	"github.com/cordon-project/cordon/internal/textsafe"
)

// hostile is what an agent or upstream may put in any string cordon
// prints: erase line, window title (OSC), cursor up and back, carriage
// return, a bidi override, a C1 CSI and a forged row.
const hostile = "gpt\x1b[2K\x1b]0;pwned\x07\x1b[1A\x1b[10D\r\u202eevil\u009b31m\u2066\n1\tforged\trow"

// assertSafe checks that out, printed for a person, holds no byte a
// terminal acts on or hides, and shows hostile in its escaped form.
func assertSafe(t *testing.T, what, out string) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Errorf("%s: output is not valid UTF-8: %q", what, out)
	}
	for _, r := range out {
		if r == '\n' || r == '\t' {
			continue
		}
		if textsafe.Invisible(r) {
			t.Errorf("%s: output holds %U: %q", what, r, out)
			return
		}
	}
	if strings.ContainsAny(out, "\x1b\r\u009b\u202e") {
		t.Errorf("%s: output holds a control: %q", what, out)
	}
	if !strings.Contains(out, textsafe.Line(hostile)) && !strings.Contains(out, jsonEscaped(hostile)) {
		t.Errorf("%s: output does not show the escaped value: %q", what, out)
	}
}

// jsonEscaped is hostile as writeJSON spells it inside a JSON string.
func jsonEscaped(s string) string {
	b, _ := json.Marshal(s)
	e := textsafe.JSON(b)
	return e[1 : len(e)-1]
}

func runCLI(t *testing.T, dir string, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	g := &globals{stateDir: dir, leaseSlots: store.DefaultPool.Slots, stdout: &out, stderr: &errOut}
	c := receiptsCmd(g)
	switch args[0] {
	case "calls":
		c = callsCmd(g)
	case "approvals":
		c = approvalsCmd(g)
	case "state":
		c = stateCmd(g)
	}
	c.SetArgs(args[1:])
	c.SetOut(&out)
	c.SetErr(&errOut)
	if err := c.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("cordon %v = %v (%s)", args, err, errOut.String())
	}
	return out.String()
}

func TestPrintersEscapeAgentText(t *testing.T) {
	testkit.RequireRoot(t)
	dir := t.TempDir()
	st, err := store.Open(dir, store.DefaultPool)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id := crossing.Identity{Workload: hostile, Tenant: "t", Purpose: "p", SandboxID: hostile}
	if _, err := st.RecordReceipt(ctx, crossing.Receipt{Time: time.Now(), Identity: id, Broker: "model", Action: "anthropic.messages",
		Target: hostile, Decision: crossing.Deny, Reason: "model " + hostile + " is not allowed"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.BeginToolCall(ctx, store.ToolCall{Workload: hostile, SandboxID: "sb", Key: "k1", Server: hostile, Tool: hostile,
		Digest: "sha256:00", Arguments: json.RawMessage(`{"a":` + string(mustJSON(hostile)) + `}`)}, 0, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.RequestApproval(ctx, store.Approval{Workload: hostile, SandboxID: hostile, Action: "tool.call", Target: hostile,
		Digest: "sha256:" + strings.Repeat("ab", 32), Arguments: json.RawMessage(`{"x":` + string(mustJSON(hostile)) + `}`)}, time.Hour); err != nil {
		t.Fatal(err)
	}
	sc := store.StateScope{Tenant: "t", Workload: hostile, Purpose: "p"}
	if _, _, _, err := st.PutState(ctx, sc, store.StateWrite{Key: hostile, Value: []byte("v"), SandboxID: hostile},
		store.StateLimits{QuotaBytes: 1 << 20, QuotaEntries: 10}, nil); err != nil {
		t.Fatal(err)
	}
	st.Close()

	for _, args := range [][]string{
		{"receipts"}, {"calls", "list"}, {"approvals", "list"}, {"state", "ls"},
		{"receipts", "--json"}, {"calls", "list", "--json"}, {"approvals", "list", "--json"}, {"state", "ls", "--json"},
		{"state", "export", "--tenant", "t", "--workload", hostile, "--purpose", "p"},
	} {
		out := runCLI(t, dir, args...)
		assertSafe(t, strings.Join(args, " "), out)
	}

	// approvals show: one approval, by id.
	out := runCLI(t, dir, "approvals", "list", "--json")
	var a struct{ ID, Target string }
	if err := json.Unmarshal([]byte(strings.SplitN(out, "\n", 2)[0]), &a); err != nil {
		t.Fatal(err)
	}
	assertSafe(t, "approvals show", runCLI(t, dir, "approvals", "show", a.ID))
	if a.Target != hostile {
		t.Errorf("approvals --json target = %q, want %q exactly", a.Target, hostile)
	}

	// --json keeps the exact value (and says so in every form).
	var rc crossing.Receipt
	if err := json.Unmarshal([]byte(strings.TrimSpace(runCLI(t, dir, "receipts", "--json"))), &rc); err != nil {
		t.Fatal(err)
	}
	if rc.Target != hostile || rc.Identity.Workload != hostile {
		t.Errorf("receipts --json target %q workload %q, want %q exactly", rc.Target, rc.Identity.Workload, hostile)
	}
	var c store.ToolCall
	if err := json.Unmarshal([]byte(strings.TrimSpace(runCLI(t, dir, "calls", "list", "--json"))), &c); err != nil {
		t.Fatal(err)
	}
	if c.Tool != hostile || !strings.Contains(string(c.Arguments), `\u001b`) {
		t.Errorf("calls --json tool %q arguments %s, want exact", c.Tool, c.Arguments)
	}
}

func mustJSON(s string) []byte {
	b, _ := json.Marshal(s)
	return b
}

func TestSandboxInfoAndErrorsEscaped(t *testing.T) {
	var out bytes.Buffer
	g := &globals{stdout: &out, stderr: &out}
	printInfo(g, []hostmgr.Info{{Name: hostile, ID: "sb", State: "running", MainExit: hostile, Note: hostile, Bypassed: []string{hostile}}})
	assertSafe(t, "sandbox ls", out.String())

	out.Reset()
	if err := writeJSON(&out, hostmgr.Info{Name: hostile, Note: hostile}); err != nil {
		t.Fatal(err)
	}
	assertSafe(t, "sandbox --json", out.String())
	var i hostmgr.Info
	if err := json.Unmarshal(out.Bytes(), &i); err != nil || i.Name != hostile || i.Note != hostile {
		t.Errorf("--json = %+v (%v), want the exact name and note", i, err)
	}

	// An error that embeds an agent's string (a refused model, a daemon
	// message relayed from a sandbox) is escaped where it is printed.
	for _, err := range []error{
		failure.Failf(failure.KindPolicyRejected, "model", "model %s is not allowed", hostile),
		errors.New("daemon: exec " + hostile + ": no such file"),
	} {
		assertSafe(t, "error", describe(err))
		if strings.Contains(describe(err), "\n") {
			t.Errorf("describe(%q) spans lines", err)
		}
	}

	// evidence verify --receipt prints the stored receipt (leaf data).
	out.Reset()
	leaf, _ := json.Marshal(crossing.Receipt{Target: hostile})
	printVerify(&out, verifyOutput{Proof: &evlog.Proof{Receipt: string(leaf), Checkpoint: "origin\n"}}, true, 1)
	assertSafe(t, "evidence verify", out.String())
}

// sandbox logs: escaped on a terminal, exact on a pipe or with --raw.
func TestLogsOutputChoice(t *testing.T) {
	ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		testkit.Unavailable(t, "no pty (/dev/ptmx): %v", err)
	}
	defer ptm.Close()
	if !isTerminal(ptm) {
		t.Fatal("a pty master is not a terminal")
	}
	var buf bytes.Buffer
	if isTerminal(&buf) {
		t.Fatal("a buffer is a terminal")
	}
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(f) {
		t.Fatal("a file is a terminal")
	}
	for _, tc := range []struct {
		raw, tty bool
		want     string
	}{
		{false, false, hostile},                // a pipe or file: the program's bytes
		{true, true, hostile},                  // --raw on a terminal
		{false, true, textsafe.Block(hostile)}, // a terminal: escaped, lines kept
	} {
		buf.Reset()
		w, flush := logsWriter(&buf, tc.raw, tc.tty)
		w.Write([]byte(hostile[:7]))
		w.Write([]byte(hostile[7:]))
		flush()
		if got := buf.String(); got != tc.want {
			t.Errorf("raw %v tty %v: output %q, want %q", tc.raw, tc.tty, got, tc.want)
		}
		if !tc.raw && tc.tty {
			assertSafe(t, "sandbox logs", strings.ReplaceAll(buf.String(), ``, ``)+textsafe.Line(hostile))
		}
	}
}

// Log lines (the gateway's and the daemon's, slog's text format) carry
// agent text in values: slog quotes any value with a non-printable rune
// using strconv, so no control or bidi character reaches stderr raw.
func TestLogLinesQuoteAgentText(t *testing.T) {
	var buf bytes.Buffer
	g := &globals{stderr: &buf}
	g.logger().Warn("model usage above the reservation", "model", hostile, "reason", "model "+hostile)
	out := strings.TrimSuffix(buf.String(), "\n")
	if strings.Count(out, "\n") != 0 {
		t.Errorf("one log record spans lines: %q", out)
	}
	for _, r := range out {
		if textsafe.Invisible(r) {
			t.Errorf("log line holds %U: %q", r, out)
			return
		}
	}
}

// A daemon refusal keeps its stable kind: a lifecycle failure kind when
// the daemon sent one, else the protocol's own kind — never "usage".
func TestDescribeDaemonKinds(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&proto.Error{Kind: proto.KindNotFound, Message: "no sandbox named x"}, "not_found: no sandbox named x"},
		{fmt.Errorf("sandbox start: %w", &proto.Error{Kind: proto.KindConflict, Message: "x is running"}), "sandbox start: conflict: x is running"},
		{&proto.Error{Kind: proto.KindBadRequest, Message: "denied", Failure: failure.KindPolicyRejected}, "policy_rejected: bad_request: denied"},
		{errors.New("plain"), "usage: plain"},
	} {
		if got := describe(tc.err); got != tc.want {
			t.Errorf("describe(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
