package store

import (
	"context"
	"errors"
	"testing"

	"github.com/cordon-project/cordon/internal/crossing"
)

// A version-6 database (no ingress budget columns) is migrated in place:
// its usage is kept and the ingress budgets count and limit from then on.
func TestMigrateVersion6AddsIngressColumns(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	id := crossing.Identity{Workload: "w", Tenant: "t", SandboxID: "s1"}
	s := openTest(t, dir, testPool)
	r, _, err := s.Reserve(ctx, id, "egress", crossing.Amount{Connections: 1}, 0, Budget{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Settle(ctx, r, crossing.Amount{Connections: 1, EgressBytes: 10}, Budget{}); err != nil {
		t.Fatal(err)
	}
	// Make it the version-6 database it would have been.
	for _, c := range version7Columns {
		if _, err := s.db.ExecContext(ctx, "ALTER TABLE "+c[0]+" DROP COLUMN "+c[1]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.db.ExecContext(ctx, "PRAGMA user_version = 6"); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s = openTest(t, dir, testPool)
	b := Budget{Limits: crossing.Amount{IngressConnections: 1}}
	r, st, err := s.Reserve(ctx, id, "ingress", crossing.Amount{IngressConnections: 1}, 0, b)
	if err != nil {
		t.Fatalf("Reserve after the migration = %v", err)
	}
	if st.Used.Connections != 1 || st.Used.EgressBytes != 10 || st.Used.IngressConnections != 1 {
		t.Errorf("budget after the migration = %+v, want the egress usage kept and one ingress connection held", st.Used)
	}
	if _, err := s.Settle(ctx, r, crossing.Amount{IngressConnections: 1, IngressBytes: 5}, b); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Reserve(ctx, id, "ingress", crossing.Amount{IngressConnections: 1}, 0, b); !errors.Is(err, crossing.ErrBudgetExceeded) {
		t.Errorf("second ingress connection past the limit = %v, want ErrBudgetExceeded", err)
	}
	var v int
	if err := s.db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil || v != schemaVersion {
		t.Errorf("user_version = %d, %v; want %d", v, err, schemaVersion)
	}
}
