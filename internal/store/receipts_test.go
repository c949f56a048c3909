package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
)

// TestReceiptsFilterDecisionSince: --decision and --since select in the
// store, by the indexed columns, and compose with the other filters and
// the limit.
func TestReceiptsFilterDecisionSince(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), testPool)
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	rows := []struct {
		at       time.Duration
		broker   string
		decision string
	}{
		{0, "egress", crossing.Deny},
		{time.Minute, "model", crossing.Allow},
		{2 * time.Minute, "egress", crossing.Allow},
		{3 * time.Minute, "model", crossing.Deny},
		{4 * time.Minute, "egress", crossing.Deny},
	}
	var ids []int64
	for i, r := range rows {
		id, err := s.RecordReceipt(ctx, crossing.Receipt{Time: t0.Add(r.at), Identity: crossing.Identity{Workload: "w", SandboxID: "sb"},
			Broker: r.broker, Decision: r.decision, Target: "t" + string(rune('a'+i))})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	got := func(f ReceiptFilter) []int64 {
		t.Helper()
		rcs, err := s.Receipts(ctx, f)
		if err != nil {
			t.Fatalf("Receipts(%+v) = %v", f, err)
		}
		var out []int64
		for _, rc := range rcs {
			out = append(out, rc.ID)
		}
		return out
	}
	for _, c := range []struct {
		name string
		f    ReceiptFilter
		want []int64
	}{
		{"all", ReceiptFilter{}, ids},
		{"deny", ReceiptFilter{Decision: crossing.Deny}, []int64{ids[0], ids[3], ids[4]}},
		{"allow", ReceiptFilter{Decision: crossing.Allow}, []int64{ids[1], ids[2]}},
		{"since", ReceiptFilter{Since: t0.Add(2 * time.Minute)}, ids[2:]},
		{"deny since", ReceiptFilter{Decision: crossing.Deny, Since: t0.Add(90 * time.Second)}, []int64{ids[3], ids[4]}},
		{"deny egress", ReceiptFilter{Decision: crossing.Deny, Broker: "egress"}, []int64{ids[0], ids[4]}},
		{"deny last 1", ReceiptFilter{Decision: crossing.Deny, Limit: 1}, []int64{ids[4]}},
		{"since future", ReceiptFilter{Since: t0.Add(time.Hour)}, nil},
	} {
		if g := got(c.f); !equalIDs(g, c.want) {
			t.Errorf("%s: Receipts(%+v) = %v, want %v", c.name, c.f, g, c.want)
		}
	}
	rc, err := s.Receipt(ctx, ids[3])
	if err != nil || rc.ID != ids[3] || rc.Target != "td" {
		t.Errorf("Receipt(%d) = %+v, %v", ids[3], rc, err)
	}
	if _, err := s.Receipt(ctx, 9999); !errors.Is(err, ErrNoReceipt) {
		t.Errorf("Receipt(9999) = %v, want ErrNoReceipt", err)
	}
	// The filters are served by the indexes of schema version 8.
	for _, q := range []string{
		`EXPLAIN QUERY PLAN SELECT id FROM receipts WHERE decision = 'deny' ORDER BY id DESC`,
		`EXPLAIN QUERY PLAN SELECT id FROM receipts WHERE time >= 5`,
	} {
		var plan string
		r, err := s.db.QueryContext(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for r.Next() {
			var a, b, c any
			var d string
			if err := r.Scan(&a, &b, &c, &d); err != nil {
				t.Fatal(err)
			}
			plan += d + "; "
		}
		r.Close()
		if !containsAny(plan, "receipts_decision", "receipts_time") {
			t.Errorf("%s: plan %q uses no receipts index", q, plan)
		}
	}
}

func equalIDs(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func containsAny(s string, subs ...string) bool {
	for _, x := range subs {
		if strings.Contains(s, x) {
			return true
		}
	}
	return false
}
