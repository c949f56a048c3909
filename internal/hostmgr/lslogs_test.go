package hostmgr

import (
	"context"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/sandbox/fake"
)

// A sandbox created since the daemon started is listed with its creation
// time: the one the store holds (what a restarted daemon reports), not
// the zero time.
func TestDaemonLsCreatedSinceStart(t *testing.T) {
	d := fakeDaemon(t, &fake.Provider{})
	before := time.Now().Add(-time.Second)
	if err := d.testCall(t, "create", CreateArgs{Name: "c1", Spec: Spec{Level: "SHARED", Argv: []string{"/bin/true"}}}, nil, nil); err != nil {
		t.Fatalf("create: %v", err)
	}
	after := time.Now().Add(time.Second)
	var is []Info
	if err := d.testCall(t, "ls", struct{}{}, nil, &is); err != nil || len(is) != 1 {
		t.Fatalf("ls: %v %+v", err, is)
	}
	rec, err := d.o.Store.DaemonSandbox(context.Background(), "c1")
	if err != nil {
		t.Fatal(err)
	}
	if got := is[0].Created; got.Before(before) || got.After(after) || !got.Equal(rec.Created) {
		t.Fatalf("ls created = %v, want the store's %v (between %v and %v)", got, rec.Created, before, after)
	}
	// Control: a daemon started on the same store (records loaded from
	// it) reports the same time.
	d2, err := New(d.o)
	if err != nil {
		t.Fatal(err)
	}
	var is2 []Info
	if err := d2.testCall(t, "ls", struct{}{}, nil, &is2); err != nil || len(is2) != 1 || !is2[0].Created.Equal(rec.Created) {
		t.Fatalf("ls of a daemon loading the record: %v %+v, want created %v", err, is2, rec.Created)
	}
}
