package hostmgr

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/hostmgr/proto"
	"github.com/cordon-project/cordon/internal/sandbox/fake"
)

// healthAs asks for health over the handler as uid.
func healthAs(t *testing.T, d *Daemon, uid uint32) Health {
	t.Helper()
	var res proto.Response
	if err := d.handle(context.Background(), proto.Peer{UID: uid, GID: uid}, proto.Request{Version: proto.Version, Op: "health"}, nil,
		func(r proto.Response) error { res = r; return nil }); err != nil {
		t.Fatalf("health as %d: %v", uid, err)
	}
	var h Health
	if err := json.Unmarshal(res.Result, &h); err != nil {
		t.Fatal(err)
	}
	return h
}

func createAs(t *testing.T, d *Daemon, uid uint32, name string) {
	t.Helper()
	b, _ := json.Marshal(CreateArgs{Name: name, Spec: Spec{Level: "SHARED"}})
	var res proto.Response
	if err := d.handle(context.Background(), proto.Peer{UID: uid, GID: uid}, proto.Request{Version: proto.Version, Op: "create", Args: b}, nil,
		func(r proto.Response) error { res = r; return nil }); err != nil || res.Error != nil {
		t.Fatalf("create %s as %d: %v %v", name, uid, err, res.Error)
	}
}

// Root sees every sandbox by state; a user sees counts of their own only
// (positive control: root's count includes the other user's sandboxes,
// so the filter is what hides them). A refused reload makes the daemon
// unhealthy, with the reason for root only; a set that loads heals it.
func TestDaemonHealthScopes(t *testing.T) {
	d := fakeDaemon(t, &fake.Provider{})
	d.o.BuildVersion = "v9.9.9"
	createAs(t, d, 0, "root-a")
	createAs(t, d, 1000, "alice-a")
	createAs(t, d, 1000, "alice-b")
	createAs(t, d, 1001, "bob-a")

	root := healthAs(t, d, 0)
	if !root.Healthy || root.Scope != "all" || root.Sandboxes["created"] != 4 || !root.Store.OK || root.Version != "v9.9.9" || root.PID != os.Getpid() {
		t.Fatalf("root: %+v, want healthy, all, 4 created", root)
	}
	alice := healthAs(t, d, 1000)
	if alice.Scope != "own" || alice.Sandboxes["created"] != 2 || len(alice.Sandboxes) != 1 {
		t.Fatalf("alice: %+v, want her 2 only", alice)
	}
	carol := healthAs(t, d, 1002)
	if len(carol.Sandboxes) != 0 || !carol.Healthy {
		t.Fatalf("carol (no sandboxes): %+v", carol)
	}

	d.o.PolicyDir = t.TempDir()
	os.WriteFile(filepath.Join(d.o.PolicyDir, "bad.cedar"), []byte(`forbid(principal, action, resource`), 0o644)
	if err := d.Reload(); err == nil {
		t.Fatal("a bad set loaded")
	}
	root = healthAs(t, d, 0)
	if root.Healthy || !root.Policy.Refused || root.Policy.RefusedError == "" {
		t.Fatalf("root after a refused reload: %+v", root)
	}
	if alice = healthAs(t, d, 1000); alice.Healthy || !alice.Policy.Refused || alice.Policy.RefusedError != "" {
		t.Fatalf("alice after a refused reload: %+v, want refused without the reason", alice)
	}
	os.Remove(filepath.Join(d.o.PolicyDir, "bad.cedar"))
	if err := d.Reload(); err != nil {
		t.Fatal(err)
	}
	if root = healthAs(t, d, 0); !root.Healthy || root.Policy.Refused {
		t.Fatalf("root after a good reload: %+v", root)
	}
}

// The drift loop's last run is reported, and a loop that has not run in
// three intervals makes the daemon unhealthy.
func TestDaemonHealthDriftStale(t *testing.T) {
	d := fakeDaemon(t, &fake.Provider{})
	d.o.DriftEvery = time.Second
	now := time.Now()
	if h := d.health(context.Background(), 0, now); !h.Healthy || h.Drift.LastRun != nil {
		t.Fatalf("fresh: %+v", h)
	}
	if h := d.health(context.Background(), 0, now.Add(2*time.Minute)); h.Healthy || !h.Drift.Stale {
		t.Fatalf("two minutes without a scan: %+v, want stale", h)
	}
	d.checkDrift(context.Background())
	if h := d.health(context.Background(), 0, time.Now()); !h.Healthy || h.Drift.LastRun == nil {
		t.Fatalf("after a scan: %+v", h)
	}
}
