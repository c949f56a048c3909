package e2e

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/testkit"
)

// hostileModel is a model name an agent sends to forge the operator's view
// of the receipts: erase the line, set the window title, move the cursor
// up, return to column 0, reverse the text (bidi override), a C1 CSI, and
// a forged row. It matches the route's "claude-*" glob, so it is carried.
const hostileModel = "claude-x\x1b[2K\x1b]0;pwned\x07\x1b[1A\r\u202eFORGED\u009b31m\tROW"

// A real run: the agent inside the sandbox calls the model through the
// gateway with a hostile model name. On the host, `cordon receipts`
// prints no byte a terminal acts on (ESC, BEL, CR, C1, bidi) and shows the
// escaped name; `cordon receipts --json` has the exact name — the positive
// control that the raw value really is stored and carried to the printer.
func TestReceiptsEscapeAgentModelName(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	up := testkit.NewModelUpstream(t, fakeKey, "answer")
	cfg := gatewayConfig(t, up.URL(), "")
	r := cordon(t, cordonBin, st, "run", "--config", cfg, "--ro", probeDir+":/probe", "--", "/probe/sdkclient", "anthropic", hostileModel, "hi")
	if r.Code != 0 && !strings.Contains(r.Stdout, "ERROR") {
		t.Fatalf("sdkclient = %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}

	js := cordon(t, cordonBin, st, "receipts", "--json", "--broker", "model")
	if js.Code != 0 {
		t.Fatalf("receipts --json = %d: %s", js.Code, js.Stderr)
	}
	found := false
	for _, line := range strings.Split(strings.TrimSpace(js.Stdout), "\n") {
		var rc struct{ Target string }
		if err := json.Unmarshal([]byte(line), &rc); err != nil {
			t.Fatalf("receipts --json line %q: %v", line, err)
		}
		found = found || rc.Target == hostileModel
	}
	if !found {
		t.Fatalf("no receipt has the exact model name %q:\n%s", hostileModel, js.Stdout)
	}
	// Even the JSON is terminal-safe: the same value, with \u escapes.
	checkNoTerminalBytes(t, "receipts --json", js.Stdout)

	tab := cordon(t, cordonBin, st, "receipts", "--broker", "model")
	if tab.Code != 0 {
		t.Fatalf("receipts = %d: %s", tab.Code, tab.Stderr)
	}
	checkNoTerminalBytes(t, "receipts", tab.Stdout)
	if !strings.Contains(tab.Stdout, `claude-x\u001b[2K\u001b]0;pwned\u0007\u001b[1A\u000d\u202eFORGED\u009b31m\u0009ROW`) {
		t.Errorf("receipts does not show the escaped name:\n%s", tab.Stdout)
	}
	// One header line and one line per receipt: no forged row.
	if rows, n := strings.Count(tab.Stdout, "\n")-1, strings.Count(js.Stdout, "\n"); rows != n {
		t.Errorf("receipts printed %d rows for %d receipts (a forged row?):\n%s", rows, n, tab.Stdout)
	}
}

func checkNoTerminalBytes(t *testing.T, what, out string) {
	t.Helper()
	for _, bad := range []string{"\x1b", "\x07", "\r", "\u009b", "\x9b", "\u202e", "\u2066"} {
		if i := strings.Index(out, bad); i >= 0 {
			t.Errorf("%s: stdout holds %q at %d: %q", what, bad, i, out)
		}
	}
	for i, c := range []byte(out) {
		if c < 0x20 && c != '\n' || c == 0x7f {
			t.Errorf("%s: stdout holds control byte %#x at %d", what, c, i)
			return
		}
	}
	if !bytes.Equal([]byte(out), bytes.ToValidUTF8([]byte(out), nil)) {
		t.Errorf("%s: stdout is not valid UTF-8", what)
	}
}
