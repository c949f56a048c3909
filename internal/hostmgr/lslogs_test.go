package hostmgr

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/sandbox/fake"
	"github.com/cordon-project/cordon/internal/store"
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

// readLogs polls the logs op as `logs -f` does, until Done or the deadline.
func readLogs(t *testing.T, d *Daemon, name string, deadline time.Duration) (string, bool) {
	t.Helper()
	var out strings.Builder
	var off int64
	end := time.Now().Add(deadline)
	for time.Now().Before(end) {
		var ch LogsChunk
		if err := d.testCall(t, "logs", LogsArgs{Name: name, Offset: off}, nil, &ch); err != nil {
			t.Fatalf("logs: %v", err)
		}
		out.Write(ch.Data)
		off = ch.Next
		if ch.Done {
			return out.String(), true
		}
		if len(ch.Data) == 0 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	return out.String(), false
}

// The log is done once the main program has exited, although the
// sandbox stays up (execs still work): `logs -f` ends then. Control:
// while the program runs the log is not done; stopping the sandbox makes
// it done. (The fake closes the daemon's log file before it runs the
// program, so what the program wrote is checked in e2e, on the real
// provider: TestDaemonLogsFollowEndsWithTheProgram.)
func TestDaemonLogsDoneWhenMainExits(t *testing.T) {
	d := fakeDaemon(t, &fake.Provider{})
	for name, argv := range map[string][]string{
		"exits": {"/bin/true"},
		"runs":  {"/bin/sleep", "30"},
	} {
		if err := d.testCall(t, "create", CreateArgs{Name: name, Spec: Spec{Level: "SHARED", Argv: argv}}, nil, nil); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		if err := d.testCall(t, "start", NameArgs{Name: name}, nil, nil); err != nil {
			t.Fatalf("start %s: %v", name, err)
		}
	}
	t.Cleanup(func() { _ = d.testCall(t, "stop", NameArgs{Name: "runs"}, nil, nil) })

	_, done := readLogs(t, d, "exits", 10*time.Second)
	if !done {
		t.Fatal("logs of an exited program never done")
	}
	var i Info
	if err := d.testCall(t, "status", NameArgs{Name: "exits"}, nil, &i); err != nil || i.State != store.DRunning || i.MainExit == "" {
		t.Errorf("status after the exit: %v state %s main_exit %q, want running with an exit", err, i.State, i.MainExit)
	}

	if _, done = readLogs(t, d, "runs", time.Second); done {
		t.Fatal("logs of a running program done")
	}
	if err := d.testCall(t, "stop", NameArgs{Name: "runs"}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, done = readLogs(t, d, "runs", 5*time.Second); !done {
		t.Fatal("logs of a stopped sandbox not done")
	}
}

// logs with Tail starts where the last lines of the log begin; a
// negative offset is the end. Control: offset 0 reads the whole log.
func TestDaemonLogsTail(t *testing.T) {
	d := fakeDaemon(t, &fake.Provider{})
	var i Info
	if err := d.testCall(t, "create", CreateArgs{Name: "t", Spec: Spec{Level: "SHARED"}}, nil, &i); err != nil {
		t.Fatalf("create: %v", err)
	}
	const log = "one\ntwo\nthree\n"
	f, err := openLog(d.o.StateDir, i.ID)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(log)
	f.Close()
	for _, c := range []struct {
		args LogsArgs
		want string
	}{
		{LogsArgs{Name: "t"}, log},
		{LogsArgs{Name: "t", Tail: 2}, "two\nthree\n"},
		{LogsArgs{Name: "t", Tail: 9}, log},
		{LogsArgs{Name: "t", Offset: -1}, ""},
	} {
		var ch LogsChunk
		if err := d.testCall(t, "logs", c.args, nil, &ch); err != nil || string(ch.Data) != c.want || ch.Next != int64(len(log)) {
			t.Errorf("logs %+v = %q next %d (%v), want %q next %d", c.args, ch.Data, ch.Next, err, c.want, len(log))
		}
	}
}
