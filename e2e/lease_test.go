package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/cordon-project/cordon/internal/testkit"
)

// Two sandboxes from two different state directories, alive at the same
// time, must not share a UID/GID range: the store only knows its own
// directory, so the host-wide lease locks are what keeps them apart.
func TestLeaseAcrossStateDirs(t *testing.T) {
	testkit.RequireRoot(t)
	dirs := []string{newStateDir(t), newStateDir(t)}
	ev := []string{filepath.Join(t.TempDir(), "a.json"), filepath.Join(t.TempDir(), "b.json")}
	var wg sync.WaitGroup
	res := make([]result, 2)
	for i := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i] = cordon(t, cordonBin, dirs[i], "run", "--evidence", ev[i], "--", "/bin/sleep", "1")
		}()
	}
	wg.Wait()
	var uids [2]uint32
	for i := range res {
		if res[i].Code != 0 {
			t.Fatalf("run %d = %d, stderr %s", i, res[i].Code, res[i].Stderr)
		}
		b, err := os.ReadFile(ev[i])
		if err != nil {
			t.Fatal(err)
		}
		var rec struct {
			Lease struct{ UID uint32 } `json:"lease"`
		}
		if err := json.Unmarshal(b, &rec); err != nil {
			t.Fatal(err)
		}
		uids[i] = rec.Lease.UID
	}
	if uids[0] == uids[1] {
		t.Fatalf("leases from two state dirs = %d and %d, want different ranges", uids[0], uids[1])
	}
}
