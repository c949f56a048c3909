package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/broker/state"
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/testkit"
)

var (
	cliScopeA = store.StateScope{Tenant: "acme", Workload: "agent", Purpose: "coding"}
	cliScopeB = store.StateScope{Tenant: "acme", Workload: "agent", Purpose: "review"}
)

// stateTest is a state dir with entries in two scopes of one workload.
func stateTest(t *testing.T) string {
	t.Helper()
	testkit.RequireRoot(t)
	dir := t.TempDir()
	st, err := store.Open(dir, store.DefaultPool)
	if err != nil {
		t.Fatalf("store.Open = %v", err)
	}
	defer st.Close()
	for _, w := range []struct {
		sc         store.StateScope
		key, value string
	}{{cliScopeA, "notes/a", "alpha"}, {cliScopeA, "notes/b", "\x00beta"}, {cliScopeB, "notes/a", "other purpose"}} {
		if _, _, _, err := st.PutState(context.Background(), w.sc, store.StateWrite{Key: w.key, Value: []byte(w.value), SandboxID: "sb-1"},
			store.StateLimits{QuotaBytes: 1 << 20, QuotaEntries: 10}, nil); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func runState(dir string, args ...string) (string, error) {
	var out, errOut bytes.Buffer
	g := &globals{stateDir: dir, leaseSlots: store.DefaultPool.Slots, stdout: &out, stderr: &errOut}
	cmd := stateCmd(g)
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

func TestStateLs(t *testing.T) {
	dir := stateTest(t)
	out, err := runState(dir, "ls", "--workload", "agent", "--json")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("ls --json:\n%s", out)
	}
	var l struct {
		store.StateScope
		state.Entry
	}
	if err := json.Unmarshal([]byte(lines[2]), &l); err != nil || l.Purpose != "review" || l.Key != "notes/a" || l.Value != nil || l.Provenance.SandboxID != "sb-1" {
		t.Fatalf("ls line %q: %+v %v", lines[2], l, err)
	}
	out, _ = runState(dir, "ls", "--purpose", "coding", "--prefix", "notes/b")
	if !strings.Contains(out, "KEY") || !strings.Contains(out, "notes/b") || strings.Contains(out, "notes/a") {
		t.Fatalf("ls table:\n%s", out)
	}
}

func TestStateExport(t *testing.T) {
	dir := stateTest(t)
	if _, err := runState(dir, "export", "--workload", "agent", "--tenant", "acme"); !isUsage(err) {
		t.Fatalf("export without --purpose = %v, want a usage error", err)
	}
	out, err := runState(dir, "export", "--workload", "agent", "--tenant", "acme", "--purpose", "coding")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Scope   state.Scope   `json:"scope"`
		Usage   state.Usage   `json:"usage"`
		Entries []state.Entry `json:"entries"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || doc.Scope.Purpose != "coding" || len(doc.Entries) != 2 ||
		string(doc.Entries[1].Value) != "\x00beta" || doc.Usage.Entries != 2 {
		t.Fatalf("export %s: %+v %v", out, doc, err)
	}
}

func isUsage(err error) bool {
	var se *failure.Error
	return errors.As(err, &se) && se.Kind == failure.KindUsage
}

// Reset takes exactly one scope, named in full, and leaves every other
// scope of the workload as it was.
func TestStateReset(t *testing.T) {
	dir := stateTest(t)
	for _, args := range [][]string{
		{"reset"},
		{"reset", "--workload", "agent"},
		{"reset", "--workload", "agent", "--tenant", "acme"},
		{"reset", "--tenant", "acme", "--purpose", "coding"},
	} {
		if _, err := runState(dir, args...); !isUsage(err) {
			t.Errorf("%v = %v, want a usage error", args, err)
		}
	}
	out, err := runState(dir, "reset", "--workload", "agent", "--tenant", "acme", "--purpose", "coding")
	if err != nil || !strings.Contains(out, "2 entries removed") {
		t.Fatalf("reset: %q %v", out, err)
	}
	st, err := store.Open(dir, store.DefaultPool)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	if _, _, err := st.GetState(ctx, cliScopeA, "notes/a", nil); !errors.Is(err, store.ErrStateNotFound) {
		t.Fatalf("reset scope still has notes/a: %v", err)
	}
	if e, _, err := st.GetState(ctx, cliScopeB, "notes/a", nil); err != nil || string(e.Value) != "other purpose" {
		t.Fatalf("other scope after reset: %+v %v", e, err)
	}
	rcs, _ := st.Receipts(ctx, store.ReceiptFilter{Broker: state.Name})
	if len(rcs) != 1 || rcs[0].Action != "reset" || rcs[0].Identity != (crossing.Identity{Tenant: "acme", Workload: "agent", Purpose: "coding"}) ||
		!strings.Contains(rcs[0].Reason, "operator reset") {
		t.Fatalf("reset receipts = %+v", rcs)
	}
	if out, err := runState(dir, "purge"); err != nil || !strings.Contains(out, "0 expired") {
		t.Fatalf("purge: %q %v", out, err)
	}
}
