package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"
	"github.com/google/go-cmp/cmp"
)

// testPool is small enough to exhaust and far from any real host range.
var testPool = Pool{Base: 1 << 20, Size: 65536, Slots: 64}

// noHostFiles points at files that do not exist, so tests never depend on
// the machine's /etc.
var noHostFiles = hostFiles{
	subuid: "/nonexistent/cordon-test/subuid",
	subgid: "/nonexistent/cordon-test/subgid",
	passwd: "/nonexistent/cordon-test/passwd",
	group:  "/nonexistent/cordon-test/group",
}

var testOwner = Owner{PID: 4242, StartTime: 123456789, BootID: "00000000-0000-0000-0000-000000000001"}

func openTest(t testing.TB, dir string, pool Pool) *Store {
	t.Helper()
	s, err := open(dir, pool, noHostFiles)
	if err != nil {
		t.Fatalf("open(%q, %+v) = %v", dir, pool, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func rec(id string) Record {
	return Record{ID: id, Kind: KindRun, Workload: "wl-" + id, Owner: testOwner}
}

func begin(t testing.TB, s *Store, id string) Record {
	t.Helper()
	r, err := s.Begin(context.Background(), rec(id))
	if err != nil {
		t.Fatalf("Begin(%q) = %v", id, err)
	}
	return r
}

func TestBeginDistinctSlots(t *testing.T) {
	s := openTest(t, t.TempDir(), testPool)
	created := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	for i, want := range []Lease{
		{Slot: 0, UID: 1 << 20, GID: 1 << 20, Size: 65536},
		{Slot: 1, UID: 1<<20 + 65536, GID: 1<<20 + 65536, Size: 65536},
	} {
		r := rec(fmt.Sprint("sb", i))
		r.Created = created
		r.State = StateRunning // ignored: Begin always starts provisioning
		got, err := s.Begin(context.Background(), r)
		if err != nil {
			t.Fatalf("Begin(%q) = %v", r.ID, err)
		}
		r.Lease, r.State = want, StateProvisioning
		if diff := cmp.Diff(r, got); diff != "" {
			t.Errorf("Begin(%q) mismatch (-want +got):\n%s", r.ID, diff)
		}
	}
}

func TestFinishReleasesSlot(t *testing.T) {
	s := openTest(t, t.TempDir(), testPool)
	ctx := context.Background()
	for _, id := range []string{"a", "b", "c"} {
		begin(t, s, id)
	}
	steps := []struct {
		finish, begin string
		want          uint32
	}{
		{finish: "b", begin: "d", want: 1},
		{finish: "a", begin: "e", want: 0},
		{finish: "c", begin: "f", want: 2},
		{finish: "", begin: "g", want: 3},
	}
	for _, st := range steps {
		if st.finish != "" {
			if err := s.Finish(ctx, st.finish); err != nil {
				t.Fatalf("Finish(%q) = %v", st.finish, err)
			}
		}
		if got := begin(t, s, st.begin).Lease.Slot; got != st.want {
			t.Errorf("Begin(%q) after Finish(%q): slot %d, want %d", st.begin, st.finish, got, st.want)
		}
	}
}

func TestPoolExhausted(t *testing.T) {
	s := openTest(t, t.TempDir(), Pool{Base: 1 << 20, Size: 65536, Slots: 2})
	begin(t, s, "a")
	begin(t, s, "b")
	_, err := s.Begin(context.Background(), rec("c"))
	if !errors.Is(err, ErrPoolExhausted) {
		t.Fatalf("Begin(%q) on a full pool = %v, want %v", "c", err, ErrPoolExhausted)
	}
	var ex *ExhaustedError
	if !errors.As(err, &ex) || *ex != (ExhaustedError{InUse: 2, Slots: 2}) {
		t.Errorf("Begin(%q) = %#v, want *ExhaustedError{InUse: 2, Slots: 2}", "c", err)
	}
	if _, err := s.Get(context.Background(), "c"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(%q) after failed Begin = %v, want %v", "c", err, ErrNotFound)
	}
}

// A lease granted under one pool must still be respected after the pool
// changes shape: the check is on host ids, not slot numbers.
func TestPoolChangeRespectsLiveLeases(t *testing.T) {
	dir := t.TempDir()
	big := openTest(t, dir, Pool{Base: 1 << 20, Size: 65536, Slots: 4})
	begin(t, big, "wide") // ids [1<<20, 1<<20+65536)
	small := openTest(t, dir, Pool{Base: 1 << 20, Size: 32768, Slots: 8})
	if got := begin(t, small, "narrow").Lease; got.Slot != 2 {
		t.Errorf("Begin under half-size pool: lease %+v, want slot 2 (slots 0 and 1 overlap the live lease)", got)
	}
}

func TestBeginDuplicateID(t *testing.T) {
	s := openTest(t, t.TempDir(), testPool)
	begin(t, s, "dup")
	if _, err := s.Begin(context.Background(), rec("dup")); !errors.Is(err, ErrExists) {
		t.Errorf("second Begin(%q) = %v, want %v", "dup", err, ErrExists)
	}
}

func TestBeginRejectsInvalid(t *testing.T) {
	s := openTest(t, t.TempDir(), testPool)
	for _, tc := range []struct {
		name string
		edit func(*Record)
	}{
		{"empty id", func(r *Record) { r.ID = "" }},
		{"long id", func(r *Record) { r.ID = strings.Repeat("x", maxIDLen+1) }},
		{"bad utf8 id", func(r *Record) { r.ID = "\xff" }},
		{"unknown kind", func(r *Record) { r.Kind = "vm" }},
		{"no owner pid", func(r *Record) { r.Owner.PID = 0 }},
		{"no boot id", func(r *Record) { r.Owner.BootID = "" }},
		{"empty resource", func(r *Record) { r.Resources = []string{""} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rec("x")
			tc.edit(&r)
			if _, err := s.Begin(context.Background(), r); err == nil {
				t.Errorf("Begin(%+v) = nil error, want a rejection", r)
			}
		})
	}
	if got, err := s.List(context.Background()); err != nil || len(got) != 0 {
		t.Errorf("List() after rejected Begins = %v, %v, want no records", got, err)
	}
}

func TestRecordRoundTrip(t *testing.T) {
	s := openTest(t, t.TempDir(), testPool)
	ctx := context.Background()
	in := rec("round")
	in.Owner.StartTime = 1<<64 - 1 // survives the int64 column
	in.Resources = []string{"/sys/fs/cgroup/cordon/round"}
	want, err := s.Begin(ctx, in)
	if err != nil {
		t.Fatalf("Begin(%q) = %v", in.ID, err)
	}
	other := begin(t, s, "other")

	for _, res := range []string{"/run/netns/cordon-round", "/var/lib/cordon/scratch/round", "/run/netns/cordon-round"} {
		if err := s.AddResource(ctx, "round", res); err != nil {
			t.Fatalf("AddResource(%q, %q) = %v", "round", res, err)
		}
	}
	if err := s.SetState(ctx, "round", StateRunning); err != nil {
		t.Fatalf("SetState(%q, %q) = %v", "round", StateRunning, err)
	}
	want.State = StateRunning
	want.Resources = append(want.Resources, "/run/netns/cordon-round", "/var/lib/cordon/scratch/round")

	got, err := s.Get(ctx, "round")
	if err != nil {
		t.Fatalf("Get(%q) = %v", "round", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Get(%q) mismatch (-want +got):\n%s", "round", diff)
	}
	list, err := s.List(ctx)
	if err != nil {
		t.Fatalf("List() = %v", err)
	}
	if diff := cmp.Diff([]Record{want, other}, list); diff != "" {
		t.Errorf("List() mismatch (-want +got):\n%s", diff)
	}
}

func TestMissingRecord(t *testing.T) {
	s := openTest(t, t.TempDir(), testPool)
	ctx := context.Background()
	for name, op := range map[string]func() error{
		"Get":         func() error { _, err := s.Get(ctx, "nope"); return err },
		"AddResource": func() error { return s.AddResource(ctx, "nope", "/x") },
		"SetState":    func() error { return s.SetState(ctx, "nope", StateStopping) },
		"Finish":      func() error { return s.Finish(ctx, "nope") },
	} {
		if err := op(); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s(%q) = %v, want %v", name, "nope", err, ErrNotFound)
		}
	}
}

func TestSetStateRejectsUnknown(t *testing.T) {
	s := openTest(t, t.TempDir(), testPool)
	begin(t, s, "a")
	if err := s.SetState(context.Background(), "a", "exploded"); err == nil {
		t.Errorf("SetState(%q, %q) = nil, want an error", "a", "exploded")
	}
}

// checkDistinct fails unless slots is exactly 0..len(slots)-1: no slot twice,
// and always the lowest free one.
func checkDistinct(t *testing.T, slots []uint32) {
	t.Helper()
	slices.Sort(slots)
	for i, s := range slots {
		if s != uint32(i) {
			t.Fatalf("slots handed out = %v, want 0..%d each exactly once", slots, len(slots)-1)
		}
	}
}

func TestConcurrentBegin(t *testing.T) {
	const workers, each = 8, 6
	for _, tc := range []struct {
		name    string
		handles int
	}{
		{"one handle", 1},
		{"two handles", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			stores := make([]*Store, tc.handles)
			var wg sync.WaitGroup
			for i := range stores { // open concurrently on a fresh dir: races the schema setup too
				wg.Go(func() { stores[i] = openTest(t, dir, testPool) })
			}
			wg.Wait()
			var mu sync.Mutex
			var slots []uint32
			for w := range workers {
				wg.Go(func() {
					s := stores[w%len(stores)]
					for i := range each {
						id := fmt.Sprintf("w%d-%d", w, i)
						r, err := s.Begin(context.Background(), rec(id))
						if err != nil {
							t.Errorf("Begin(%q) = %v", id, err)
							return
						}
						mu.Lock()
						slots = append(slots, r.Lease.Slot)
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if len(slots) != workers*each {
				t.Fatalf("%d Begins succeeded, want %d", len(slots), workers*each)
			}
			checkDistinct(t, slots)
		})
	}
}

// helperEnv names the state dir each TestHelperBegin child opens.
const helperEnv = "CORDON_STORE_TEST_HELPER_DIR"

// TestConcurrentProcesses runs several test binaries against one state dir,
// as several `cordon run` would.
func TestConcurrentProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	const procs, each = 4, 8
	dir := t.TempDir()
	cmds := make([]*exec.Cmd, procs)
	outs := make([]strings.Builder, procs)
	for i := range cmds {
		cmds[i] = testkit.HelperTest(t, "TestHelperBegin", helperEnv+"="+dir, "CORDON_STORE_TEST_HELPER_TAG="+strconv.Itoa(i),
			"CORDON_STORE_TEST_HELPER_N="+strconv.Itoa(each))
		cmds[i].Stdout, cmds[i].Stderr = &outs[i], &outs[i]
		if err := cmds[i].Start(); err != nil {
			t.Fatalf("start helper: %v", err)
		}
	}
	var slots []uint32
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("helper %d: %v\n%s", i, err, outs[i].String())
		}
		for line := range strings.Lines(outs[i].String()) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "slot "); ok {
				n, err := strconv.ParseUint(v, 10, 32)
				if err != nil {
					t.Fatalf("helper %d printed %q", i, line)
				}
				slots = append(slots, uint32(n))
			}
		}
	}
	if len(slots) != procs*each {
		t.Fatalf("helpers reported %d slots, want %d", len(slots), procs*each)
	}
	checkDistinct(t, slots)
}

// TestHelperBegin is the body of each TestConcurrentProcesses child.
func TestHelperBegin(t *testing.T) {
	testkit.OnlyAsHelper(t)
	dir := os.Getenv(helperEnv)
	n, _ := strconv.Atoi(os.Getenv("CORDON_STORE_TEST_HELPER_N"))
	s := openTest(t, dir, testPool)
	for i := range n {
		r := begin(t, s, fmt.Sprintf("p%s-%d", os.Getenv("CORDON_STORE_TEST_HELPER_TAG"), i))
		fmt.Printf("slot %d\n", r.Lease.Slot)
	}
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestOpenRefusesPool(t *testing.T) {
	good := Pool{Base: 1 << 30, Size: 65536, Slots: 16} // [1073741824, 1074790400)
	for _, tc := range []struct {
		name                          string
		pool                          Pool
		subuid, subgid, passwd, group string
		wantErr                       bool
	}{
		{name: "clear", pool: good, subuid: "root:100000:65536\nalice:1074790400:65536\n", passwd: "root:x:0:0:root:/root:/bin/sh\n", wantErr: false},
		{name: "subuid overlap", pool: good, subuid: "root:100000:65536\nbob:1074790399:1\n", wantErr: true},
		{name: "subuid covers pool", pool: good, subuid: "carol:65536:4294901759\n", wantErr: true},
		{name: "subgid overlap", pool: good, subgid: "bob:1073741824:65536\n", wantErr: true},
		{name: "malformed subuid", pool: good, subuid: "root:100000\n", wantErr: true},
		{name: "passwd uid inside", pool: good, passwd: "svc:x:1073741900:100::/:/bin/false\n", wantErr: true},
		{name: "group gid inside", pool: good, group: "svc:x:1073741900:\n", wantErr: true},
		{name: "host ids", pool: Pool{Base: 1000, Size: 65536, Slots: 1}, wantErr: true},
		{name: "past last id", pool: Pool{Base: 1<<32 - 65536, Size: 65536, Slots: 1}, wantErr: true},
		{name: "zero size", pool: Pool{Base: 1 << 30, Size: 0, Slots: 1}, wantErr: true},
		{name: "zero slots", pool: Pool{Base: 1 << 30, Size: 65536, Slots: 0}, wantErr: true},
		{name: "default", pool: DefaultPool, wantErr: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			etc := t.TempDir()
			host := hostFiles{
				subuid: writeFile(t, etc, "subuid", tc.subuid),
				subgid: writeFile(t, etc, "subgid", tc.subgid),
				passwd: writeFile(t, etc, "passwd", tc.passwd),
				group:  writeFile(t, etc, "group", tc.group),
			}
			s, err := open(t.TempDir(), tc.pool, host)
			if err == nil {
				s.Close()
			}
			if gotErr := err != nil; gotErr != tc.wantErr {
				t.Errorf("open(%+v) = %v, want error: %v", tc.pool, err, tc.wantErr)
			}
		})
	}
}

func TestOpenPermissions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "cordon")
	s := openTest(t, dir, testPool)
	begin(t, s, "a") // makes SQLite create the -wal and -shm files
	for path, want := range map[string]os.FileMode{
		dir:                               0o700,
		filepath.Join(dir, dbName):        0o600,
		filepath.Join(dir, dbName+"-wal"): 0o600,
		filepath.Join(dir, dbName+"-shm"): 0o600,
	} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("mode of %s = %#o, want %#o", path, got, want)
		}
	}

	shared := t.TempDir()
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if s, err := open(shared, testPool, noHostFiles); err == nil {
		s.Close()
		t.Errorf("Open(world-writable dir) = nil error, want a refusal")
	}
}

func TestSchemaVersionMismatch(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, testPool)
	if _, err := s.db.Exec("PRAGMA user_version = 99"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err := open(dir, testPool, noHostFiles); !errors.Is(err, ErrSchemaVersion) {
		if err == nil {
			s.Close()
		}
		t.Errorf("open(db at version 99) = %v, want %v", err, ErrSchemaVersion)
	}
}

func TestDSNEscapesPath(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a?b#c d%")
	s := openTest(t, dir, testPool)
	begin(t, s, "a")
	if _, err := os.Stat(filepath.Join(dir, dbName)); err != nil {
		t.Errorf("database not at %s: %v", filepath.Join(dir, dbName), err)
	}
	var mode string
	if err := s.db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode = %q, %v, want wal", mode, err)
	}
}

func BenchmarkOpen(b *testing.B) {
	dir := b.TempDir()
	openTest(b, dir, DefaultPool).Close() // the database exists, as on every run but the first
	bench := func(b *testing.B) {
		for b.Loop() {
			s, err := open(dir, DefaultPool, systemHostFiles)
			if err != nil {
				b.Fatal(err)
			}
			s.Close()
		}
	}
	// alone: the closing handle is the last, so SQLite checkpoints the WAL.
	b.Run("alone", bench)
	// shared: another cordon holds the database open.
	openTest(b, dir, DefaultPool)
	b.Run("shared", bench)
}

func BenchmarkBeginFinish(b *testing.B) {
	s := openTest(b, b.TempDir(), DefaultPool)
	ctx := context.Background()
	for i := range 8 { // a few live neighbours, as on a busy host
		begin(b, s, fmt.Sprint("live", i))
	}
	var inBegin, inFinish time.Duration
	i := 0
	for b.Loop() {
		id := fmt.Sprint("sb", i)
		i++
		t0 := time.Now()
		if _, err := s.Begin(ctx, rec(id)); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := s.Finish(ctx, id); err != nil {
			b.Fatal(err)
		}
		inBegin += t1.Sub(t0)
		inFinish += time.Since(t1)
	}
	b.ReportMetric(float64(inBegin.Nanoseconds())/float64(b.N), "begin-ns/op")
	b.ReportMetric(float64(inFinish.Nanoseconds())/float64(b.N), "finish-ns/op")
}
