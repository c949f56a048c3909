package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cordon-project/cordon/internal/crossing"
)

var (
	scopeA = StateScope{Tenant: "acme", Workload: "agent", Purpose: "coding"}
	limits = StateLimits{QuotaBytes: 1 << 20, QuotaEntries: 100}
)

func openState(t *testing.T) (*Store, *fakeClock) {
	t.Helper()
	s := openTest(t, t.TempDir(), testPool)
	c := &fakeClock{t: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
	s.now = c.now
	return s, c
}

func put(t *testing.T, s *Store, sc StateScope, key, value string) StateEntry {
	t.Helper()
	e, _, _, err := s.PutState(context.Background(), sc, StateWrite{Key: key, Value: []byte(value), SandboxID: "sb-1"}, limits, nil)
	if err != nil {
		t.Fatalf("PutState(%v, %q) = %v", sc, key, err)
	}
	return e
}

func TestStatePutGet(t *testing.T) {
	s, c := openState(t)
	ctx := context.Background()
	rc := crossing.Receipt{Time: c.now(), Identity: crossing.Identity{Workload: "agent", Tenant: "acme", SandboxID: "sb-1"}, Broker: "state", Action: "put", Target: "notes/a", Decision: crossing.Allow}
	e, created, rid, err := s.PutState(ctx, scopeA, StateWrite{Key: "notes/a", Value: []byte("hello"), SandboxID: "sb-1"}, limits, &rc)
	if err != nil || !created || rid == 0 || e.Version != 1 || e.ReceiptID != rid || e.Size != 5 {
		t.Fatalf("PutState = %+v created %v rid %d, %v", e, created, rid, err)
	}
	c.advance(time.Minute)
	e2, created, _, err := s.PutState(ctx, scopeA, StateWrite{Key: "notes/a", Value: []byte("hello again"), SandboxID: "sb-2", IfMatch: 1}, limits, nil)
	if err != nil || created || e2.Version != 2 || !e2.Created.Equal(e.Created) || !e2.Updated.Equal(c.now()) {
		t.Fatalf("second PutState = %+v created %v, %v", e2, created, err)
	}
	got, _, err := s.GetState(ctx, scopeA, "notes/a", nil)
	want := StateEntry{Key: "notes/a", Value: []byte("hello again"), Size: 11, Version: 2, Created: e.Created, Updated: c.now(), SandboxID: "sb-2"}
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("GetState (-want +got):\n%s", d)
	}
	// The write's receipt is recorded with the value's digest.
	rcs, _ := s.Receipts(ctx, ReceiptFilter{Broker: "state"})
	if len(rcs) != 1 || rcs[0].ID != rid || rcs[0].RequestDigest != digestOf([]byte("hello")) || rcs[0].BytesIn != 5 || !strings.Contains(rcs[0].Reason, "version 1") {
		t.Fatalf("receipts = %+v", rcs)
	}
	// An empty value is a value.
	put(t, s, scopeA, "empty", "")
	if got, _, err := s.GetState(ctx, scopeA, "empty", nil); err != nil || got.Value == nil || len(got.Value) != 0 {
		t.Fatalf("empty value: %+v %v", got, err)
	}
}

// Every query names the whole scope: another tenant's, workload's or
// purpose's entry is exactly as absent as a key nobody wrote.
func TestStateForeignIsAbsent(t *testing.T) {
	s, _ := openState(t)
	ctx := context.Background()
	put(t, s, scopeA, "notes/a", "mine")
	for _, sc := range []StateScope{
		{Tenant: "other", Workload: "agent", Purpose: "coding"},
		{Tenant: "acme", Workload: "other", Purpose: "coding"},
		{Tenant: "acme", Workload: "agent", Purpose: "other"},
	} {
		_, _, foreign := s.GetState(ctx, sc, "notes/a", nil)
		_, _, absent := s.GetState(ctx, sc, "notes/never", nil)
		if !errors.Is(foreign, ErrStateNotFound) || foreign.Error() != absent.Error() {
			t.Errorf("GetState(%v, foreign) = %v, absent = %v; want the same ErrStateNotFound", sc, foreign, absent)
		}
		if _, err := s.DeleteState(ctx, sc, "notes/a", 0, nil); !errors.Is(err, ErrStateNotFound) {
			t.Errorf("DeleteState(%v, foreign) = %v", sc, err)
		}
		if p, _, err := s.ListState(ctx, sc, StateQuery{Limit: 10}, nil); err != nil || len(p.Entries) != 0 || p.Usage != (StateUsage{}) {
			t.Errorf("ListState(%v) = %+v, %v", sc, p, err)
		}
		// Writing the same key in another scope is another entry.
		if _, _, _, err := s.PutState(ctx, sc, StateWrite{Key: "notes/a", Value: []byte("theirs"), IfAbsent: true}, limits, nil); err != nil {
			t.Errorf("PutState(%v, if absent) = %v", sc, err)
		}
	}
	if got, _, err := s.GetState(ctx, scopeA, "notes/a", nil); err != nil || string(got.Value) != "mine" {
		t.Fatalf("own entry = %q, %v", got.Value, err)
	}
	if _, _, err := s.GetState(ctx, StateScope{Tenant: "acme", Workload: "agent"}, "notes/a", nil); err == nil {
		t.Fatal("GetState with an incomplete scope succeeded")
	}
}

func TestStateVersionPreconditions(t *testing.T) {
	s, _ := openState(t)
	ctx := context.Background()
	w := func(key, v string, ifMatch int64, exists, absent bool) (StateEntry, error) {
		e, _, _, err := s.PutState(ctx, scopeA, StateWrite{Key: key, Value: []byte(v), IfMatch: ifMatch, IfExists: exists, IfAbsent: absent}, limits, nil)
		return e, err
	}
	stale := func(err error, current int64) bool {
		var se *StateStaleError
		return errors.As(err, &se) && errors.Is(err, ErrStateStale) && se.Current == current
	}
	if _, err := w("k", "1", 0, true, false); !stale(err, 0) {
		t.Fatalf("If-Match * on absent = %v", err)
	}
	if _, err := w("k", "1", 3, false, false); !stale(err, 0) {
		t.Fatalf("If-Match 3 on absent = %v", err)
	}
	if e, err := w("k", "1", 0, false, true); err != nil || e.Version != 1 {
		t.Fatalf("create-only = %+v %v", e, err)
	}
	if _, err := w("k", "2", 0, false, true); !stale(err, 1) {
		t.Fatalf("create-only on existing = %v", err)
	}
	if e, err := w("k", "2", 1, false, false); err != nil || e.Version != 2 {
		t.Fatalf("If-Match 1 = %+v %v", e, err)
	}
	// Two writers read version 2; the first wins, the second is stale.
	if _, err := w("k", "3a", 2, false, false); err != nil {
		t.Fatal(err)
	}
	if _, err := w("k", "3b", 2, false, false); !stale(err, 3) {
		t.Fatalf("lost update not detected: %v", err)
	}
	if _, err := s.DeleteState(ctx, scopeA, "k", 2, nil); !stale(err, 3) {
		t.Fatalf("stale delete = %v", err)
	}
	if _, err := s.DeleteState(ctx, scopeA, "k", 3, nil); err != nil {
		t.Fatal(err)
	}
	// Versions are never reused in a scope: not after a delete, not after
	// a reset, so a version from before cannot match what comes after.
	if e, err := w("k", "new", 0, false, false); err != nil || e.Version != 4 {
		t.Fatalf("after delete: %+v %v", e, err)
	}
	if _, _, err := s.ResetState(ctx, scopeA, nil); err != nil {
		t.Fatal(err)
	}
	if e, err := w("k", "newer", 0, false, false); err != nil || e.Version != 5 {
		t.Fatalf("after reset: %+v %v", e, err)
	}
	if _, err := w("k", "x", 4, false, false); !stale(err, 5) {
		t.Fatalf("version from before the reset matched: %v", err)
	}
}

func TestStateQuota(t *testing.T) {
	s, _ := openState(t)
	ctx := context.Background()
	lim := StateLimits{QuotaBytes: 100, QuotaEntries: 3}
	w := func(key string, n int) error {
		_, _, _, err := s.PutState(ctx, scopeA, StateWrite{Key: key, Value: []byte(strings.Repeat("x", n))}, lim, nil)
		return err
	}
	quota := func(err error, which string) bool {
		var qe *StateQuotaError
		return errors.As(err, &qe) && errors.Is(err, ErrStateQuota) && qe.Quota == which
	}
	if err := w("a", 40); err != nil { // 41 bytes
		t.Fatal(err)
	}
	if err := w("b", 58); err != nil { // 59: 100 in all
		t.Fatal(err)
	}
	if err := w("c", 0); !quota(err, "bytes") { // 101
		t.Fatalf("over the byte quota: %v", err)
	}
	// Replacing an entry counts the difference.
	if err := w("b", 59); !quota(err, "bytes") {
		t.Fatalf("growing over the byte quota: %v", err)
	}
	if err := w("b", 10); err != nil {
		t.Fatalf("shrinking: %v", err)
	}
	if err := w("c", 1); err != nil {
		t.Fatal(err)
	}
	if err := w("d", 1); !quota(err, "entries") {
		t.Fatalf("over the entry quota: %v", err)
	}
	var qe *StateQuotaError
	if err := w("d", 1); !errors.As(err, &qe) || *qe != (StateQuotaError{Quota: "entries", Limit: 3, Used: 3, Requested: 4}) {
		t.Fatalf("quota error = %+v", qe)
	}
	// A scope over a lowered quota may still shrink, never grow.
	lim = StateLimits{QuotaBytes: 10, QuotaEntries: 1}
	if err := w("a", 1); err != nil {
		t.Fatalf("shrinking over a lowered quota: %v", err)
	}
	if err := w("a", 2); !quota(err, "bytes") {
		t.Fatalf("growing over a lowered quota: %v", err)
	}
	if _, err := s.DeleteState(ctx, scopeA, "a", 0, nil); err != nil {
		t.Fatal(err)
	}
	// The quota is the scope's: another scope has its own.
	if _, _, _, err := s.PutState(ctx, StateScope{Tenant: "acme", Workload: "agent", Purpose: "other"}, StateWrite{Key: "a", Value: []byte("x")}, lim, nil); err != nil {
		t.Fatalf("another scope: %v", err)
	}
}

// Concurrent writers — two store handles, as two cordon processes — can
// never together pass the quota: the check and the write are one
// transaction.
func TestStateQuotaAtomic(t *testing.T) {
	dir := t.TempDir()
	s1, s2 := openTest(t, dir, testPool), openTest(t, dir, testPool)
	lim := StateLimits{QuotaBytes: 1 << 20, QuotaEntries: 10}
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, refused := 0, 0
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := s1
			if i%2 == 1 {
				s = s2
			}
			_, _, _, err := s.PutState(ctx, scopeA, StateWrite{Key: fmt.Sprintf("k%02d", i), Value: []byte("v")}, lim, nil)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, ErrStateQuota):
				refused++
			default:
				t.Errorf("PutState = %v", err)
			}
		}()
	}
	wg.Wait()
	p, _, err := s1.ListState(ctx, scopeA, StateQuery{Limit: 100}, nil)
	if err != nil || ok != 10 || refused != 30 || len(p.Entries) != 10 || p.Usage.Entries != 10 {
		t.Fatalf("ok %d refused %d, %d entries (%+v), %v; want 10 written", ok, refused, len(p.Entries), p.Usage, err)
	}
	// Versions stayed unique under contention.
	seen := map[int64]bool{}
	for _, e := range p.Entries {
		if seen[e.Version] {
			t.Fatalf("version %d given twice", e.Version)
		}
		seen[e.Version] = true
	}
}

func TestStateResetOnlyItsScope(t *testing.T) {
	s, _ := openState(t)
	ctx := context.Background()
	others := []StateScope{
		{Tenant: "other", Workload: "agent", Purpose: "coding"},
		{Tenant: "acme", Workload: "other", Purpose: "coding"},
		{Tenant: "acme", Workload: "agent", Purpose: "other"},
	}
	for _, sc := range append([]StateScope{scopeA}, others...) {
		put(t, s, sc, "a", "1")
		put(t, s, sc, "b", "2")
	}
	rc := crossing.Receipt{Broker: "state", Action: "reset", Target: "*", Decision: crossing.Allow}
	n, rid, err := s.ResetState(ctx, scopeA, &rc)
	if err != nil || n != 2 || rid == 0 {
		t.Fatalf("ResetState = %d %d %v", n, rid, err)
	}
	if p, _, _ := s.ListState(ctx, scopeA, StateQuery{Limit: 10}, nil); len(p.Entries) != 0 {
		t.Fatalf("reset scope still holds %+v", p.Entries)
	}
	for _, sc := range others {
		if p, _, _ := s.ListState(ctx, sc, StateQuery{Limit: 10}, nil); len(p.Entries) != 2 {
			t.Errorf("scope %v lost entries: %+v", sc, p.Entries)
		}
	}
	// The reset is evidence, kept whatever happens to the state.
	rcs, _ := s.Receipts(ctx, ReceiptFilter{Broker: "state"})
	if len(rcs) != 1 || !strings.Contains(rcs[0].Reason, "2 entries removed") {
		t.Fatalf("reset receipt = %+v", rcs)
	}
	scopes, err := s.StateScopes(ctx, StateScope{Tenant: "acme"})
	if err != nil || len(scopes) != 2 || scopes[0].Workload != "agent" || scopes[0].Purpose != "other" || scopes[0].Entries != 2 || scopes[0].Bytes != 4 {
		t.Fatalf("StateScopes = %+v %v", scopes, err)
	}
}

func TestStateRetention(t *testing.T) {
	s, c := openState(t)
	ctx := context.Background()
	lim := StateLimits{QuotaBytes: 1000, QuotaEntries: 2, Retention: time.Hour}
	w := func(key string) StateEntry {
		e, _, _, err := s.PutState(ctx, scopeA, StateWrite{Key: key, Value: []byte("v")}, lim, nil)
		if err != nil {
			t.Fatalf("PutState(%q) = %v", key, err)
		}
		return e
	}
	if e := w("old"); !e.Expires.Equal(c.now().Add(time.Hour)) {
		t.Fatalf("expires = %v", e.Expires)
	}
	c.advance(40 * time.Minute)
	w("new")
	c.advance(30 * time.Minute) // old: 70 min without a write
	if _, _, err := s.GetState(ctx, scopeA, "old", nil); !errors.Is(err, ErrStateNotFound) {
		t.Fatalf("expired entry read: %v", err)
	}
	if p, _, _ := s.ListState(ctx, scopeA, StateQuery{Limit: 10}, nil); len(p.Entries) != 1 || p.Entries[0].Key != "new" || p.Usage.Entries != 1 {
		t.Fatalf("list after expiry = %+v", p)
	}
	// An expired entry frees its quota: a third entry fits in two.
	w("third")
	var rows int
	s.db.QueryRow(`SELECT count(*) FROM state_entries`).Scan(&rows)
	if rows != 2 {
		t.Fatalf("%d rows, want the expired one removed", rows)
	}
	// A shorter retention applies to what is stored; 0 keeps it.
	c.advance(10 * time.Minute)
	if n, err := s.RetainState(ctx, scopeA, 30*time.Minute); err != nil || n != 1 {
		t.Fatalf("RetainState(30m) = %d %v, want new (40 min old) removed", n, err)
	}
	if _, err := s.RetainState(ctx, scopeA, 0); err != nil {
		t.Fatal(err)
	}
	c.advance(1000 * time.Hour)
	if n, err := s.PurgeExpiredState(ctx); err != nil || n != 0 {
		t.Fatalf("PurgeExpiredState = %d %v", n, err)
	}
	if got, _, err := s.GetState(ctx, scopeA, "third", nil); err != nil || !got.Expires.IsZero() {
		t.Fatalf("entry kept forever = %+v %v", got, err)
	}
}

func TestStateListPages(t *testing.T) {
	s, _ := openState(t)
	ctx := context.Background()
	for _, k := range []string{"a", "notes/1", "notes/2", "notes/3", "notes0", "z"} {
		put(t, s, scopeA, k, strings.Repeat("v", 10))
	}
	keys := func(p StatePage) string {
		var ks []string
		for _, e := range p.Entries {
			ks = append(ks, e.Key)
		}
		return strings.Join(ks, ",")
	}
	p, _, err := s.ListState(ctx, scopeA, StateQuery{Prefix: "notes/", Limit: 2}, nil)
	if err != nil || keys(p) != "notes/1,notes/2" || !p.More || p.Entries[0].Value != nil || p.Usage.Entries != 6 {
		t.Fatalf("page 1 = %s more %v usage %+v, %v", keys(p), p.More, p.Usage, err)
	}
	p, _, _ = s.ListState(ctx, scopeA, StateQuery{Prefix: "notes/", After: "notes/2", Limit: 2}, nil)
	if keys(p) != "notes/3" || p.More {
		t.Fatalf("page 2 = %s more %v", keys(p), p.More)
	}
	// Values bounded per page, at least one entry per page.
	p, _, _ = s.ListState(ctx, scopeA, StateQuery{Limit: 100, Values: true, MaxBytes: 25}, nil)
	if keys(p) != "a,notes/1" || !p.More || string(p.Entries[1].Value) != "vvvvvvvvvv" {
		t.Fatalf("value page = %s more %v", keys(p), p.More)
	}
	p, _, _ = s.ListState(ctx, scopeA, StateQuery{Limit: 100, Values: true, MaxBytes: 1}, nil)
	if keys(p) != "a" || !p.More {
		t.Fatalf("one-entry page = %s more %v", keys(p), p.More)
	}
}

// State is in the database: it outlives the process that wrote it.
func TestStateSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, testPool)
	put(t, s, scopeA, "notes/a", "durable")
	s.Close()
	s = openTest(t, dir, testPool)
	got, _, err := s.GetState(context.Background(), scopeA, "notes/a", nil)
	if err != nil || string(got.Value) != "durable" || got.Version != 1 {
		t.Fatalf("after reopening: %+v %v", got, err)
	}
	if e := put(t, s, scopeA, "notes/b", "x"); e.Version != 2 {
		t.Fatalf("version after reopening = %d, want 2", e.Version)
	}
}

// The per-scope usage the triggers keep is what the entries add up to,
// whatever path changed them.
func TestStateUsageCounters(t *testing.T) {
	s, c := openState(t)
	ctx := context.Background()
	other := StateScope{Tenant: "acme", Workload: "agent", Purpose: "other"}
	lim := StateLimits{Retention: time.Hour}
	for i := range 20 {
		sc := scopeA
		if i%3 == 0 {
			sc = other
		}
		if _, _, _, err := s.PutState(ctx, sc, StateWrite{Key: fmt.Sprintf("k%d", i%7), Value: []byte(strings.Repeat("v", i))}, lim, nil); err != nil {
			t.Fatal(err)
		}
		if i == 10 {
			c.advance(30 * time.Minute)
		}
	}
	s.DeleteState(ctx, scopeA, "k1", 0, nil)
	c.advance(45 * time.Minute) // the writes before i == 10 expire
	s.PurgeExpiredState(ctx)
	s.ResetState(ctx, other, nil)
	put(t, s, other, "again", "xyz")
	agg, err := s.StateScopes(ctx, StateScope{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range agg {
		var got StateUsage
		if err := s.db.QueryRow(`SELECT bytes, entries FROM state_scopes WHERE tenant = ? AND workload = ? AND purpose = ?`,
			a.Tenant, a.Workload, a.Purpose).Scan(&got.Bytes, &got.Entries); err != nil || got != a.StateUsage {
			t.Errorf("scope %v: counters %+v, entries add up to %+v (%v)", a.StateScope, got, a.StateUsage, err)
		}
	}
	if len(agg) != 2 {
		t.Fatalf("scopes = %+v", agg)
	}
}

func BenchmarkStatePutFullScope(b *testing.B) {
	s := openTest(b, b.TempDir(), testPool)
	ctx := context.Background()
	v := []byte(strings.Repeat("x", 1600))
	lim := StateLimits{QuotaBytes: 32 << 20, QuotaEntries: 20000}
	for i := range 10000 {
		if _, _, _, err := s.PutState(ctx, scopeA, StateWrite{Key: fmt.Sprintf("k%05d", i), Value: v}, lim, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := range b.N {
		if _, _, _, err := s.PutState(ctx, scopeA, StateWrite{Key: fmt.Sprintf("k%05d", i%10000), Value: v}, lim, nil); err != nil {
			b.Fatal(err)
		}
	}
}
