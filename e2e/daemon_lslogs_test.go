package e2e

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"
)

// `sandbox ls --json` reports when a sandbox created since the daemon
// started was created (not the zero time), and the same after a restart
// (which adopts the running sandbox from its record).
func TestDaemonLsCreated(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	d := startDaemon(t, st)
	before := time.Now().Add(-2 * time.Second)
	if r := d.cli("sandbox", "create", "c", "--workspace", userWorkspace(t), "--", "/bin/sleep", "1000"); r.Code != 0 {
		t.Fatalf("create: %d %s", r.Code, r.Stderr)
	}
	if r := d.cli("sandbox", "start", "c"); r.Code != 0 {
		t.Fatalf("start: %d %s", r.Code, r.Stderr)
	}
	after := time.Now().Add(2 * time.Second)
	created := func() time.Time {
		r := d.cli("sandbox", "ls", "--json")
		var is []struct {
			Name    string    `json:"name"`
			Created time.Time `json:"created"`
		}
		if err := json.Unmarshal([]byte(r.Stdout), &is); err != nil || len(is) != 1 {
			t.Fatalf("ls: %v %s %s", err, r.Stdout, r.Stderr)
		}
		return is[0].Created
	}
	c1 := created()
	if c1.Before(before) || c1.After(after) {
		t.Fatalf("created %v, want between %v and %v", c1, before, after)
	}
	d.kill()
	d.start()
	if c2 := created(); !c2.Equal(c1) {
		t.Fatalf("created after a restart %v, before %v", c2, c1)
	}
}
