package approval

import (
	"context"
	"encoding/json"
	"html"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/textsafe"
)

// The console page shows agent text (a pending approval's workload and
// target, a receipt's target and reason) with bidi overrides, controls and
// invisible characters escaped, on top of HTML escaping: the page holds
// none of those characters, and shows each value's escaped form.
func TestConsoleEscapesAgentText(t *testing.T) {
	const hostile = "m\x1b]0;t\x07\u202etxt.exe\u2066\u200b<b>x</b>"
	st := openStore(t)
	ctx := context.Background()
	if _, err := st.RequestApproval(ctx, store.Approval{Workload: "wl", SandboxID: "sb", Action: "tool.call", Target: hostile,
		Digest: "sha256:" + strings.Repeat("cd", 32), Arguments: json.RawMessage(`{}`)}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := st.RecordReceipt(ctx, crossing.Receipt{Time: time.Now(), Identity: crossing.Identity{Workload: "wl"}, Broker: "model",
		Action: "anthropic.messages", Target: hostile, Decision: crossing.Deny, Reason: "model " + hostile}); err != nil {
		t.Fatal(err)
	}
	c := startConsole(t, st)
	cl := client(t)
	login(t, c, cl)
	code, body := get(t, cl, c, "/", nil)
	if code != 200 {
		t.Fatalf("GET / = %d", code)
	}
	for _, r := range body {
		if r != '\n' && r != '\t' && textsafe.Invisible(r) {
			t.Fatalf("page holds %U", r)
		}
	}
	shown := html.EscapeString(textsafe.Line(hostile))
	if n := strings.Count(body, shown); n < 3 {
		t.Errorf("page shows the escaped value %q %d times, want 3 (approval, receipt target, reason)", shown, n)
	}
	if strings.Contains(body, "<b>x</b>") {
		t.Error("agent markup reached the page")
	}
}
