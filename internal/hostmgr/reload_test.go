package hostmgr

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/sandbox/fake"
)

// Reload puts a valid host policy set in force and refuses an invalid one
// as a whole, keeping the set in force and logging why; the drift scan's
// re-read refuses the same set, logging it once, not once per scan.
func TestReloadRefusesInvalidSetKeepsOld(t *testing.T) {
	d := fakeDaemon(t, &fake.Provider{})
	var log bytes.Buffer
	d.log = slog.New(slog.NewTextHandler(&log, nil))
	d.o.PolicyDir = t.TempDir()
	write := func(name, src string) {
		if err := os.WriteFile(filepath.Join(d.o.PolicyDir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	names := func() (out []string) {
		for _, p := range d.hostPolicies() {
			out = append(out, p.Name)
		}
		return out
	}

	write("a.cedar", `@id("no-evil") forbid(principal, action == Action::"model.invoke", resource == Model::"evil");`)
	if err := d.Reload(); err != nil {
		t.Fatalf("valid set: %v", err)
	}
	if got := names(); len(got) != 1 || got[0] != "a.cedar" || !strings.Contains(log.String(), "host policy in force") {
		t.Fatalf("in force after a valid reload: %v\n%s", got, log.String())
	}

	write("b.cedar", `permit(principal, action == Action::"model.invoke", resource) when { resource.name > 3 };`)
	err := d.Reload()
	if err == nil || failure.KindOf(err) != failure.KindUsage || !strings.Contains(err.Error(), "b.cedar") {
		t.Fatalf("invalid set: %v (kind %s), want a usage error naming b.cedar", err, failure.KindOf(err))
	}
	if got := names(); len(got) != 1 || got[0] != "a.cedar" {
		t.Fatalf("in force after a refused reload: %v, want the previous set", got)
	}
	if !strings.Contains(log.String(), "previous set stays in force") {
		t.Fatalf("refusal not logged:\n%s", log.String())
	}

	log.Reset()
	d.refreshPolicy()
	d.refreshPolicy()
	if n := strings.Count(log.String(), "host policy refused"); n != 1 || len(names()) != 1 {
		t.Fatalf("drift re-read of a refused set: logged %d times, in force %v\n%s", n, names(), log.String())
	}

	// Fixed: the scan puts the new set in force.
	write("b.cedar", `@id("no-evil2") forbid(principal, action == Action::"model.invoke", resource == Model::"evil2");`)
	d.refreshPolicy()
	if got := names(); len(got) != 2 {
		t.Fatalf("in force after the fix: %v", got)
	}
}

// A daemon does not start on an invalid host policy set (fail closed:
// never serve with a set every gateway sandbox would fail to plan with,
// nor silently without the directory's forbids).
func TestRunRefusesInvalidHostPolicy(t *testing.T) {
	d := fakeDaemon(t, &fake.Provider{})
	d.o.PolicyDir = t.TempDir()
	d.o.Socket = filepath.Join(t.TempDir(), "d.sock")
	os.WriteFile(filepath.Join(d.o.PolicyDir, "bad.cedar"), []byte(`forbid(principal, action, resource`), 0o644)
	err := d.Run(context.Background())
	if failure.KindOf(err) != failure.KindUsage || !strings.Contains(err.Error(), "bad.cedar") {
		t.Fatalf("Run: %v, want a usage error naming bad.cedar", err)
	}
	if _, serr := os.Stat(d.o.Socket); serr == nil {
		t.Fatal("the daemon listened with an invalid host policy set")
	}
}
