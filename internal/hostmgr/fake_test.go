package hostmgr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/hostmgr/proto"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/sandbox/fake"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/testkit"
)

// fakeDaemon is a daemon on the fake provider (package fake): the daemon
// path with nothing Linux-specific behind the seam.
func fakeDaemon(t *testing.T, p *fake.Provider) *Daemon {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "state"), store.DefaultPool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	d, err := New(Options{StateDir: filepath.Join(dir, "state"), Store: st, Provider: p, VolumeDir: filepath.Join(dir, "volumes")})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// testCall serves one request as root, as the protocol would, and decodes the
// final result into out.
func (d *Daemon) testCall(t *testing.T, op string, args any, files []*os.File, out any) error {
	t.Helper()
	b, _ := json.Marshal(args)
	var res proto.Response
	err := d.handle(context.Background(), proto.Peer{UID: 0}, proto.Request{Version: proto.Version, Op: op, Args: b}, files,
		func(r proto.Response) error { res = r; return nil })
	if err != nil {
		return err
	}
	if out != nil && res.Final {
		return json.Unmarshal(res.Result, out)
	}
	return nil
}

// The daemon creates, starts and stops a sandbox of a second provider
// through the lifecycle: the main program runs (the file it writes is
// observed here) and the sandbox is admitted at SHARED from the fake's
// evidence.
func TestDaemonWithFakeProvider(t *testing.T) {
	p := &fake.Provider{}
	d := fakeDaemon(t, p)
	marker := filepath.Join(t.TempDir(), "ran")
	var i Info
	if err := d.testCall(t, "create", CreateArgs{Name: "f1", Spec: Spec{Level: "SHARED", Argv: []string{"/bin/sh", "-c", `: > "$0"`, marker}}}, nil, &i); err != nil {
		t.Fatalf("create: %v", err)
	}
	if err := d.testCall(t, "start", NameArgs{Name: "f1"}, nil, &i); err != nil {
		t.Fatalf("start: %v", err)
	}
	if i.State != store.DRunning || i.Level != sandbox.Shared.String() {
		t.Errorf("started: state %s level %s, want running SHARED", i.State, i.Level)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(marker); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the main program did not run")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := d.testCall(t, "stop", NameArgs{Name: "f1"}, nil, &i); err != nil {
		t.Fatalf("stop: %v", err)
	}
}

// Asking the daemon for a level the fake cannot evidence fails closed,
// and the typed failure arrives over the protocol: unsupported at
// selection (nothing provisioned, no record left), evidence_insufficient
// at admission when the fake overstates its capability (the program
// never runs, the sandbox ends stopped).
func TestDaemonFakeProviderFailsClosed(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	argv := []string{"/bin/sh", "-c", `: > "$0"`, marker}

	p := &fake.Provider{}
	d := fakeDaemon(t, p)
	err := d.testCall(t, "create", CreateArgs{Name: "f2", Spec: Spec{Argv: argv}}, nil, nil)
	var pe *proto.Error
	if !errors.As(err, &pe) || pe.Failure != failure.KindUnsupported {
		t.Fatalf("create at DEDICATED_CONTAINER on the fake = %v, want failure unsupported", err)
	}
	if n := p.Provisioned(); n != 0 {
		t.Errorf("%d sandboxes provisioned after the refusal, want 0", n)
	}
	if _, err := d.o.Store.DaemonSandbox(context.Background(), "f2"); err == nil {
		t.Error("a record of the refused sandbox is left")
	}

	over := &fake.Provider{ClaimLevel: sandbox.DedicatedContainer}
	d = fakeDaemon(t, over)
	if err := d.testCall(t, "create", CreateArgs{Name: "f3", Spec: Spec{Argv: argv}}, nil, nil); err != nil {
		t.Fatalf("create on the overstating fake: %v", err)
	}
	err = d.testCall(t, "start", NameArgs{Name: "f3"}, nil, nil)
	if !errors.As(err, &pe) || pe.Failure != failure.KindEvidence {
		t.Fatalf("start at DEDICATED_CONTAINER on the overstating fake = %v, want failure evidence_insufficient", err)
	}
	time.Sleep(100 * time.Millisecond)
	if _, serr := os.Stat(marker); serr == nil {
		t.Error("the program ran although admission refused")
	}
	rec, err := d.o.Store.DaemonSandbox(context.Background(), "f3")
	if err != nil || rec.State != store.DStopped {
		t.Errorf("after the refusal: record %+v, %v; want stopped", rec, err)
	}
}

// A descriptor the caller does not own, or whose group the caller is not
// in, is refused (the workspace rule, for binds and rootfs too); one the
// caller owns, of its group or of one of its supplementary groups, passes.
func TestCheckOwned(t *testing.T) {
	testkit.RequireRoot(t) // to chown the test directory
	dir := t.TempDir()
	if err := os.Chown(dir, 54321, 54322); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, tt := range []struct {
		name string
		peer proto.Peer
		ok   bool
	}{
		{"root", proto.Peer{UID: 0, GID: 0}, true},
		{"the owner, its group", proto.Peer{UID: 54321, GID: 54322}, true},
		{"the owner, a supplementary group", proto.Peer{UID: 54321, GID: 1, Groups: []uint32{7, 54322}}, true},
		{"another uid", proto.Peer{UID: 54320, GID: 54322}, false},
		{"the owner, not in the group", proto.Peer{UID: 54321, GID: 1, Groups: []uint32{7}}, false},
	} {
		err := checkOwned(f, tt.peer, "bind /x", false)
		if tt.ok && err != nil || !tt.ok && proto.KindOf(err) != proto.KindUnauthorized {
			t.Errorf("%s: checkOwned = %v, want ok=%v (else unauthorized)", tt.name, err, tt.ok)
		}
	}
}

// The per-user quota holds under concurrent creates: the check and the
// record are one step, so 16 creates at once by a user with a limit of 2
// leave exactly 2 sandboxes (positive control: the first 2 are admitted).
func TestDaemonQuotaConcurrentCreates(t *testing.T) {
	p := &fake.Provider{}
	d := fakeDaemon(t, p)
	d.o.MaxPerUser = 2
	peer := proto.Peer{UID: 1000, GID: 1000}
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, _ := json.Marshal(CreateArgs{Name: fmt.Sprintf("q%d", i), Spec: Spec{Level: "SHARED"}})
			var res proto.Response
			err := d.handle(context.Background(), peer, proto.Request{Version: proto.Version, Op: "create", Args: b}, nil,
				func(r proto.Response) error { res = r; return nil })
			if err == nil && res.Final && res.Error == nil {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	recs, err := d.o.Store.DaemonSandboxes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if ok != 2 || len(recs) != 2 || p.Provisioned() != 2 {
		t.Errorf("64 concurrent creates under a limit of 2: %d admitted, %d records, %d provisioned; want 2 each", ok, len(recs), p.Provisioned())
	}
}

// A create names at most MaxVolumeMounts volume mounts: each is a bind the
// root daemon opens, walks for sockets and clones as a mount tree, and a
// request frame has room for thousands. One more is refused before
// anything is provisioned; exactly the limit is admitted (positive
// control).
func TestDaemonCreateVolumeMountsBounded(t *testing.T) {
	p := &fake.Provider{}
	d := fakeDaemon(t, p)
	if err := d.testCall(t, "volume_create", NameArgs{Name: "v"}, nil, nil); err != nil {
		t.Fatalf("volume create: %v", err)
	}
	mounts := func(n int) []VolumeMount {
		var out []VolumeMount
		for i := range n {
			out = append(out, VolumeMount{Name: "v", Target: fmt.Sprintf("/v%d", i), ReadOnly: true})
		}
		return out
	}
	err := d.testCall(t, "create", CreateArgs{Name: "many", Spec: Spec{Level: "SHARED", Volumes: mounts(MaxVolumeMounts + 1)}}, nil, nil)
	if proto.KindOf(err) != proto.KindBadRequest || p.Provisioned() != 0 {
		t.Errorf("create with %d volume mounts = %v (%d provisioned); want bad_request, none", MaxVolumeMounts+1, err, p.Provisioned())
	}
	if err := d.testCall(t, "create", CreateArgs{Name: "max", Spec: Spec{Level: "SHARED", Volumes: mounts(MaxVolumeMounts)}}, nil, nil); err != nil {
		t.Errorf("create with %d volume mounts: %v", MaxVolumeMounts, err)
	}
}
