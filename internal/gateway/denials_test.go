package gateway

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/store"
)

// TestDenialReceiptNamesItsRule: the privileged side names what denied a
// crossing in the receipt it records — whatever rule the gateway sent —
// and logs one escaped line per denial on the host; an allow carries no
// rule and no denial line.
func TestDenialReceiptNamesItsRule(t *testing.T) {
	st := testStore(t)
	var logs bytes.Buffer
	id := crossing.Identity{Workload: "w", Tenant: "t", SandboxID: "sb1"}
	srv := &Authority{Store: st, ID: id, Logger: slog.New(slog.NewTextHandler(&logs, nil)), ConfigDigest: "sha256:cfg"}
	c := connect(t, srv)
	ctx := context.Background()
	if err := c.Record(ctx, crossing.Receipt{Broker: "egress", Action: "connect", Target: "evil.example:443\x1b[2J", Decision: crossing.Deny,
		Reason: "host-not-allowed", Rule: "forged by the gateway"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Record(ctx, crossing.Receipt{Broker: "egress", Action: "connect", Target: "ok.example:443", Decision: crossing.Allow,
		Reason: "ok", Rule: "forged"}); err != nil {
		t.Fatal(err)
	}
	rs, err := st.Receipts(ctx, store.ReceiptFilter{Decision: crossing.Deny})
	if err != nil || len(rs) != 1 {
		t.Fatalf("deny receipts = %+v, %v; want 1", rs, err)
	}
	if want := "config: egress.allow has no entry for evil.example:443\x1b[2J"; rs[0].Rule != want {
		t.Errorf("deny receipt rule = %q, want %q", rs[0].Rule, want)
	}
	all, _ := st.Receipts(ctx, store.ReceiptFilter{Decision: crossing.Allow})
	if len(all) != 1 || all[0].Rule != "" {
		t.Errorf("allow receipts = %+v, want one without a rule", all)
	}
	for _, rc := range append(rs, all...) {
		if rc.ConfigDigest != "sha256:cfg" {
			t.Errorf("receipt %d config digest = %q, want the sandbox's", rc.ID, rc.ConfigDigest)
		}
	}
	out := logs.String()
	if n := strings.Count(out, `msg="crossing denied"`); n != 1 {
		t.Fatalf("log has %d denial lines, want 1:\n%s", n, out)
	}
	if strings.Contains(out, "\x1b") || !strings.Contains(out, "broker=egress") || !strings.Contains(out, "receipt=1") ||
		!strings.Contains(out, "egress.allow has no entry for evil.example:443") {
		t.Errorf("denial line = %q: want receipt, broker, escaped target and rule", out)
	}
}
